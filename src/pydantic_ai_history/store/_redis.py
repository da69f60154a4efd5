"""A spill store in Redis, shared by every process that points at the same server and prefix."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..cache._redis import DEFAULT_REDIS_URL, RedisClients
from ._base import ArtifactStore, StoredArtifact, StoreError

__all__ = ('RedisStore',)

_T = TypeVar('_T')


class RedisStore(ArtifactStore):
    """Artifacts as `prefix + id` (the bytes) and `prefix + id + ':info'` (JSON info) in Redis.

    Pass a `url` or an existing `redis.asyncio.Redis` `client` (one with `decode_responses=False`: the
    content is bytes). `ttl` (seconds) expires both keys; `None` keeps them until deleted. `read` uses
    GETRANGE, so a range never transfers the whole artifact. Redis errors are raised as `StoreError`, so
    callers keep the content inline when the server is unreachable.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any | None = None,
        prefix: str = 'pydantic-ai-history:artifact:',
        ttl: float | None = None,
        socket_timeout: float | None = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if url is None and client is None:
            url = DEFAULT_REDIS_URL
        self._clients = RedisClients(url, client, socket_timeout)
        self.prefix = prefix
        self.ttl = ttl
        self._clock = clock

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: dict[str, str]
    ) -> StoredArtifact:
        existing = await self._info(artifact_id)
        if existing is not None:
            return existing
        info = StoredArtifact(artifact_id, media_type, len(data), source, self._clock(), metadata)
        sidecar = info.to_json()
        px = None if self.ttl is None else max(1, round(self.ttl * 1000))
        key = self.prefix + artifact_id

        async def write() -> None:
            # One MULTI/EXEC: another process never sees the info without the bytes.
            async with self._clients.get().pipeline(transaction=True) as pipe:
                pipe.set(key, data, px=px)
                pipe.set(key + ':info', sidecar, px=px)
                await pipe.execute()

        await self._call(write)
        return info

    async def _get(self, artifact_id: str) -> bytes | None:
        value = await self._call(lambda: self._clients.get().get(self.prefix + artifact_id))
        return None if value is None else bytes(value)

    async def _read(self, artifact_id: str, offset: int, limit: int | None) -> bytes | None:
        if limit == 0:
            exists = await self._call(lambda: self._clients.get().exists(self.prefix + artifact_id))
            return b'' if exists else None
        end = -1 if limit is None else offset + limit - 1
        key = self.prefix + artifact_id

        async def exists_and_range() -> list[Any]:
            # GETRANGE answers b'' for a missing key, so ask EXISTS in the same round trip.
            async with self._clients.get().pipeline(transaction=True) as pipe:
                pipe.exists(key)
                pipe.getrange(key, offset, end)
                result: list[Any] = await pipe.execute()
                return result

        exists, chunk = await self._call(exists_and_range)
        return bytes(chunk) if exists else None

    async def _info(self, artifact_id: str) -> StoredArtifact | None:
        raw = await self._call(lambda: self._clients.get().get(self.prefix + artifact_id + ':info'))
        if raw is None:
            return None
        return StoredArtifact.from_json(raw, artifact_id)

    async def _call(self, func: Callable[[], Awaitable[_T]]) -> _T:
        redis_error = self._redis_error()
        try:
            return await func()
        except redis_error as e:
            raise StoreError(f'redis store failed: {type(e).__name__}: {e}') from e

    def _redis_error(self) -> type[Exception]:
        from redis.exceptions import RedisError

        error: type[Exception] = RedisError
        return error

    async def aclose(self) -> None:
        """Close the client this store created; a client passed in is left to its owner."""
        await self._clients.aclose()
