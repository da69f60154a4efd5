"""A spill store in Redis, shared by every process that points at the same server and prefix."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._redis_client import DEFAULT_REDIS_URL, RedisClients
from ._base import SECRET_BYTES, ArtifactStore, StoredArtifact, StoreError, StoreQuotaExceeded, scope_tag
from ._breaker import StoreBreaker

__all__ = ('RedisStore',)

_T = TypeVar('_T')

logger = logging.getLogger('pydantic_ai_history.store')

_LIST_SCAN_CAP = 10_000
"""At most this many artifacts of a scope are read when it is listed (a search reads the newest of them)."""

# One round trip, atomic: an existing artifact is kept; a scope over its budget is refused; otherwise the
# bytes, the info and the scope's byte count are written together, so no process sees info without bytes.
_PUT_SCRIPT = """
local existing = redis.call('GET', KEYS[2])
if existing then return existing end
local size = tonumber(ARGV[4])
if ARGV[5] ~= '' and tonumber(redis.call('GET', KEYS[3]) or '0') + size > tonumber(ARGV[5]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('INCRBY', KEYS[3], size)
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('INCRBY', KEYS[3], size)
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return 1
"""


class RedisStore(ArtifactStore):
    """Artifacts as `prefix + [scope:] + id` (the bytes) and the same key + `':info'` (JSON info) in Redis.

    Pass a `url` or an existing `redis.asyncio.Redis` `client` (one with `decode_responses=False`: the
    content is bytes). `ttl` (seconds) expires both keys; `None` keeps them until deleted. `read` uses
    GETRANGE, so a range never transfers the whole artifact. Scopes are kept apart by key; a scope's
    bytes are counted in `prefix + ':bytes:' + scope`, and `max_scope_bytes`/`max_artifact_bytes`
    (default: no limit) refuse what would pass them (`StoreQuotaExceeded`). Configure the server with a
    `noeviction` or `volatile-*` policy: Redis's own eviction knows nothing of scopes.

    Redis errors and timeouts raise `StoreError`, so callers keep the content inline, and open the
    breaker: for `cooldown` seconds every operation is refused at once instead of waiting
    `socket_timeout` again (a hung server costs one timeout per cool-down, not one per operation).

    Ids are keyed with `secret`; without one, a random secret is stored once under `prefix + ':secret'`
    (SET NX), so every process of the deployment makes the same ids. When Redis cannot be reached for it,
    a per-process secret is used with a warning (reads never need the secret).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any | None = None,
        prefix: str = 'pydantic-ai-history:artifact:',
        ttl: float | None = None,
        max_scope_bytes: int | None = None,
        max_artifact_bytes: int | None = None,
        socket_timeout: float | None = 1.0,
        cooldown: float = 30.0,
        secret: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(secret=secret)
        if url is None and client is None:
            url = DEFAULT_REDIS_URL
        self._clients = RedisClients(url, client, socket_timeout)
        self.prefix = prefix
        self.ttl = ttl
        self.max_scope_bytes = max_scope_bytes
        self.max_artifact_bytes = max_artifact_bytes
        self._clock = clock
        self.breaker = StoreBreaker(name='RedisStore', cooldown=cooldown, clock=monotonic)

    def _key(self, artifact_id: str, scope: str) -> str:
        tag = scope_tag(scope)
        return f'{self.prefix}{tag}:{artifact_id}' if tag else self.prefix + artifact_id

    def _quota_key(self, scope: str) -> str:
        return f'{self.prefix}:bytes:{scope_tag(scope) or "default"}'

    async def _load_secret(self) -> bytes:
        key = self.prefix + ':secret'

        async def load() -> Any:
            client = self._clients.get()
            await client.set(key, os.urandom(SECRET_BYTES), nx=True)
            return await client.get(key)

        try:
            secret = await self._call(load)
        except Exception as e:
            secret = None
            logger.warning('RedisStore: cannot load the id secret (%s)', e)
        if not isinstance(secret, bytes) or len(secret) < SECRET_BYTES:
            logger.warning('RedisStore: using an id secret for this process only; pass `secret=` to fix ids')
            return os.urandom(SECRET_BYTES)
        return secret

    def _load_secret_sync(self) -> bytes:
        # An id was asked for before `prepare()`: no blocking call to Redis from here.
        logger.warning('RedisStore: ids made before prepare(); using an id secret for this process only')
        return os.urandom(SECRET_BYTES)

    async def _put(
        self,
        artifact_id: str,
        data: bytes,
        media_type: str,
        source: str,
        metadata: dict[str, str],
        scope: str,
    ) -> StoredArtifact:
        if self.max_artifact_bytes is not None and len(data) > self.max_artifact_bytes:
            raise StoreQuotaExceeded(
                f'artifact {artifact_id} is {len(data):,} bytes, more than one artifact may take '
                f'({self.max_artifact_bytes:,})'
            )
        info = StoredArtifact(artifact_id, media_type, len(data), source, self._clock(), metadata)
        key = self._key(artifact_id, scope)
        px = '' if self.ttl is None else str(max(1, round(self.ttl * 1000)))
        limit = '' if self.max_scope_bytes is None else str(self.max_scope_bytes)
        result = await self._call(
            lambda: self._clients.get().eval(
                _PUT_SCRIPT,
                3,
                key,
                key + ':info',
                self._quota_key(scope),
                data,
                info.to_json(),
                px,
                len(data),
                limit,
            )
        )
        if isinstance(result, bytes):
            return StoredArtifact.from_json(result, artifact_id)
        if result == 0:
            raise StoreQuotaExceeded(
                f'artifact {artifact_id} ({len(data):,} bytes) would take its scope past its budget '
                f'({self.max_scope_bytes:,} bytes); not stored'
            )
        return info

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        value = await self._call(lambda: self._clients.get().get(self._key(artifact_id, scope)))
        return None if value is None else bytes(value)

    async def _read(self, artifact_id: str, offset: int, limit: int | None, scope: str) -> bytes | None:
        key = self._key(artifact_id, scope)
        if limit == 0:
            exists = await self._call(lambda: self._clients.get().exists(key))
            return b'' if exists else None
        end = -1 if limit is None else offset + limit - 1

        async def exists_and_range() -> list[Any]:
            # GETRANGE answers b'' for a missing key, so ask EXISTS in the same round trip.
            async with self._clients.get().pipeline(transaction=True) as pipe:
                pipe.exists(key)
                pipe.getrange(key, offset, end)
                result: list[Any] = await pipe.execute()
                return result

        exists, chunk = await self._call(exists_and_range)
        return bytes(chunk) if exists else None

    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        raw = await self._call(lambda: self._clients.get().get(self._key(artifact_id, scope) + ':info'))
        if raw is None:
            return None
        return StoredArtifact.from_json(raw, artifact_id)

    async def _list(self, scope: str, limit: int) -> list[StoredArtifact]:
        tag = scope_tag(scope)
        base = f'{self.prefix}{tag}:' if tag else self.prefix

        async def scan() -> list[Any]:
            client = self._clients.get()
            keys: list[bytes] = []
            async for key in client.scan_iter(match=base + '*:info', count=500):
                artifact = bytes(key)[len(base.encode()) : -len(b':info')]
                if b':' not in artifact:  # another scope's key under the default scope's prefix
                    keys.append(bytes(key))
                if len(keys) >= _LIST_SCAN_CAP:
                    break
            values: list[Any] = await client.mget(keys) if keys else []
            return list(zip(keys, values, strict=True))

        found: list[StoredArtifact] = []
        for key, raw in await self._call(scan):
            if raw is None:
                continue
            artifact_id = key[len(base.encode()) : -len(b':info')].decode()
            try:
                found.append(StoredArtifact.from_json(raw, artifact_id))
            except StoreError:
                continue
        return found  # newest first and `limit` applied by `list_artifacts`

    async def _call(self, func: Callable[[], Awaitable[_T]]) -> _T:
        from redis.exceptions import RedisError

        # A socket timeout is a RedisError (TimeoutError); OSError covers a connection torn mid-call.
        return await self.breaker.call(func, (RedisError, OSError))

    async def aclose(self) -> None:
        """Close the client this store created; a client passed in is left to its owner."""
        await self._clients.aclose()
