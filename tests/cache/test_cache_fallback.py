from __future__ import annotations

import logging

import pytest

from pydantic_ai_history.cache import FallbackCache, MemoryCache, SummaryCache

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FlakyCache(SummaryCache):
    """A dict cache that raises `ConnectionError` while `down` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}
        self.down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError('connection refused')

    async def _get(self, key: str) -> str | None:
        self._check()
        return self.data.get(key)

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        self._check()
        self.data[key] = value

    async def _delete(self, key: str) -> None:
        self._check()
        self.data.pop(key, None)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == 'pydantic_ai_history.cache' and r.levelno == logging.WARNING
    ]


async def test_healthy_primary_is_used():
    primary = FlakyCache()
    cache = FallbackCache(primary)
    await cache.set('a', '1')
    assert primary.data == {'a': '1'}
    assert await cache.get('a') == '1'
    assert not cache.degraded
    assert len(cache.fallback) == 0  # type: ignore[arg-type]


async def test_degrades_warns_once_and_recovers_after_cooldown(caplog):
    caplog.set_level(logging.DEBUG, logger='pydantic_ai_history.cache')
    clock = Clock()
    primary = FlakyCache()
    cache = FallbackCache(primary, cooldown=30, clock=clock)
    await cache.set('before', 'b')

    primary.down = True
    await cache.set('during', 'd')
    assert cache.degraded
    assert await cache.get('during') == 'd'
    assert await cache.get('before') is None  # only the primary had it
    calls = primary.calls
    for _ in range(5):
        await cache.get('during')
    assert primary.calls == calls  # cooling down: the primary is not tried
    clock.now += 30
    assert await cache.get('during') == 'd'  # retried, failed again, served from memory
    assert primary.calls == calls + 1
    assert len(warnings_of(caplog)) == 1
    assert 'FlakyCache failed' in warnings_of(caplog)[0].getMessage()

    primary.down = False
    clock.now += 29.9
    assert await cache.get('before') is None  # still cooling down
    clock.now += 0.1
    assert await cache.get('before') == 'b'
    assert not cache.degraded
    # Written during the outage, found after it: a primary miss consults the fallback.
    assert await cache.get('during') == 'd'
    assert any('recovered' in r.getMessage() for r in caplog.records)
    assert len(warnings_of(caplog)) == 1


async def test_combined_stats():
    primary = FlakyCache()
    cache = FallbackCache(primary, MemoryCache())
    await cache.set('a', '1')
    assert await cache.get('a') == '1'
    assert await cache.get('missing') is None
    primary.down = True
    assert await cache.get('a') is None
    await cache.set('a', '1')
    assert await cache.get('a') == '1'
    assert (cache.stats.hits, cache.stats.misses) == (2, 2)
    assert cache.stats.hit_rate == 0.5


async def test_delete_reaches_both():
    primary = FlakyCache()
    cache = FallbackCache(primary)
    await cache.set('a', '1')
    await cache.fallback.set('a', '1')
    await cache.delete('a')
    assert await cache.get('a') is None


async def test_any_exception_degrades(caplog):
    class Broken(FlakyCache):
        async def _get(self, key: str) -> str | None:
            raise RuntimeError('bug in a third-party backend')

    cache = FallbackCache(Broken())
    assert await cache.get('a') is None
    assert cache.degraded
    assert len(warnings_of(caplog)) == 1
