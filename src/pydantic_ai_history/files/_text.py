"""Plain text, code and RTF: decoded, then cut to a number of lines and characters per line."""

from __future__ import annotations

import codecs
import contextlib
import re

from ._base import Extraction, FileInfo, Reader
from ._results import Truncation
from ._settings import FileSettings

_BOMS = (
    (codecs.BOM_UTF32_LE, 'utf-32'),
    (codecs.BOM_UTF32_BE, 'utf-32'),
    (codecs.BOM_UTF8, 'utf-8-sig'),
    (codecs.BOM_UTF16_LE, 'utf-16'),
    (codecs.BOM_UTF16_BE, 'utf-16'),
)

# The language a code file is fenced with, then its extensions.
_FENCES = """
python .py .pyi; javascript .js .mjs; typescript .ts; tsx .tsx; jsx .jsx; java .java; c .c .h;
cpp .cpp .cc .hpp; csharp .cs; go .go; rust .rs; ruby .rb; php .php; swift .swift; kotlin .kt; scala .scala;
bash .sh .bash .zsh; powershell .ps1; sql .sql; css .css; scss .scss; toml .toml; ini .ini .cfg;
yaml .yaml .yml; r .r; lua .lua; perl .pl; dockerfile .dockerfile; latex .tex; diff .diff .patch
"""
_FENCE_LANGUAGES = {ext: fence.split()[0] for fence in _FENCES.split(';') for ext in fence.split()[1:]}
"""The language a code file is fenced with, by extension."""


def decode_text(data: bytes) -> str:
    """Decode with a BOM if any, else UTF-8, else the charset `charset_normalizer` detects.

    UTF-8 goes first because detection on short inputs is a guess; a valid UTF-8 decode almost never is.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors='replace')
    with contextlib.suppress(UnicodeDecodeError):
        return data.decode('utf-8')
    from charset_normalizer import from_bytes

    best = from_bytes(data[:1_000_000]).best()
    encoding = best.encoding if best is not None else 'cp1252'
    return data.decode(encoding, errors='replace')


def looks_like_text(data: bytes) -> bool:
    """No NUL bytes near the start (after any UTF-16/32 BOM), and not mostly control characters."""
    head = data[:8192]
    if any(head.startswith(bom) for bom, _ in _BOMS):
        return True
    if b'\x00' in head:
        return False
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    if controls > len(head) * 0.05:
        return False
    try:
        head.decode('utf-8')
        return True
    except UnicodeDecodeError as e:
        # A multi-byte character cut at the 8 KiB boundary is still UTF-8.
        if e.start >= len(head) - 4:
            return True
    from charset_normalizer import from_bytes

    return from_bytes(head).best() is not None


def shorten(value: str, max_chars: int) -> str:
    """`value` cut to `max_chars` characters, saying how many more there were."""
    if len(value) <= max_chars:
        return value
    return f'{value[:max_chars]}… [{len(value) - max_chars:,} more chars]'


def tidy_lines(lines: list[str]) -> str:
    """Lines without trailing blanks, at most one empty line in a row (as markitdown normalizes)."""
    return re.sub(r'\n{3,}', '\n\n', '\n'.join(line.rstrip() for line in lines))


def cut_lines(text: str, settings: FileSettings) -> tuple[str, tuple[Truncation, ...]]:
    """Keep the first `text_max_lines` lines and `text_max_line_chars` characters of each."""
    lines = text.splitlines()
    total_lines = len(lines)
    kept = lines[: settings.text_max_lines]
    total_chars = sum(len(line) for line in kept)
    out = [shorten(line, settings.text_max_line_chars) for line in kept]
    truncations: list[Truncation] = []
    if total_lines > len(kept):
        truncations.append(Truncation('lines', len(kept), total_lines))
        out.append(f'[... {total_lines - len(kept):,} more lines ...]')
    shown_chars = sum(min(len(line), settings.text_max_line_chars) for line in kept)
    if shown_chars < total_chars:
        truncations.append(Truncation('chars', shown_chars, total_chars))
    return '\n'.join(out), tuple(truncations)


def as_text(data: bytes, settings: FileSettings, fmt: str | None, note: str) -> Extraction:
    """`data` shown as plain text within the line limits, with `note` saying why."""
    text, truncations = cut_lines(decode_text(data), settings)
    return Extraction(text, truncations, note=note, format=fmt)


class TextReader(Reader):
    """Plain text, markdown and source code; code is fenced with its language."""

    format = 'text'
    media_types = ('text/plain', 'text/markdown', 'text/x-python', 'text/x-script.python', 'text/javascript')
    extensions = ('.txt', '.md', '.markdown', '.rst', '.log', *_FENCE_LANGUAGES)

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text, truncations = cut_lines(decode_text(data), settings)
        language = _FENCE_LANGUAGES.get(info.extension or '')
        if language is None:
            return Extraction(text, truncations)
        return Extraction(f'```{language}\n{text}\n```', truncations, format=language.capitalize())


# RTF destinations whose content is not document text (fonts, styles, pictures, metadata...). A field's
# instruction is skipped, its result (a link's text) kept; list numbers (`listtext`) are text.
_RTF_SKIP_WORDS = """
aftncn aftnsep aftnsepc annotation atnauthor atndate atnicn atnid atnparent atnref atntime atrfend
atrfstart author background bkmkend bkmkstart blipuid buptim category colorschememapping colortbl
comment company creatim datafield datastore defchp defpap do doccomm docvar dptxbxtext ebcend
ebcstart factoidname falt fchars ffdeftext ffentrymcr ffexitmcr ffformat ffhelptext ffl ffname
ffstattext file filetbl fldinst fldtype fname fontemb fontfile fonttbl footer footerf footerl
footerr footnote formfield ftncn ftnsep ftnsepc g generator gridtbl header headerf headerl headerr
hl hlfr hlinkbase hlloc hlsrc hsv htmltag info keycode keywords latentstyles lchars levelnumbers
leveltext lfolevel linkval list listlevel listname listoverride listoverridetable listpicture
liststylename listtable lsdlockedexcept macc maccPr mailmerge maln malnScr manager margPr
mbar mbarPr mbaseJc mbegChr mborderBox mborderBoxPr mbox mboxPr mchr mcount mctrlPr md mdeg mdegHide
mden mdiff mdPr me mendChr meqArr meqArrPr mf mfName mfPr mfunc mfuncPr mgroupChr mgroupChrPr mgrow
mhideBot mhideLeft mhideRight mhideTop mhtmltag mlim mlimloc mlimlow mlimlowPr mlimupp mlimuppPr mm
mmaddfieldname mmath mmathPict mmathPr mmaxdist mmc mmcJc mmconnectstr mmconnectstrdata mmcPr mmcs
mmdatasource mmheadersource mmmailsubject mmodso mmodsofilter mmodsofldmpdata mmodsomappedname
mmodsoname mmodsorecipdata mmodsosort mmodsosrc mmodsotable mmodsoudl mmodsoudldata mmodsouniquetag
mmPr mmquery mmr mnary mnaryPr mnoBreak mnum mobjDist moMath moMathPara moMathParaPr mopEmu mphant
mphantPr mplcHide mpos mr mrad mradPr mrPr msepChr mshow mshp msPre msPrePr msSub msSubPr msSubSup
msSubSupPr msSup msSupPr mstrikeBLTR mstrikeH mstrikeTLBR mstrikeV msub msubHide msup msupHide
mtransp mtype mvertJc mvfmf mvfml mvtof mvtol mzeroAsc mzeroDesc mzeroWid nesttableprops nextfile
nonesttables objalias objclass objdata object objname objsect objtime oldcprops oldpprops oldsprops
oldtprops oleclsid operator panose password passwordhash pgp pgptbl picprop pict pn pnseclvl pntext
pntxta pntxtb printim private propname protend protstart protusertbl pxe result revtbl revtim
rsidtbl rxe shp shpgrp shpinst shppict shprslt shptxt sn sp staticval stylesheet subject sv svb tc
template themedata title txe ud upr userprops wgrffmtfilter windowcaption writereservation
writereservhash xe xform xmlattrname xmlattrvalue xmlclose xmlname xmlnstbl xmlopen
"""
_RTF_SKIP = frozenset(_RTF_SKIP_WORDS.split())
_RTF_TOKEN = re.compile(
    r"\\([a-z]{1,32})(-?\d{1,10})?[ ]?|\\'([0-9a-f]{2})|\\([^a-z])|([{}])|[\r\n]+|(.)", re.I
)
_RTF_SPECIAL = {
    'par': '\n',
    'sect': '\n\n',
    'page': '\n\n',
    'line': '\n',
    'tab': '\t',
    'emdash': '—',
    'endash': '–',
    'emspace': ' ',
    'enspace': ' ',
    'qmspace': ' ',
    'bullet': '•',
    'lquote': '‘',
    'rquote': '’',
    'ldblquote': '“',
    'rdblquote': '”',
    'row': '\n',
    'cell': ' | ',
}


class _RtfState:
    """The tokenizer's state: the group stack, whether the current destination is skipped, the `\\ucN`
    fallback count, the bytes awaiting decoding and the text so far."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.stack: list[tuple[int, bool]] = []
        self.ignorable = False
        self.uc_skip = 1
        self.skip = 0
        self.out: list[str] = []
        self.pending = bytearray()

    def flush(self) -> None:
        if self.pending:
            self.out.append(self.pending.decode(self.encoding, errors='replace'))
            self.pending.clear()

    def brace(self, brace: str) -> None:
        self.skip = 0
        if brace == '{':
            self.stack.append((self.uc_skip, self.ignorable))
        elif self.stack:
            self.uc_skip, self.ignorable = self.stack.pop()

    def symbol(self, symbol: str) -> None:
        self.skip = 0
        if symbol == '*':
            self.ignorable = True
        elif not self.ignorable and (symbol == '~' or symbol in '{}\\'):
            self.out.append('\xa0' if symbol == '~' else symbol)

    def word(self, word: str, arg: str | None) -> None:
        self.skip = 0
        if word in _RTF_SKIP:
            self.ignorable = True
        elif self.ignorable:
            return
        elif word in _RTF_SPECIAL:
            self.out.append(_RTF_SPECIAL[word])
        elif word == 'uc':
            self.uc_skip = int(arg or 1)
        elif word == 'u' and arg is not None:
            code = int(arg)
            self.out.append(chr(code + 0x10000 if code < 0 else code))
            self.skip = self.uc_skip

    def data(self, hex_byte: str | None, char: str | None) -> None:
        """A `\\'hh` byte or a plain character: skipped after `\\uN`, dropped in a skipped destination."""
        if self.skip > 0:
            self.skip -= 1
        elif self.ignorable:
            return
        elif hex_byte is not None:
            self.pending.append(int(hex_byte, 16))
        elif char is not None:
            self.out.append(char)


def _rtf_encoding(rtf: str) -> str:
    encoding_match = re.search(r'\\ansicpg(\d+)', rtf[:2000])
    encoding = f'cp{encoding_match.group(1)}' if encoding_match else 'cp1252'
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = 'cp1252'
    return encoding


def rtf_to_text(rtf: str) -> str:
    """Strip RTF to its text; markitdown has no RTF converter and would return the raw control words.

    The classic destination-skipping tokenizer: groups push state, `\\*` and known destinations are
    skipped, `\\'hh` bytes decode with the document's code page, `\\uN` with `\\ucN` fallback skipping.
    """
    state = _RtfState(_rtf_encoding(rtf))
    for match in _RTF_TOKEN.finditer(rtf):
        word, arg, hex_byte, symbol, brace, char = match.groups()
        if hex_byte is None:
            state.flush()
        if brace is not None:
            state.brace(brace)
        elif symbol is not None:
            state.symbol(symbol)
        elif word is not None:
            state.word(word, arg)
        elif hex_byte is not None or char is not None:  # line breaks in the source are not text
            state.data(hex_byte, char)
    state.flush()
    # `\uN` writes UTF-16 units: a character outside the BMP arrives as two surrogates, joined here.
    text = ''.join(state.out).encode('utf-16', 'surrogatepass').decode('utf-16', 'replace')
    return tidy_lines(text.splitlines()).strip()


class RtfReader(Reader):
    format = 'RTF'
    media_types = ('application/rtf', 'text/rtf')
    extensions = ('.rtf',)

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        # RTF is 7-bit by spec; latin-1 maps any stray byte to one character without failing.
        text, truncations = cut_lines(rtf_to_text(data.decode('latin-1')), settings)
        return Extraction(text, truncations)
