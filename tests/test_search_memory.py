"""A search without an id streams over the scope: it ranks as BM25 over every chunk did, holds one artifact
at a time, and parallel searches of one scope share one scan."""

from __future__ import annotations

import asyncio
import re

import pytest

from pydantic_ai_history.readback import _search, search_artifacts_text
from pydantic_ai_history.readback._retrieval import rank_documents
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.anyio

HEADER = re.compile(r'\[(art_\w+) \([^)]*\): characters ([\d,]+)-([\d,]+) of ([\d,]+);')
WORDS = ['invoice', 'refund', 'latency', 'region', 'timeout', 'checkout', 'ledger', 'cache', 'retry', 'audit']


def _text(n: int, chars: int) -> str:
    lines: list[str] = []
    size = i = 0
    while size < chars:
        line = (
            f'line {n}-{i}: {WORDS[(n * 7 + i) % 10]} {WORDS[(n + i * 3) % 10]} code E{(n * 31 + i) % 97}\n'
        )
        lines.append(line)
        size += len(line)
        i += 1
    return ''.join(lines)


class CountingStore(MemoryStore):
    """A memory store that counts the reads of whole artifacts."""

    def __init__(self) -> None:
        super().__init__(max_bytes=10**9, max_scope_bytes=10**9)
        self.gets = 0

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        self.gets += 1
        return await super()._get(artifact_id, scope)


async def _filled(count: int, chars: int) -> tuple[CountingStore, list[tuple[str, str]]]:
    store = CountingStore()
    stored: list[tuple[str, str]] = []
    for n in range(count):
        text = _text(n, chars)
        aid = store.artifact_id(text.encode(), scope='s')
        await store.put(aid, text.encode(), media_type='text/plain', source=f'tool t{n}', scope='s')
        stored.append((aid, text))
    return store, stored


def _passages(answer: str) -> list[tuple[str, int, int, int]]:
    return [(m[1], *(int(m[i].replace(',', '')) for i in (2, 3, 4))) for m in HEADER.finditer(answer)]


@pytest.mark.parametrize('query', ['refund E42', 'ledger timeout audit', 'code E7 cache', 'nothing-here'])
async def test_a_search_ranks_as_bm25_over_every_chunk(query: str) -> None:
    store, stored = await _filled(12, 30_000)
    newest_first = list(reversed(stored))  # a listing is most recently used first
    expected = [
        (d, chunk.start, chunk.end, chunk.text)
        for d, chunk in rank_documents([t for _, t in newest_first], query, 6_000)
    ]
    found = await _search.search_scope(store, 's', query, 6_000)
    assert [s.info.artifact_id for s in found.searched] == [a for a, _ in newest_first]
    assert [tuple(p) for p in _search.select_passages(found.passages, 6_000)] == expected
    answer = await search_artifacts_text(store, query, 6_000, scope='s')
    if query == 'nothing-here':
        assert answer.startswith("[no stored passage matched 'nothing-here' in 12 artifact(s).")
        return
    assert expected, 'the query matched nothing: the test proves nothing'
    shown = _passages(answer)
    assert shown, answer[:300]
    for artifact, start, end, total in shown:
        text = dict(stored)[artifact]
        assert total == len(text)
        assert text[start:end].strip('\n') in answer  # a passage is the original between its offsets
    # the answer shows the best of them, in their order (those whose header would pass the limit left out)
    ranked = [(newest_first[d][0], start, end) for d, start, end, _ in expected]
    assert [s[:3] for s in shown] == [r for r in ranked if r in {s[:3] for s in shown}]
    assert shown[0][:3] == ranked[0]


async def test_parallel_searches_share_one_scan_and_hold_one_artifact_at_a_time() -> None:
    artifacts, chars = 20, 200_000
    store, _ = await _filled(artifacts, chars)
    _search.WORKING_SET.reset()
    queries = [f'{WORDS[i]} E{i * 11}' for i in range(8)]
    answers = await asyncio.gather(*(search_artifacts_text(store, q, 4_000, scope='s') for q in queries))
    assert all(a.startswith('[') and 'passage(s) for' in a for a in answers), answers
    # one artifact's bytes and its text at most (and at least that: the counter counts)
    one_artifact = 2 * chars + 1_000
    assert chars <= _search.WORKING_SET.peak <= one_artifact, _search.WORKING_SET.peak
    assert _search.WORKING_SET.held == 0
    # one scan (each artifact once) and one re-read of those holding the best passages, not eight scans
    assert store.gets <= 2 * artifacts, store.gets


async def test_searches_run_one_at_a_time_across_scopes() -> None:
    store, _ = await _filled(6, 200_000)
    other = MemoryStore(max_bytes=10**9, max_scope_bytes=10**9)
    for n in range(6):
        text = _text(n + 100, 200_000).encode()
        await other.put(
            other.artifact_id(text, scope='o'), text, media_type='text/plain', source='t', scope='o'
        )
    _search.WORKING_SET.reset()
    await asyncio.gather(
        *(search_artifacts_text(store, f'refund E{i}', 2_000, scope='s') for i in range(3)),
        *(search_artifacts_text(other, f'ledger E{i}', 2_000, scope='o') for i in range(3)),
    )
    assert _search.WORKING_SET.peak <= 2 * 200_000 + 1_000


async def test_a_cancelled_search_leaves_the_others_their_answers() -> None:
    store, _ = await _filled(6, 50_000)
    first = asyncio.ensure_future(search_artifacts_text(store, 'refund', 2_000, scope='s'))
    others = [
        asyncio.ensure_future(search_artifacts_text(store, q, 2_000, scope='s')) for q in ('ledger', 'cache')
    ]
    await asyncio.sleep(0)
    first.cancel()
    answers = await asyncio.gather(*others)
    assert all('passage(s) for' in a for a in answers)
    assert first.cancelled()
    # and the next search after it starts a scan of its own
    assert 'passage(s) for' in await search_artifacts_text(store, 'audit', 2_000, scope='s')


async def test_a_text_too_wide_for_the_working_set_is_not_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_search, 'SEARCH_WORKING_BYTES', 2_000)
    store = MemoryStore()
    ascii_text = ('refund ledger ' * 60).encode()  # 840 bytes: 1,680 with its text
    wide_text = ('refund ✓ ledger ' * 25).encode()  # 450 bytes, but its text may take 4 bytes a character
    for data in (ascii_text, wide_text):
        await store.put(
            store.artifact_id(data, scope='s'), data, media_type='text/plain', source='t', scope='s'
        )
    answer = await search_artifacts_text(store, 'refund', 2_000, scope='s')
    assert 'from 1 stored artifact(s). 1 stored file(s)' in answer
    assert store.artifact_id(ascii_text, scope='s') in answer
    assert store.artifact_id(wide_text, scope='s') not in answer
