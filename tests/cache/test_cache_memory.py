from __future__ import annotations

import anyio
import pytest

from pydantic_ai_history.cache import CacheStats, MemoryCache, SummaryCache, cache_key

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_get_set_and_stats():
    cache = MemoryCache()
    assert isinstance(cache, SummaryCache)
    assert await cache.get('a') is None
    await cache.set('a', 'alpha')
    assert await cache.get('a') == 'alpha'
    assert await cache.get('a') == 'alpha'
    assert cache.stats == CacheStats(hits=2, misses=1)
    assert cache.stats.hit_rate == pytest.approx(2 / 3)
    assert CacheStats().hit_rate == 0.0


async def test_lru_order_by_entry_count():
    cache = MemoryCache(max_entries=3)
    for key in 'abc':
        await cache.set(key, key.upper())
    assert await cache.get('a') == 'A'  # 'a' is now the most recently used, 'b' the least
    await cache.set('d', 'D')
    assert await cache.get('b') is None
    assert [await cache.get(k) for k in 'acd'] == ['A', 'C', 'D']
    assert len(cache) == 3


async def test_overwrite_refreshes_and_does_not_double_count():
    cache = MemoryCache(max_entries=2)
    await cache.set('a', 'x' * 10)
    await cache.set('b', 'y')
    await cache.set('a', 'z')  # 'a' is now newest; its old size is released
    assert cache.size_bytes == len('az') + len('by')
    await cache.set('c', 'w')
    assert await cache.get('b') is None
    assert await cache.get('a') == 'z'


async def test_max_bytes_bound():
    cache = MemoryCache(max_entries=1000, max_bytes=100)
    for i in range(20):
        await cache.set(f'k{i:02d}', 'v' * 20)  # 23 bytes each: four fit
        assert cache.size_bytes <= 100
    assert len(cache) == 4
    assert [await cache.get(f'k{i:02d}') is not None for i in range(16, 20)] == [True] * 4
    assert await cache.get('k15') is None


async def test_max_bytes_counts_utf8_and_skips_oversized_values():
    cache = MemoryCache(max_bytes=100)
    await cache.set('keep', 'x')
    await cache.set('big', '字' * 40)  # 120 UTF-8 bytes, more than the whole cache
    assert await cache.get('big') is None
    assert await cache.get('keep') == 'x'  # an oversized value does not flush the cache


async def test_ttl_with_injected_clock():
    clock = Clock()
    cache = MemoryCache(clock=clock)
    await cache.set('short', 's', ttl=10)
    await cache.set('forever', 'f')
    clock.now += 9.99
    assert await cache.get('short') == 's'
    clock.now += 0.01
    assert await cache.get('short') is None
    assert len(cache) == 1  # the expired entry was dropped when read
    clock.now += 1e9
    assert await cache.get('forever') == 'f'


async def test_delete_and_non_positive_ttl():
    cache = MemoryCache()
    await cache.set('a', '1')
    await cache.delete('a')
    assert await cache.get('a') is None
    await cache.set('b', '1')
    await cache.set('b', '2', ttl=0)
    assert await cache.get('b') is None
    await cache.delete('missing')


async def test_concurrent_tasks():
    cache = MemoryCache(max_entries=50)

    async def worker(n: int) -> None:
        for i in range(200):
            await cache.set(f'{n}-{i}', str(i))
            await anyio.sleep(0)
            value = await cache.get(f'{n}-{i}')
            assert value in (None, str(i))

    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(worker, n)
    assert len(cache) == 50
    assert cache.size_bytes == sum(len(k) + len(e.value) for k, e in cache._entries.items())


def test_invalid_bounds():
    with pytest.raises(ValueError, match='must be positive'):
        MemoryCache(max_entries=0)
    with pytest.raises(ValueError, match='must be positive'):
        MemoryCache(max_bytes=0)


def test_cache_key_is_stable_and_unambiguous():
    assert cache_key('summary', 'ab', 'c') == cache_key('summary', b'ab', b'c')
    assert cache_key('summary', 'ab', 'c') != cache_key('summary', 'a', 'bc')
    assert cache_key('summary', 'x') != cache_key('conversion', 'x')
    assert cache_key('summary', 'x').startswith('summary:')
