"""Caches that fail safe: a corrupt or locked SQLite file, a failing write, never fail a compaction or
throw away a summary that was paid for."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _compaction import SetupCompactor, StubSummarizer, compaction_setup, context, tool_loop
from pydantic_ai_history import CompactionResult, HistoryEvent, assert_valid_history
from pydantic_ai_history.cache import MemoryCache, SQLiteCache, SummaryCache
from pydantic_ai_history.stages.compactor import Compactor, summary_text

pytestmark = pytest.mark.anyio


def compactor_for(stub: StubSummarizer) -> Compactor:
    return SetupCompactor(
        compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model())
    )


def summary_of(messages: list[Any]) -> str:
    return next((t for t in map(summary_text, messages) if t is not None), '')


def compactions(events: list[HistoryEvent]) -> list[CompactionResult]:
    return [e for e in events if isinstance(e, CompactionResult)]


class CountingSQLiteCache(SQLiteCache):
    """Counts the calls that reached the SQLite file."""

    file_calls = 0

    async def _run(self, func: Any, *args: object) -> Any:
        self.file_calls += 1
        return await super()._run(func, *args)


async def _compact_with(cache: SummaryCache) -> tuple[StubSummarizer, list[Any], list[HistoryEvent]]:
    stub = StubSummarizer()
    ctx, events = context(cache=cache)
    out = await compactor_for(stub)(tool_loop(40), ctx)
    assert_valid_history(out)
    return stub, out, events


async def test_corrupt_file_falls_back_to_memory_and_the_summary_is_used(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / 'cache.sqlite'
    garbage = b'this is not a database ' * 400
    path.write_bytes(garbage)
    cache = CountingSQLiteCache(path)
    with caplog.at_level(logging.WARNING):
        stub, out, events = await _compact_with(cache)
        (result,) = compactions(events)
        assert result.method == 'llm'
        assert stub.calls == 1
        assert 'summary number 1' in summary_of(out)
        assert cache.corrupt
        calls_after_detection = cache.file_calls
        # later calls never touch the file again, and what was cached in memory is found
        again, _, events2 = await _compact_with(cache)
        assert again.calls == 0
        assert [e.method for e in compactions(events2)] == ['cache']
        assert cache.file_calls == calls_after_detection
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert 'not a usable database' in errors[0].getMessage()
    assert path.read_bytes() == garbage  # the user's file is left as it was


async def test_locked_file_times_out_fast_and_the_summary_is_used(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / 'cache.sqlite'
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute('CREATE TABLE other (x)')
    holder.execute('BEGIN EXCLUSIVE')  # another process holds the write lock and never lets go
    try:
        cache = CountingSQLiteCache(path)
        assert cache.busy_timeout <= 0.1  # milliseconds, not seconds, per locked call
        with caplog.at_level(logging.WARNING):
            stub, out, events = await _compact_with(cache)
        (result,) = compactions(events)
        assert result.method == 'llm'
        assert stub.calls == 1
        assert 'summary number 1' in summary_of(out)
        assert cache.degraded
        assert not cache.corrupt
        assert cache.file_calls == 1  # the first failure opened the cool-down: one wait in all
        warnings = [r for r in caplog.records if r.name == 'pydantic_ai_history.cache']
        assert len(warnings) == 1
        assert 'locked' in warnings[0].getMessage()
        # the summary was kept in memory meanwhile: a reloaded history finds it
        again, _, events2 = await _compact_with(cache)
        assert again.calls == 0
        assert [e.method for e in compactions(events2)] == ['cache']
        assert cache.file_calls == 1
    finally:
        holder.execute('ROLLBACK')
        holder.close()


class BrokenWrites(MemoryCache):
    """Reads work, every write fails (a full disk, a read-only replica)."""

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        raise OSError(28, 'No space left on device')


async def test_a_failed_cache_write_never_throws_away_the_summary(caplog: Any) -> None:
    cache = BrokenWrites()
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history.cache'):
        stub, out, events = await _compact_with(cache)
    (result,) = compactions(events)
    assert result.method == 'llm'
    assert stub.calls == 1
    assert 'summary number 1' in summary_of(out)
    assert cache.stats.errors >= 1
    assert 'No space left' in caplog.text
    assert await cache.set('k', 'v') is False  # reported to the caller too


class BrokenReads(MemoryCache):
    async def _get(self, key: str) -> str | None:
        raise RuntimeError('backend exploded')


async def test_a_failed_cache_read_is_a_miss() -> None:
    cache = BrokenReads()
    stub, _, events = await _compact_with(cache)
    assert [e.method for e in compactions(events)] == ['llm']
    assert stub.calls == 1
    assert cache.stats.errors >= 1
    assert cache.stats.misses >= 1
    with pytest.raises(RuntimeError, match='exploded'):
        await cache.get_or_raise('k')  # the raising form stays available to wrappers
