"""A spill store in Redis, shared by every process that points at the same server and prefix."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._base import (
    SECRET_BYTES,
    ArtifactStore,
    Metadata,
    StoredArtifact,
    StoreError,
    StoreQuotaExceeded,
    check_artifact_size,
    check_bounds,
    scope_tag,
    store_full,
)
from ._breaker import StoreBreaker
from ._redis_client import RedisClients, RedisPoolSettings
from ._redis_scripts import PRUNE_SCRIPT, PUT_SCRIPT
from ._retention import DEFAULT_MAX_AGE, PruneReport, StoreBound

_T = TypeVar('_T')

DEFAULT_REDIS_MAX_BYTES = 256 * 1024**2
"""Default retention by size for `RedisStore`: 256 MiB of content under one prefix."""

_LIST_SCAN_CAP = 10_000
"""At most this many artifacts of a scope are read when it is listed (a search reads the newest of them)."""


class RedisStore(ArtifactStore):
    """Artifacts as `prefix + [scope:] + id` (the bytes) and the same key + `':info'` (JSON info) in Redis.

    Pass a `url` or a `redis.asyncio.Redis` `client` with `decode_responses=False`. `read` uses GETRANGE, so
    a range never transfers the whole artifact.

    Retention, on by default: `ttl` (30 days) expires an artifact's keys. Until then it belongs to a
    conversation that may still read it back, and no put deletes it to make room: a put that would take the
    prefix past `max_bytes` (256 MiB of content, all scopes) takes what expired out of the counts and, if it
    still does not fit, is refused with `StoreQuotaExceeded` before anything is written, as is an artifact
    larger than `max_bytes`. `prune()` and `pydantic-ai-history prune --redis URL` apply the bounds on demand
    and, unlike a put, delete the oldest past `max_bytes` even within the `ttl`. `None` switches a bound off
    (`ttl=None`: a full prefix refuses every new artifact). `max_scope_bytes`/`max_artifact_bytes` refuse
    what would pass them (`StoreQuotaExceeded`). Use a `noeviction` or `volatile-*` server policy: Redis's own
    eviction knows nothing of scopes or of the store's counts. On a cluster, put a hash tag in the prefix.

    Redis errors and timeouts raise `StoreError` (callers keep the content inline) and open the breaker for
    `cooldown` seconds, so a hung server costs one `socket_timeout` per cool-down, not one per operation.
    A client made from `url` shares one pool per process (`pool`) and retries connection errors.

    Without a `secret`, a random one is stored once under `prefix + ':secret'` (SET NX) and loaded by
    `prepare()`, so every process makes the same ids and recognises the same notes; when Redis cannot be
    reached for it, `prepare()` raises `StoreError` and nothing is stored until it can. Reads never need it.

    Example:
        ```python {test="skip: needs a Redis server (tests/store run the store against a real one)"}
        from pydantic_ai_history import create_history_processor
        from pydantic_ai_history.store import RedisStore

        # shared by every worker: the same ids and notes in each, originals kept for a week
        store = RedisStore(url='redis://localhost:6379/0', prefix='my-app:artifacts:', ttl=7 * 24 * 3600)
        processor = create_history_processor(store=store)
        ```
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any | None = None,
        prefix: str = 'pydantic-ai-history:artifact:',
        ttl: float | None = DEFAULT_MAX_AGE,
        max_bytes: int | None = DEFAULT_REDIS_MAX_BYTES,
        max_scope_bytes: int | None = None,
        max_artifact_bytes: int | None = None,
        socket_timeout: float | None = 1.0,
        cooldown: float = 30.0,
        secret: bytes | str | None = None,
        pool: RedisPoolSettings | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(secret=secret)
        self._clients = RedisClients(url, client, socket_timeout, pool)
        check_bounds('RedisStore', ttl=ttl, max_bytes=max_bytes)
        self.prefix = prefix
        self.ttl = ttl
        """Seconds an artifact is kept after it was written (Redis expires it); None keeps it."""
        self.max_bytes = max_bytes
        """Bytes of content the prefix may hold; a put past it is refused. None: no bound."""
        self.max_scope_bytes = max_scope_bytes
        self.max_artifact_bytes = max_artifact_bytes
        self._clock = clock
        self.breaker = StoreBreaker(name='RedisStore', cooldown=cooldown, clock=monotonic)

    def _key(self, artifact_id: str, scope: str) -> str:
        tag = scope_tag(scope)
        return f'{self.prefix}{tag}:{artifact_id}' if tag else self.prefix + artifact_id

    def _quota_key(self, scope: str) -> str:
        return f'{self.prefix}:bytes:{scope_tag(scope) or "default"}'

    def _index_keys(self) -> tuple[str, str, str]:
        """The index (data keys by write time), the sizes (and scope counter) of each, and their total."""
        return self.prefix + ':index', self.prefix + ':sizes', self.prefix + ':total'

    async def _load_secret(self) -> bytes:
        key = self.prefix + ':secret'

        async def load() -> Any:
            client = self._clients.get()
            # one round trip: the first process to ask creates it, every other one reads that one
            async with client.pipeline(transaction=True) as pipe:
                pipe.set(key, os.urandom(SECRET_BYTES), nx=True)
                pipe.get(key)
                _, value = await pipe.execute()
                return value

        secret = await self._call(load)  # StoreError (after the client's retries) when Redis cannot answer
        if not isinstance(secret, bytes) or len(secret) < SECRET_BYTES:
            raise StoreError(f'RedisStore: the secret under {key!r} is not {SECRET_BYTES} bytes; delete it')
        return secret

    def _load_secret_sync(self) -> bytes:
        # An id was asked for before `prepare()`: no blocking call to Redis, and no secret of this process.
        raise StoreError('RedisStore: its secret is loaded by `await store.prepare()` before the first id')

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: Metadata, scope: str
    ) -> StoredArtifact:
        check_artifact_size(artifact_id, len(data), self.max_artifact_bytes, self.max_bytes)
        now = self._clock()
        info = StoredArtifact(artifact_id, media_type, len(data), source, now, metadata)
        key = self._key(artifact_id, scope)
        keys = (key, key + ':info', self._quota_key(scope), *self._index_keys())
        ttl, scope_budget, now_ms = _bound(self.ttl, 1000), _bound(self.max_scope_bytes), round(now * 1000)
        arguments = (data, info.to_json(), ttl, len(data), scope_budget, now_ms, _bound(self.max_bytes))
        result = await self._call(lambda: self._clients.get().eval(PUT_SCRIPT, len(keys), *keys, *arguments))
        if isinstance(result, bytes):
            return StoredArtifact.from_json(result, artifact_id)
        if isinstance(result, list):  # [-1, bytes held]: full of what is within its ttl
            held = int(result[1])
            raise store_full(artifact_id, len(data), held, self.max_bytes or 0, self.ttl)
        if result == 0:
            raise StoreQuotaExceeded(
                f'artifact {artifact_id} ({len(data):,} bytes) would take its scope past its budget '
                f'({self.max_scope_bytes:,} bytes); not stored'
            )
        return info

    async def prune(
        self,
        *,
        max_age: float | StoreBound | None = 'store',
        max_bytes: int | StoreBound | None = 'store',
        batch: int = 10_000,
    ) -> PruneReport:
        """Delete what the retention bounds say now: the index entries of expired artifacts, then the oldest
        past `max_bytes` (`'store'`: the store's `ttl` and `max_bytes`; None switches one off for this call),
        `batch` per round trip. Puts do this as they go; this is for a prefix no process writes to."""
        age = self.ttl if max_age == 'store' else max_age
        size = self.max_bytes if max_bytes == 'store' else max_bytes
        removed = freed = 0
        while True:
            now = round(self._clock() * 1000)
            arguments = (now, _bound(age, 1000), _bound(size), batch)
            found = await self._call(
                lambda: self._clients.get().eval(PRUNE_SCRIPT, 3, *self._index_keys(), *arguments)  # noqa: B023
            )
            step, step_freed, held, held_bytes = (int(v) for v in found)
            removed, freed = removed + step, freed + step_freed
            if step < batch:
                return PruneReport(removed, freed, held, held_bytes)

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
        base = self._key('', scope).encode()

        async def scan() -> list[Any]:
            client = self._clients.get()
            ids: list[bytes] = []
            async for key in client.scan_iter(match=self._key('*:info', scope), count=500):
                artifact = bytes(key)[len(base) : -len(b':info')]
                if b':' not in artifact:  # another scope's key under the default scope's prefix
                    ids.append(artifact)
                if len(ids) >= _LIST_SCAN_CAP:
                    break
            values: list[Any] = await client.mget([base + i + b':info' for i in ids]) if ids else []
            return list(zip(ids, values, strict=True))

        found: list[StoredArtifact] = []
        for artifact_id, raw in await self._call(scan):
            with contextlib.suppress(StoreError):  # a corrupt info: not listed
                if raw is not None:
                    found.append(StoredArtifact.from_json(raw, artifact_id.decode()))
        return found  # newest first and `limit` applied by `list_artifacts`

    async def _call(self, func: Callable[[], Awaitable[_T]]) -> _T:
        from redis.exceptions import RedisError

        # A socket timeout is a RedisError (TimeoutError); OSError covers a connection torn mid-call.
        return await self.breaker.call(func, (RedisError, OSError))

    async def aclose(self) -> None:
        """Close the client this store created; a client passed in is left to its owner."""
        await self._clients.aclose()


def _bound(value: float | None, scale: int = 1) -> str:
    return '' if value is None else str(max(1, round(value * scale)))
