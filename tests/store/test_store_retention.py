"""Retention of the persistent stores: age and size bounds, oldest first, by default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pydantic_ai_history.store import DirectoryStore, StoreQuotaExceeded
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


@pytest.mark.slow
async def test_a_long_run_stays_within_the_documented_bounds(tmp_path: Path) -> None:
    """3,000 writes over 60 simulated days in 200 conversations, about three times more within one `max_age`
    than `max_bytes` holds: what the root holds never passes `max_bytes`, every artifact a put reported stored
    is still there for as long as it is within `max_age` (the puts that did not fit were refused instead),
    nothing unused for longer than `max_age` (plus one prune interval) survives, and once the oldest expire
    new puts are stored again. Without retention it would hold about 18 MB."""
    writes, days = 3_000, 60
    step = days * DAY / writes
    now = [1_700_000_000.0]
    max_bytes, max_age, every = 1_000_000, 10 * DAY, DAY
    store = DirectoryStore(
        tmp_path / 'spill', max_bytes=max_bytes, max_age=max_age, prune_every=every, clock=lambda: now[0]
    )
    await store.prepare()
    root = tmp_path / 'spill'
    stored: list[tuple[str, str, float]] = []
    refused: list[int] = []
    total = 0
    for i in range(writes):
        scope = f'conversation:{i % 200}'
        data = os.urandom(64) * (20 + i % 150)  # 1.3 to 10.9 KB
        total += len(data)
        aid = store.artifact_id(data, scope=scope)
        try:
            await store.put(aid, data, media_type='application/octet-stream', source='t', scope=scope)
        except StoreQuotaExceeded:
            refused.append(i)
        else:
            stored.append((aid, scope, now[0]))
        # the last sixth of the run writes ten times less often: age, not size, is then what bites
        now[0] += step if i < writes * 5 // 6 else step * 10
        if i % 250 == 249:
            files = [p for p in root.rglob('art_*') if p.is_file()]
            assert sum(p.stat().st_size for p in files) <= max_bytes, i
            oldest = min(p.stat().st_mtime for p in files)
            assert now[0] - oldest <= max_age + every + 10 * step, (i, (now[0] - oldest) / DAY)
            live = [(a, s) for a, s, at in stored if now[0] - at <= max_age]
            # `info` reads the sidecar without counting as a use
            assert all([await store.info(a, scope=s) is not None for a, s in live]), i
    assert total > 15 * max_bytes
    assert refused, 'the bound never bit: the test proves nothing'
    assert refused[-1] < writes - 1, 'new puts are stored once room frees'
    assert stored[-1][2] > now[0] - 2 * DAY
    assert await store.get(stored[0][0], scope=stored[0][1]) is None
    report = await store.prune()
    assert report.held_bytes <= max_bytes


async def test_a_put_larger_than_the_bound_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / 'spill', max_bytes=1_000_000)
    big = b'x' * 1_500_000
    with pytest.raises(StoreQuotaExceeded, match='more than one artifact may take'):
        await store.put(store.artifact_id(big), big, media_type='text/plain', source='t')
    # the same for one that fits the bound only without its info
    edge = b'y' * 1_000_000
    with pytest.raises(StoreQuotaExceeded, match='does not fit'):
        await store.put(store.artifact_id(edge), edge, media_type='text/plain', source='t')
    assert not list((tmp_path / 'spill').glob('art_*'))


async def test_artifacts_in_use_survive_newer_puts_and_an_explicit_prune_may_delete_them(
    tmp_path: Path,
) -> None:
    now = [1_000.0 * DAY]
    store = DirectoryStore(tmp_path / 'spill', max_bytes=10_000, max_age=7 * DAY, clock=lambda: now[0])
    kept = []
    for i in range(3):
        data = bytes([65 + i]) * 3_000
        aid = store.artifact_id(data, scope=f's{i}')
        await store.put(aid, data, media_type='text/plain', source='t', scope=f's{i}')
        kept.append((aid, f's{i}', data))
        now[0] += DAY
    newer = b'n' * 3_000
    with pytest.raises(StoreQuotaExceeded, match='does not fit'):
        await store.put(store.artifact_id(newer), newer, media_type='text/plain', source='t')
    assert [await store.get(a, scope=s) for a, s, _ in kept] == [d for _, _, d in kept]
    # a week after the last use the oldest expire: the same put is stored
    now[0] += 7 * DAY + 1
    await store.put(store.artifact_id(newer), newer, media_type='text/plain', source='t')
    assert await store.get(store.artifact_id(newer)) == newer
    # an operator's prune with a tighter bound deletes the least recently used even within `max_age`
    report = await store.prune(max_bytes=2_000)
    assert report.held_bytes <= 2_000
