from __future__ import annotations

import logging
import time

import anyio
import pytest

from pydantic_ai_history.cache import FallbackCache, RedisCache, redis_cache

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_shared_between_two_instances(redis_server):
    # Two processors, each with its own cache (and connection), see each other's entries.
    first = RedisCache(redis_server.url, prefix='test:')
    second = RedisCache(redis_server.url, prefix='test:')
    other_prefix = RedisCache(redis_server.url, prefix='other:')
    try:
        assert await second.get('k') is None
        await first.set('k', 'shared ✓ 字')
        assert await second.get('k') == 'shared ✓ 字'
        assert await other_prefix.get('k') is None
        assert await first.client.get('test:k') == 'shared ✓ 字'.encode()
        await second.delete('k')
        assert await first.get('k') is None
        assert (second.stats.hits, second.stats.misses) == (1, 1)
    finally:
        for cache in (first, second, other_prefix):
            await cache.aclose()


async def test_existing_client_is_used_and_not_closed(redis_server):
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        cache = RedisCache(client=client, prefix='p:')
        await cache.set('a', 'b')
        assert await cache.get('a') == 'b'  # str responses are accepted as-is
        await cache.aclose()
        assert await client.get('p:a') == 'b'
    finally:
        await client.aclose()


async def test_ttl_expires(redis_server):
    cache = RedisCache(redis_server.url)
    try:
        await cache.set('short', 'v', ttl=0.2)
        await cache.set('long', 'v')
        assert 0 < await cache.client.pttl('pydantic-ai-history:short') <= 200
        assert await cache.client.pttl('pydantic-ai-history:long') == -1  # no expiry
        deadline = time.monotonic() + 5
        while await cache.get('short') is not None:
            assert time.monotonic() < deadline, 'not expired within 5 s'
            await anyio.sleep(0.05)
        assert await cache.get('long') == 'v'
    finally:
        await cache.aclose()


def test_new_event_loop_per_run(redis_server):
    # Agent.run_sync may use a fresh event loop each time; a client bound to the old loop would fail.
    cache = RedisCache(redis_server.url)

    async def round_trip(value: str) -> str | None:
        await cache.set('k', value)
        return await cache.get('k')

    assert anyio.run(round_trip, 'one') == 'one'
    assert anyio.run(round_trip, 'two') == 'two'
    anyio.run(cache.aclose)


async def test_server_killed_then_restarted(redis_server, caplog):
    caplog.set_level(logging.DEBUG, logger='pydantic_ai_history.cache')
    cache = redis_cache(redis_server.url, cooldown=0.3, socket_timeout=1.0)
    assert isinstance(cache, FallbackCache)
    try:
        await cache.set('before', 'b')
        assert await cache.get('before') == 'b'
        assert not cache.degraded

        redis_server.stop()
        await cache.set('during', 'd')
        assert cache.degraded
        for _ in range(10):
            assert await cache.get('during') == 'd'
        await anyio.sleep(0.35)
        assert await cache.get('during') == 'd'  # retried after the cool-down, still down
        assert cache.degraded
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert warnings[0].name == 'pydantic_ai_history.cache'
        assert 'RedisCache failed' in warnings[0].getMessage()

        redis_server.start()  # same port, empty (no persistence)
        await cache.set('after', 'a')  # may still be cooling down: lands in memory
        deadline = time.monotonic() + 5
        while cache.degraded:
            assert time.monotonic() < deadline, 'primary not used again within 5 s'
            await anyio.sleep(0.1)
            await cache.get('probe')
        await cache.set('back', 'x')
        assert await cache.primary.get('back') == 'x'  # written to Redis again
        assert await cache.get('during') == 'd'  # kept in memory across the outage
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    finally:
        await cache.aclose()


async def test_unreachable_from_the_start_degrades(caplog):
    from _redis_server import free_port

    cache = redis_cache(f'redis://127.0.0.1:{free_port()}/0', socket_timeout=1.0)
    await cache.set('a', '1')
    assert await cache.get('a') == '1'
    assert cache.degraded
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    await cache.aclose()


def test_client_and_url_are_exclusive():
    with pytest.raises(ValueError, match='exactly one'):
        RedisCache('redis://localhost', client=object())


def test_missing_redis_package_is_a_clear_import_error(monkeypatch):
    import sys

    from pydantic_ai_history.store import RedisStore

    monkeypatch.setitem(sys.modules, 'redis.asyncio', None)  # makes `import redis.asyncio` fail
    with pytest.raises(ImportError, match=r"pip install 'pydantic-ai-history\[redis\]'"):
        RedisCache('redis://localhost')
    with pytest.raises(ImportError, match=r"pip install 'pydantic-ai-history\[redis\]'"):
        redis_cache()
    with pytest.raises(ImportError, match=r'pydantic-ai-history\[redis\]'):
        RedisStore('redis://localhost')
