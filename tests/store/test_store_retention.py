"""Retention of the persistent stores: age and size bounds, oldest first, by default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pydantic_ai_history.store import DirectoryStore
from pydantic_ai_history.store._retention import DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, Held, plan_prune

pytestmark = pytest.mark.anyio

DAY = 86_400.0


def held(key: str, size: int, used_at: float) -> Held:
    return Held(key, size, used_at)


def test_plan_deletes_the_expired_then_the_oldest_past_the_size_bound() -> None:
    items = [held('a', 40, 0), held('b', 40, 10 * DAY), held('c', 40, 20 * DAY), held('d', 40, 29 * DAY)]
    deleted, kept = plan_prune(items, now=30 * DAY, max_age=15 * DAY, max_bytes=None)
    assert [h.key for h in deleted] == ['a', 'b']
    assert [h.key for h in kept] == ['c', 'd']
    # past the size bound: the oldest go until 90% of it is held
    deleted, kept = plan_prune(items, now=30 * DAY, max_age=None, max_bytes=100)
    assert [h.key for h in deleted] == ['a', 'b']
    # within both bounds nothing goes
    assert plan_prune(items, now=30 * DAY, max_age=None, max_bytes=160) == (
        [],
        sorted(items, key=lambda h: h.used_at),
    )


def test_defaults_are_documented_bounds() -> None:
    store = DirectoryStore('/nonexistent/never-touched')
    assert (store.max_age, store.max_bytes) == (DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES) == (30 * DAY, 1024**3)
    with pytest.raises(ValueError, match='max_bytes must be positive'):
        DirectoryStore('/x', max_bytes=0)


async def test_expired_artifacts_go_and_a_read_keeps_one(tmp_path: Path) -> None:
    now = [1_000.0 * DAY]
    store = DirectoryStore(tmp_path / 'spill', max_age=7 * DAY, clock=lambda: now[0])
    await store.prepare()
    for name in ('old', 'read', 'new'):
        await store.put(f'art_{name}', name.encode() * 10, media_type='text/plain', source='t', scope='s')
        now[0] += DAY
    now[0] += 5 * DAY  # 'old' and 'read' were written 8 and 7 days ago
    assert await store.get('art_read', scope='s') is not None  # used again now
    report = await store.prune()
    assert (report.removed, report.held) == (1, 2)
    assert await store.get('art_old', scope='s') is None
    assert await store.info('art_old', scope='s') is None
    assert await store.get('art_read', scope='s') == b'read' * 10
    assert await store.get('art_new', scope='s') == b'new' * 10


async def test_leftovers_of_interrupted_writes_are_removed(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / 'spill')
    await store.put('art_whole', b'whole', media_type='text/plain', source='t')
    root = tmp_path / 'spill'
    for name in ('.abc.tmp', 'art_cut.bin', 'art_lonely.json'):
        (root / name).write_bytes(b'x')
        os.utime(root / name, (1, 1))  # long ago
    (root / '.fresh.tmp').write_bytes(b'x')  # a write in progress: left alone
    await store.prune()
    names = sorted(p.name for p in root.iterdir())
    assert names == ['.fresh.tmp', 'art_whole.bin', 'art_whole.json']


async def test_a_long_run_stays_within_the_documented_bounds(tmp_path: Path) -> None:
    """3,000 writes over 60 simulated days in 200 conversations: what the root holds never passes `max_bytes`
    plus the artifact being written, nothing unused for longer than `max_age` (plus one prune interval)
    survives, and the newest artifacts are all readable. Without retention it would hold about 18 MB."""
    writes, days = 3_000, 60
    step = days * DAY / writes
    now = [1_700_000_000.0]
    max_bytes, max_age, every = 1_000_000, 10 * DAY, DAY
    store = DirectoryStore(
        tmp_path / 'spill', max_bytes=max_bytes, max_age=max_age, prune_every=every, clock=lambda: now[0]
    )
    await store.prepare()
    root = tmp_path / 'spill'
    written: list[tuple[str, str]] = []
    largest = total = 0
    for i in range(writes):
        scope = f'conversation:{i % 200}'
        data = os.urandom(64) * (20 + i % 150)  # 1.3 to 10.9 KB
        largest, total = max(largest, len(data)), total + len(data)
        aid = store.artifact_id(data, scope=scope)
        await store.put(aid, data, media_type='application/octet-stream', source='t', scope=scope)
        written.append((aid, scope))
        # the last sixth of the run writes ten times less often: age, not size, is then what bites
        now[0] += step if i < writes * 5 // 6 else step * 10
        if i % 250 == 249:
            files = [p for p in root.rglob('art_*') if p.is_file()]
            on_disk = sum(p.stat().st_size for p in files)
            assert on_disk <= max_bytes + largest + 4_096, (i, on_disk)
            oldest = min(p.stat().st_mtime for p in files)
            assert now[0] - oldest <= max_age + every + 10 * step, (i, (now[0] - oldest) / DAY)
    assert total > 15 * max_bytes
    for aid, scope in written[-50:]:
        assert await store.get(aid, scope=scope) is not None
    assert await store.get(written[0][0], scope=written[0][1]) is None
    report = await store.prune()
    assert report.held_bytes <= max_bytes
