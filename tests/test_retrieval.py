"""Structure-aware chunking and BM25 ranking on real tool outputs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from _fixtures import need
from pydantic_ai_history.readback._retrieval import (
    bm25_scores,
    chunk_text,
    detect_kind,
    extract_passages,
    tokenize,
    top_passages,
)


def _read(fixtures_dir: Path, name: str) -> str:
    return need(fixtures_dir / 'tool_outputs' / name).read_text()


@pytest.mark.parametrize(
    ('name', 'kind'),
    [
        ('tau-bench_retail_products.json', 'json'),
        ('octokit-fixtures/paginate-issues.raw-fixture.json', 'json'),
        ('vega_datasets/airports.csv', 'table'),
        ('vega_datasets/seattle-weather.csv', 'table'),
        ('readability-pages/nytimes-3/source.html', 'markdown'),
    ],
)
def test_chunks_are_exact_bounded_spans(fixtures_dir: Path, name: str, kind: str) -> None:
    text = _read(fixtures_dir, name)
    assert detect_kind(text) == kind
    for variant in (text, json.dumps(json.loads(text))) if kind == 'json' else (text,):
        chunks = chunk_text(variant, max_chars=2_000)
        assert len(chunks) > 10
        assert all(c.text == variant[c.start : c.end] and len(c.text) <= 2_000 for c in chunks)
        assert all(a.end <= b.start for a, b in itertools.pairwise(chunks))
        covered = ''.join(variant[a.end : b.start] for a, b in itertools.pairwise(chunks))
        if kind == 'table':
            assert not covered  # no row is lost between chunks


def test_json_chunks_carry_their_path(fixtures_dir: Path) -> None:
    text = _read(fixtures_dir, 'tau-bench_retail_products.json')
    contexts = {c.context for c in chunk_text(text, max_chars=1_000)}
    assert '9783735446 (name: Bicycle) > variants' in contexts or any(
        '(name: Bicycle)' in c for c in contexts
    )


def test_table_chunks_repeat_the_header(fixtures_dir: Path) -> None:
    text = _read(fixtures_dir, 'vega_datasets/airports.csv')
    header = text.splitlines()[0]
    chunks = chunk_text(text, max_chars=1_500)
    assert all(c.context == header for c in chunks)
    assert all(not c.text.startswith('iata,') for c in chunks)  # rows only; the header is the context
    result = extract_passages(text, 'Willow Run airport', 1_500)
    assert header in result.text
    assert 'YIP,Willow Run,Detroit,MI,USA' in result.text


def test_markdown_chunks_follow_headings(fixtures_dir: Path) -> None:
    from pydantic_ai_history.files import ConvertedDocument, read_file

    converted = read_file(
        (fixtures_dir / 'documents' / 'test_blog.html').read_bytes(), media_type='text/html'
    )
    assert isinstance(converted, ConvertedDocument)
    text = converted.text
    assert detect_kind(text) == 'markdown'
    chunks = chunk_text(text, max_chars=800)
    assert all(c.text == text[c.start : c.end] for c in chunks)
    headed = [c for c in chunks if c.text.lstrip().startswith('#')]
    assert headed
    assert all(c.context for c in headed)
    assert all(c.context in c.text for c in headed)  # a heading opens its chunk and names its section


def test_bm25_prefers_rare_identifiers() -> None:
    docs = [
        tokenize(t) for t in ('price 10 price 12 price 14', 'order 9783735446 price 20', 'price price price')
    ]
    scores = bm25_scores(docs, ['9783735446', 'price'])
    assert scores.index(max(scores)) == 1
    assert bm25_scores(docs, []) == [0.0, 0.0, 0.0]
    assert tokenize('product_id: 東京タワー') == ['product', 'id', '東', '京', 'タ', 'ワ', 'ー']


def test_extract_keeps_original_order_and_markers(fixtures_dir: Path) -> None:
    text = _read(fixtures_dir, 'octokit-fixtures/paginate-issues.normalized-fixture.json')
    result = extract_passages(text, 'title of issue 7', 4_000)
    assert result.matched
    assert '"title": "Test issue 7"' in result.text
    assert list(result.shown) == sorted(result.shown)
    assert result.text.startswith('[showing chunk')
    assert f'of {result.chunks_total}' in result.text
    assert len(result.text) <= 4_000
    assert extract_passages(text, 'title of issue 7', 4_000) == result  # deterministic


def test_top_passages_without_a_match_shows_the_beginning(fixtures_dir: Path) -> None:
    text = _read(fixtures_dir, 'vega_datasets/airports.csv')
    out = top_passages(text, 'zzzqqq', 1_000)
    assert out.startswith("[no passage matched 'zzzqqq'")
    assert '00M,Thigpen' in out


def test_a_best_chunk_too_large_is_cut_around_the_query_words() -> None:
    """The best chunk does not fit: the part of it shown starts at the line that holds the query's words (it
    was the chunk's head), and no worse chunk is taken in its place (a short one that fits is often the least
    relevant, a table's last rows)."""
    from pydantic_ai_history.readback._retrieval import rank_passages

    rows = [f'row {i}: nothing to see here, filler text number {i}' for i in range(40)]
    rows[25] = 'row 25: the zebra quokka lives in Mayaguez'
    text = '\n'.join(rows) + '\n\nzebra'
    ranking = rank_passages(text, 'Where does the zebra quokka live?', chunk_chars=1_500)
    assert ranking.order[0] == 0, 'the rows are the best chunk'
    shown = ranking.select(300)
    assert shown.shown == (0,)
    assert 'row 25: the zebra quokka lives in Mayaguez' in shown.text
