"""A Redis cache shared by every process that points at the same server and prefix."""

from __future__ import annotations

from typing import Any

from ..messages._utf8 import from_utf8, utf8
from ..store._redis_client import RedisClients, RedisPoolSettings
from ._base import SummaryCache


class RedisCache(SummaryCache):
    """A cache in Redis: keys are `prefix + key`, values UTF-8 strings, TTLs set with `SET ... PX`.

    Pass a `url` (one pool per process, `pool`, with retries) or a `redis.asyncio.Redis` `client`. Errors
    propagate: use `redis_cache()` (a `FallbackCache`) so an unreachable server degrades to memory.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any | None = None,
        prefix: str = 'pydantic-ai-history:',
        socket_timeout: float | None = 2.0,
        pool: RedisPoolSettings | None = None,
    ) -> None:
        super().__init__()
        self._clients = RedisClients(url, client, socket_timeout, pool)
        self.prefix = prefix

    @property
    def client(self) -> Any:
        """The `redis.asyncio.Redis` client for the running event loop."""
        return self._clients.get()

    async def _get(self, key: str) -> str | None:
        value = await self._clients.get().get(self.prefix + key)
        if value is None:
            return None
        return from_utf8(value) if isinstance(value, bytes) else str(value)

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        px = None if ttl is None else max(1, round(ttl * 1000))
        await self._clients.get().set(self.prefix + key, utf8(value), px=px)

    async def _delete(self, key: str) -> None:
        await self._clients.get().delete(self.prefix + key)

    async def aclose(self) -> None:
        """Close the client this cache created; a client passed in is left to its owner."""
        await self._clients.aclose()
