from __future__ import annotations

import logging

import pytest

from pydantic_ai_history.store import MemoryStore, StoreError

pytestmark = pytest.mark.anyio


async def test_evicts_oldest_with_a_warning(caplog):
    store = MemoryStore(max_bytes=100, max_scope_bytes=100)
    for name in 'abcd':
        await store.put(f'art_{name}', name.encode() * 30, media_type='text/plain', source='t')
    # 'a' (oldest) made room for 'd'; 120 bytes never fit.
    assert await store.get('art_a') is None
    assert await store.info('art_a') is None
    assert [await store.get(f'art_{n}') for n in 'bcd'] == [n.encode() * 30 for n in 'bcd']
    assert store.size_bytes == 90
    assert len(store) == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].name == 'pydantic_ai_history.store'
    assert 'art_a' in warnings[0].getMessage()
    assert 'DirectoryStore' in warnings[0].getMessage()


async def test_evicts_as_many_as_needed():
    store = MemoryStore(max_bytes=100, max_scope_bytes=100)
    for i in range(10):
        await store.put(f'art_{i}', b'x' * 10, media_type='text/plain', source='t')
    await store.put('art_big', b'y' * 95, media_type='text/plain', source='t')
    assert len(store) == 1
    assert store.size_bytes == 95


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


def test_invalid_bound():
    with pytest.raises(ValueError, match='must be positive'):
        MemoryStore(max_bytes=0)
