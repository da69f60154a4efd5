from __future__ import annotations

import logging

import pytest

from pydantic_ai_history.store import MemoryStore, StoreError, StoreQuotaExceeded
from pydantic_ai_history.store._memory import DEFAULT_MEMORY_MAX_AGE

pytestmark = pytest.mark.anyio

DAY = 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * DAY

    def __call__(self) -> float:
        return self.now


async def test_a_full_store_refuses_rather_than_evict_what_is_in_use():
    clock = Clock()
    store = MemoryStore(max_bytes=100, max_scope_bytes=100, max_age=DAY, clock=clock)
    for name in 'abc':
        await store.put(f'art_{name}', name.encode() * 30, media_type='text/plain', source='t')
        clock.now += 60
    with pytest.raises(StoreQuotaExceeded, match='used within the last 86,400 s'):
        await store.put('art_d', b'd' * 30, media_type='text/plain', source='t')
    assert await store.get('art_d') is None
    assert [await store.get(f'art_{n}') for n in 'abc'] == [n.encode() * 30 for n in 'abc']
    assert (store.size_bytes, store.evicted) == (90, 0)


async def test_evicts_only_what_is_past_its_retention_oldest_first_with_a_warning(caplog):
    clock = Clock()
    store = MemoryStore(max_bytes=100, max_scope_bytes=100, max_age=DAY, clock=clock)
    for name in 'abc':
        await store.put(f'art_{name}', name.encode() * 30, media_type='text/plain', source='t')
        clock.now += 60
    clock.now += DAY  # all three are past their retention now
    assert await store.get('art_a') == b'a' * 30  # read: in use again, so 'b' is the oldest
    await store.put('art_d', b'd' * 30, media_type='text/plain', source='t')
    assert await store.get('art_b') is None
    assert await store.info('art_b') is None
    assert [await store.get(f'art_{n}') for n in 'acd'] == [n.encode() * 30 for n in 'acd']
    assert (store.size_bytes, len(store), store.evicted) == (90, 3, 1)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].name == 'pydantic_ai_history.store'
    assert 'art_b' in warnings[0].getMessage()


async def test_refuses_without_evicting_when_the_expired_are_not_enough():
    clock = Clock()
    store = MemoryStore(max_bytes=100, max_scope_bytes=100, max_age=DAY, clock=clock)
    await store.put('art_old', b'o' * 30, media_type='text/plain', source='t')
    clock.now += 2 * DAY
    await store.put('art_live', b'l' * 60, media_type='text/plain', source='t')
    with pytest.raises(StoreQuotaExceeded):  # only 'art_old' could go: 30 + 10 free is not 45
        await store.put('art_new', b'n' * 45, media_type='text/plain', source='t')
    assert await store.get('art_old') == b'o' * 30  # nothing was evicted for a put that was refused
    assert store.evicted == 0


async def test_without_an_age_bound_nothing_is_ever_evicted():
    clock = Clock()
    store = MemoryStore(max_bytes=100, max_scope_bytes=100, max_age=None, clock=clock)
    await store.put('art_a', b'a' * 60, media_type='text/plain', source='t')
    clock.now += 10_000 * DAY
    with pytest.raises(StoreQuotaExceeded, match='kept without an age bound'):
        await store.put('art_b', b'b' * 60, media_type='text/plain', source='t')
    assert await store.get('art_a') == b'a' * 60


async def test_idempotent_put_does_not_evict_or_double_count():
    store = MemoryStore(max_bytes=100, max_scope_bytes=100)
    await store.put('art_a', b'a' * 60, media_type='text/plain', source='t')
    await store.put('art_a', b'a' * 60, media_type='text/plain', source='t')
    assert store.size_bytes == 60
    assert await store.get('art_a') == b'a' * 60


async def test_too_large_for_the_store():
    store = MemoryStore(max_bytes=10)
    await store.put('art_small', b'x', media_type='text/plain', source='t')
    with pytest.raises(StoreError, match='more than one artifact may take'):
        await store.put('art_big', b'x' * 11, media_type='text/plain', source='t')
    assert await store.get('art_small') == b'x'  # nothing was evicted for it


async def test_a_put_larger_than_the_bound_is_refused_not_stored_and_dropped():
    store = MemoryStore(max_bytes=1_000_000, max_scope_bytes=1_000_000)
    big = b'x' * 1_500_000
    with pytest.raises(StoreQuotaExceeded):
        await store.put(store.artifact_id(big), big, media_type='text/plain', source='t')
    assert (len(store), store.size_bytes) == (0, 0)


def test_invalid_bound():
    with pytest.raises(ValueError, match='must be positive'):
        MemoryStore(max_bytes=0)
    with pytest.raises(ValueError, match='max_age must be positive'):
        MemoryStore(max_age=0)
    assert MemoryStore().max_age == DEFAULT_MEMORY_MAX_AGE == DAY
