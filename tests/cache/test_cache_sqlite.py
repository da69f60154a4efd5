from __future__ import annotations

import logging
import os
import sqlite3

import anyio
import pytest

from pydantic_ai_history.cache import SQLiteCache

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_round_trip_and_stats(tmp_path):
    cache = SQLiteCache(tmp_path / 'cache.sqlite')
    try:
        assert await cache.get('k') is None
        await cache.set('k', 'value ✓ 字')
        assert await cache.get('k') == 'value ✓ 字'
        await cache.set('k', 'replaced')
        assert await cache.get('k') == 'replaced'
        assert (cache.stats.hits, cache.stats.misses) == (2, 1)
    finally:
        await cache.aclose()


async def test_survives_a_new_instance_and_creates_parents_only(tmp_path):
    path = tmp_path / 'deep' / 'er' / 'cache.sqlite'
    first = SQLiteCache(path)
    await first.set('summary:1', 'kept')
    await first.aclose()

    second = SQLiteCache(path)
    try:
        assert await second.get('summary:1') == 'kept'
    finally:
        await second.aclose()
    # Nothing but the database (and SQLite's own WAL companions) is written.
    assert {p.name for p in path.parent.iterdir()} <= {'cache.sqlite', 'cache.sqlite-wal', 'cache.sqlite-shm'}
    assert sorted(p.name for p in tmp_path.iterdir()) == ['deep']
    with sqlite3.connect(path) as conn:
        assert conn.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'


async def test_ttl_expired_rows_ignored_and_purged(tmp_path):
    clock = Clock()
    path = tmp_path / 'cache.sqlite'
    cache = SQLiteCache(path, clock=clock)
    try:
        await cache.set('short', 's', ttl=60)
        await cache.set('other', 'o', ttl=60)
        await cache.set('forever', 'f')
        clock.now += 59
        assert await cache.get('short') == 's'
        clock.now += 1
        assert await cache.get('short') is None  # expired, and deleted on read
        assert await cache.purge_expired() == 1  # 'other' was never read; the sweep removes it
        assert await cache.get('forever') == 'f'
        with sqlite3.connect(path) as conn:
            assert [r[0] for r in conn.execute('SELECT key FROM cache')] == ['forever']
        # A new instance (a restart) ignores an expired row too.
        await cache.set('again', 'a', ttl=5)
    finally:
        await cache.aclose()
    clock.now += 5
    restarted = SQLiteCache(path, clock=clock)
    try:
        assert await restarted.get('again') is None
    finally:
        await restarted.aclose()


async def test_delete_and_zero_ttl(tmp_path):
    cache = SQLiteCache(tmp_path / 'c.db')
    try:
        await cache.set('a', '1')
        await cache.delete('a')
        assert await cache.get('a') is None
        await cache.set('b', '1')
        await cache.set('b', '2', ttl=0)
        assert await cache.get('b') is None
    finally:
        await cache.aclose()


async def test_concurrent_gets_and_sets_from_two_instances(tmp_path):
    path = tmp_path / 'shared.sqlite'
    # Two processors in one process, each with its own instance on the same file.
    caches = [SQLiteCache(path), SQLiteCache(path)]

    async def worker(n: int) -> None:
        cache = caches[n % 2]
        for i in range(25):
            await cache.set(f'{n}:{i}', f'value {n} {i}')
            assert await cache.get(f'{n}:{i}') == f'value {n} {i}'

    try:
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(worker, n)
        # Every write from either instance is visible to the other.
        results = [await caches[(n + 1) % 2].get(f'{n}:{i}') for n in range(8) for i in range(25)]
        assert results == [f'value {n} {i}' for n in range(8) for i in range(25)]
    finally:
        for cache in caches:
            await cache.aclose()


async def test_reopens_after_close(tmp_path):
    cache = SQLiteCache(tmp_path / 'c.db')
    await cache.set('a', '1')
    await cache.aclose()
    assert await cache.get('a') == '1'
    await cache.aclose()


@pytest.mark.skipif(os.name != 'posix', reason='uses a regular file as a parent directory')
async def test_unwritable_path_degrades_to_memory(tmp_path, caplog):
    # A cache never fails a run: the value is kept in memory, with one warning, and nothing is written.
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    cache = SQLiteCache(blocker / 'cache.sqlite')
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history.cache'):
        assert await cache.set('a', '1') is True
        assert await cache.get('a') == '1'
    assert cache.degraded
    assert not cache.corrupt
    assert blocker.read_text() == 'not a directory'
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert 'File exists' in warnings[0].getMessage()
