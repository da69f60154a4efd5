"""RTF: the text a reader sees in a word processor, and nothing of the markup around it."""

from pydantic_ai_history.files._text import rtf_to_text


def test_a_link_keeps_its_text_and_drops_its_instruction():
    rtf = r'{\rtf1\ansi See {\field{\*\fldinst HYPERLINK "https://example.org"}{\fldrslt the site}} now.\par}'
    assert rtf_to_text(rtf) == 'See the site now.'


def test_list_numbers_are_text():
    rtf = r'{\rtf1\ansi {\listtext\f0 1.\tab}First\par {\listtext\f0 2.\tab}Second\par}'
    assert rtf_to_text(rtf) == '1.\tFirst\n2.\tSecond'


def test_a_character_outside_the_basic_plane_is_one_character():
    text = rtf_to_text(r'{\rtf1\ansi\uc1 smile \u-10179?\u-8704? done\par}')
    assert text == 'smile \U0001f600 done'
    text.encode('utf-8')  # no lone surrogate left


def test_pictures_fonts_and_headers_are_not_text():
    rtf = (
        r'{\rtf1\ansi{\fonttbl{\f0 Times;}}{\header Page 1}{\*\generator W}'
        r'Body{\pict\pngblip 89504e47} end{\footnote a note}\par}'
    )
    assert rtf_to_text(rtf) == 'Body end'


def test_code_page_bytes_decode_with_the_document_code_page():
    assert rtf_to_text(r'{\rtf1\ansi\ansicpg932 \'82\'a0\'82\'a2}') == 'あい'
