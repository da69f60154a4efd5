"""`read_artifact(query=...)` without an id: a search over everything a scope stored, in bounded memory.

A search streams over the scope's artifacts, newest first, one at a time: each is read, decoded, chunked and
tokenized one chunk at a time, and only the chunks holding a term searched for are remembered (where they lie,
their length and the counts of those terms), so BM25 ranks them exactly as if every chunk were held. Then
only the best passages are read again, within twice the answer's limit. What a search holds at once is one
artifact's bytes and text (`SEARCH_WORKING_BYTES`) plus those small records and the passages.

Searches on one event loop run one at a time, and searches of the same store and scope that arrive while one
runs (a model response with parallel calls) are answered together by the next scan: eight parallel searches
cost one scan's memory and about one scan's time.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import anyio.to_thread

from ..store import ArtifactStore, StoredArtifact, StoreError
from ._limits import SEARCH_MAX_ARTIFACTS, SEARCH_MAX_BYTES, is_text
from ._retrieval import Tallied, greedy_fit, query_terms, rank_tallied, tally_chunks

SEARCH_WORKING_BYTES = 64 * 1024 * 1024
"""The most bytes a search holds at once while it reads: one artifact's bytes and its decoded text. An
artifact whose text could take more (wide characters) is not searched, and said so."""
_CANDIDATE_SHARE = 2
"""A search reads again the best passages up to this many times the characters its answer may hold."""
_MAX_CANDIDATES = 2_000
"""... and at most this many passages."""


class WorkingSet:
    """Bytes the searches of this process hold at once (artifacts being read, their texts), and the most
    they ever held: what `SEARCH_WORKING_BYTES` bounds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held = 0
        """Bytes held now."""
        self.peak = 0
        """The most bytes held at once since the process started (or `reset`)."""

    @contextmanager
    def holding(self, size: int) -> Iterator[None]:
        """`size` more bytes held for the duration of the block."""
        with self._lock:
            self.held += size
            self.peak = max(self.peak, self.held)
        try:
            yield
        finally:
            with self._lock:
                self.held -= size

    def reset(self) -> None:
        """Start counting the peak again from what is held now."""
        with self._lock:
            self.peak = self.held


WORKING_SET = WorkingSet()
"""The process's searches' working set."""


@dataclass(frozen=True)
class Searched:
    """One artifact a search read."""

    info: StoredArtifact
    """What the store says of it."""
    length: int
    """Characters of its text."""


class Passage(NamedTuple):
    """One chunk of a searched artifact, in the answer's running."""

    document: int
    """Its artifact's position in `Found.searched`."""
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Found:
    """What a search found for one query: the best passages (best first) and what it read."""

    searched: list[Searched]
    """The artifacts it read, newest first."""
    skipped: int
    """Artifacts it did not read (documents, images, past the search limits)."""
    passages: list[Passage]
    """The best passages, best first, about twice the answer's limit."""


@dataclass
class _Tally:
    """What the first pass over a scope gathered for every query of a batch."""

    searched: list[Searched] = field(default_factory=list[Searched])
    """The artifacts read, newest first."""
    skipped: int = 0
    """Artifacts not read."""
    chunks: int = 0
    """Chunks of every artifact read."""
    tokens: int = 0
    """Tokens of every chunk read."""
    hits: list[tuple[int, Tallied]] = field(default_factory=list[tuple[int, Tallied]])
    """The chunks holding a term of some query, with their artifact's position, in reading order."""


@dataclass(frozen=True)
class _Request:
    """One search of a batch."""

    query: str
    """What it looks for."""
    limit: int
    """Characters its answer may hold."""


@dataclass
class _Batch:
    """Searches of one store and scope answered by one scan."""

    store: ArtifactStore
    """The store searched."""
    scope: str
    """The scope searched."""
    result: asyncio.Future[list[Found]]
    """One `Found` per request, in order."""
    requests: list[_Request] = field(default_factory=list[_Request])
    """The searches that joined before the scan began."""


@dataclass
class _LoopSearches:
    """The searches of one event loop."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the scan that runs: one at a time."""
    waiting: dict[tuple[int, str], _Batch] = field(default_factory=dict[tuple[int, str], _Batch])
    """The batch each (store, scope) may still join, until its scan begins."""
    tasks: set[asyncio.Task[None]] = field(default_factory=set[asyncio.Task[None]])
    """The scans running or waiting (kept referenced until done)."""


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSearches] = weakref.WeakKeyDictionary()


async def search_scope(store: ArtifactStore, scope: str, query: str, limit: int) -> Found:
    """The best passages for `query` among `scope`'s text artifacts (the newest `SEARCH_MAX_ARTIFACTS`, at
    most `SEARCH_MAX_BYTES`), joining the batch of the same store and scope that waits for its scan, if any.
    `StoreError` when the scope cannot be listed."""
    loop = asyncio.get_running_loop()
    searches = _LOOPS.setdefault(loop, _LoopSearches())
    key = (id(store), scope)
    batch = searches.waiting.get(key)
    if batch is None or batch.store is not store:
        batch = _Batch(store, scope, loop.create_future())
        batch.result.add_done_callback(_retrieve)
        searches.waiting[key] = batch
        task = loop.create_task(_scan_batch(searches, key, batch))
        searches.tasks.add(task)
        task.add_done_callback(searches.tasks.discard)
    index = len(batch.requests)
    batch.requests.append(_Request(query, limit))
    # shielded: a search cancelled (its run ended) leaves the scan to answer the others
    return (await asyncio.shield(batch.result))[index]


def _retrieve(future: asyncio.Future[list[Found]]) -> None:
    """Mark a failed batch's error seen (every waiter may have gone)."""
    if not future.cancelled():
        future.exception()


async def _scan_batch(searches: _LoopSearches, key: tuple[int, str], batch: _Batch) -> None:
    try:
        async with searches.lock:
            if searches.waiting.get(key) is batch:
                del searches.waiting[key]  # from here on, new searches start the next batch
            found = await _scan(batch.store, batch.scope, list(batch.requests))
    except BaseException as exc:
        if searches.waiting.get(key) is batch:
            del searches.waiting[key]
        if not batch.result.done():
            batch.result.set_exception(exc)
        if not isinstance(exc, Exception):
            raise
        return
    batch.result.set_result(found)


async def _scan(store: ArtifactStore, scope: str, requests: Sequence[_Request]) -> list[Found]:
    infos = await store.list_artifacts(scope=scope, limit=SEARCH_MAX_ARTIFACTS)
    wanted = frozenset(term for r in requests for term in query_terms(r.query))
    phrases = frozenset(r.query.strip() for r in requests if r.query.strip())
    tally = await _first_pass(store, scope, infos, wanted, phrases)
    ranked = [_best(tally, r) for r in requests]
    texts = await _second_pass(store, scope, tally, {i for best in ranked for i in best})
    found: list[Found] = []
    for best in ranked:
        passages = [
            Passage(tally.hits[i][0], tally.hits[i][1].start, tally.hits[i][1].end, texts[i])
            for i in best
            if i in texts
        ]
        found.append(Found(tally.searched, tally.skipped, passages))
    return found


async def _first_pass(
    store: ArtifactStore,
    scope: str,
    infos: Iterable[StoredArtifact],
    wanted: frozenset[str],
    phrases: frozenset[str],
) -> _Tally:
    """Every searchable artifact read once, one at a time, newest first, within `SEARCH_MAX_BYTES`."""
    tally = _Tally()
    budget = SEARCH_MAX_BYTES
    for info in infos:
        if not is_text(info.media_type) or info.size_bytes > budget:
            tally.skipped += 1
            continue
        data = await _read(store, info.artifact_id, scope)
        if data is None:
            continue
        budget -= len(data)
        counted = await _counted(data, wanted, phrases)
        del data
        if counted is None:
            tally.skipped += 1
            continue
        length, chunks, tokens, hits = counted
        document = len(tally.searched)
        tally.searched.append(Searched(info, length))
        tally.chunks += chunks
        tally.tokens += tokens
        tally.hits.extend((document, hit) for hit in hits)
    return tally


async def _read(store: ArtifactStore, artifact_id: str, scope: str) -> bytes | None:
    try:
        return await store.get(artifact_id, scope=scope)
    except StoreError:  # unreadable: searched as if it were gone
        return None


_Counted = tuple[int, int, int, list[Tallied]]


async def _counted(data: bytes, wanted: frozenset[str], phrases: frozenset[str]) -> _Counted | None:
    """`partial_tally(data, wanted, phrases)` off the event loop, with `data` counted in the working set."""
    with WORKING_SET.holding(len(data)):
        return await anyio.to_thread.run_sync(partial_tally, data, wanted, phrases)


def partial_tally(
    data: bytes, wanted: frozenset[str], phrases: frozenset[str] = frozenset()
) -> _Counted | None:
    """`(characters, chunks, tokens, chunks holding a wanted term)` of one artifact's text; None when its
    text could take more than `SEARCH_WORKING_BYTES` beside its bytes."""
    # a str takes 1 byte a character when it is ASCII, up to 4 otherwise
    widest = len(data) if data.isascii() else 4 * len(data)
    if len(data) + widest > SEARCH_WORKING_BYTES:
        return None
    text = data.decode('utf-8', errors='replace')
    with WORKING_SET.holding(sys.getsizeof(text)):
        chunks, tokens, hits = tally_chunks(text, wanted, phrases)
        return len(text), chunks, tokens, hits


def _best(tally: _Tally, request: _Request) -> list[int]:
    """Positions in `tally.hits` of the passages `request` may show, best first: those `select_passages`
    picks at its limit, and the best up to twice that (an answer cut to fit a smaller room picks from
    them)."""
    hits = [hit for _, hit in tally.hits]
    order = rank_tallied(hits, request.query, chunks=tally.chunks, tokens=tally.tokens)
    sizes = [hits[i].end - hits[i].start for i in order]
    picked = set(greedy_fit(sizes, request.limit))
    room = _CANDIDATE_SHARE * request.limit
    best: list[int] = []
    used = 0
    for position, index in enumerate(order):
        if position in picked or (used < room and len(best) < _MAX_CANDIDATES):
            best.append(index)
            used += sizes[position]
    return best


async def _second_pass(store: ArtifactStore, scope: str, tally: _Tally, chosen: set[int]) -> dict[int, str]:
    """The text of each chosen chunk, reading each artifact that holds one once more, one at a time."""
    by_document: dict[int, list[int]] = {}
    for index in sorted(chosen):
        by_document.setdefault(tally.hits[index][0], []).append(index)
    texts: dict[int, str] = {}
    for document, indices in by_document.items():
        data = await _read(store, tally.searched[document].info.artifact_id, scope)
        if data is None:  # deleted since the first pass: its passages are left out
            continue
        spans = [(tally.hits[i][1].start, tally.hits[i][1].end) for i in indices]
        with WORKING_SET.holding(len(data)):
            pieces = await anyio.to_thread.run_sync(_slices, data, spans)
        del data
        texts.update(zip(indices, pieces, strict=True))
    return texts


def _slices(data: bytes, spans: Sequence[tuple[int, int]]) -> list[str]:
    text = data.decode('utf-8', errors='replace')
    with WORKING_SET.holding(sys.getsizeof(text)):
        return [text[start:end] for start, end in spans]


def select_passages(passages: Sequence[Passage], max_chars: int) -> list[Passage]:
    """The best passages that fit `max_chars` together, best first (a passage too large is passed over; when
    even the best is, its head)."""
    chosen = [passages[i] for i in greedy_fit([len(p.text) for p in passages], max_chars)]
    if chosen and len(chosen[0].text) > max_chars:
        return [chosen[0]._replace(end=chosen[0].start + max_chars, text=chosen[0].text[:max_chars])]
    return chosen
