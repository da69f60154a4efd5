"""A cache that keeps working when its primary backend does not."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..store._base import StoreError
from ..store._breaker import StoreBreaker
from ._base import SummaryCache, logger
from ._memory import MemoryCache
from ._redis import RedisCache

_T = TypeVar('_T')


class FallbackCache(SummaryCache):
    """Serve from `primary`; when it raises, serve from `fallback` (memory by default) for a while.

    A broken backend must never fail a run: a primary exception logs one warning per outage and routes calls
    to the fallback for `cooldown` seconds (`breaker`). While healthy, a primary miss also consults the
    fallback, so entries written during an outage are still found. `primary.stats`/`fallback.stats` count
    each backend.
    """

    def __init__(
        self,
        primary: SummaryCache,
        fallback: SummaryCache | None = None,
        *,
        cooldown: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.primary = primary
        self.fallback = fallback if fallback is not None else MemoryCache()
        self.breaker = StoreBreaker(
            name=f'cache backend {type(primary).__name__}', cooldown=cooldown, clock=clock, log=logger
        )

    @property
    def degraded(self) -> bool:
        """Whether the primary failed and calls currently go to the fallback."""
        return self.breaker.open_until is not None

    @property
    def cooldown(self) -> float:
        """Seconds calls go to the fallback after a primary failure."""
        return self.breaker.cooldown

    async def _get(self, key: str) -> str | None:
        ok, value = await self._try_primary(self.primary.get_or_raise, key)
        if ok and value is not None:
            return value
        return await self.fallback.get(key)

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        ok, _ = await self._try_primary(self.primary.set_or_raise, key, value, ttl=ttl)
        if not ok:
            await self.fallback.set(key, value, ttl=ttl)

    async def _delete(self, key: str) -> None:
        await self._try_primary(self.primary.delete_or_raise, key)
        await self.fallback.delete(key)

    async def _try_primary(
        self, call: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any
    ) -> tuple[bool, _T | None]:
        """Call the primary unless the breaker is open; `(False, None)` means "use the fallback"."""
        try:
            return True, await self.breaker.call(lambda: call(*args, **kwargs), Exception)
        except StoreError:
            return False, None

    async def aclose(self) -> None:
        try:
            await self.primary.aclose()
        except Exception as e:
            logger.debug('closing %s failed: %r', self.breaker.name, e)
        await self.fallback.aclose()


def redis_cache(
    url: str = 'redis://localhost:6379/0',
    *,
    prefix: str = 'pydantic-ai-history:',
    socket_timeout: float | None = 2.0,
    cooldown: float = 30.0,
    fallback: SummaryCache | None = None,
) -> FallbackCache:
    """A `RedisCache` that degrades to memory while Redis is unreachable: the usual way to use Redis."""
    primary = RedisCache(url, prefix=prefix, socket_timeout=socket_timeout)
    return FallbackCache(primary, fallback, cooldown=cooldown)
