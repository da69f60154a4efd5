"""A bounded in-process spill store: least recently used first out, across scopes, with a budget per scope."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from ..messages._marks import process_secret
from ._base import ArtifactStore, StoredArtifact, check_artifact_size

__all__ = ('MemoryStore',)

logger = logging.getLogger('pydantic_ai_history.store')

_Key = tuple[str, str]
"""(scope, artifact id)."""


class MemoryStore(ArtifactStore):
    """Artifacts in process memory: at most `max_bytes` in total and `max_scope_bytes` per scope.

    A put evicts the least recently used artifacts, first of its own scope when that is at its budget, then
    across scopes: the newest is always stored, and no tenant can push everyone else out. An artifact larger
    than `max_artifact_bytes` (or either budget) is refused with `StoreQuotaExceeded`, evicting nothing.
    Evictions are logged and counted in `evicted`; an evicted id reads as "no longer stored".

    Ids are keyed with the process's own secret by default, so data and note marks die with the process
    (use `DirectoryStore` or `RedisStore` when they must outlive it). It never awaits between reading and
    writing its dicts, so concurrent tasks on one loop need no lock.
    """

    def __init__(
        self,
        max_bytes: int = 512 * 1024 * 1024,
        *,
        max_scope_bytes: int | None = None,
        max_artifact_bytes: int | None = None,
        secret: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(secret=secret)
        self.max_bytes = max_bytes
        self.max_scope_bytes = max_scope_bytes if max_scope_bytes is not None else max(max_bytes // 4, 1)
        self.max_artifact_bytes = (
            max_artifact_bytes if max_artifact_bytes is not None else self.max_scope_bytes
        )
        if min(self.max_bytes, self.max_scope_bytes, self.max_artifact_bytes) < 1:
            raise ValueError('max_bytes, max_scope_bytes and max_artifact_bytes must be positive')
        self._clock = clock
        self._items: OrderedDict[_Key, tuple[StoredArtifact, bytes]] = OrderedDict()
        """Every artifact, least recently used first."""
        self._scopes: dict[str, OrderedDict[str, None]] = {}
        """Each scope's artifact ids, least recently used first."""
        self._scope_bytes: dict[str, int] = {}
        self._bytes = 0
        self.evicted = 0
        """Artifacts evicted to make room since the store was made."""

    def _load_secret_sync(self) -> bytes:
        return process_secret()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def scope_bytes(self, scope: str = '') -> int:
        """Bytes held for `scope`."""
        return self._scope_bytes.get(scope, 0)

    async def _put(
        self,
        artifact_id: str,
        data: bytes,
        media_type: str,
        source: str,
        metadata: dict[str, str],
        scope: str,
    ) -> StoredArtifact:
        existing = self._lookup(artifact_id, scope)
        if existing is not None:
            return existing[0]
        size = len(data)
        check_artifact_size(artifact_id, size, self.max_artifact_bytes, self.max_scope_bytes, self.max_bytes)
        self._make_room(scope, size)
        info = StoredArtifact(artifact_id, media_type, size, source, self._clock(), metadata)
        self._items[(scope, artifact_id)] = (info, data)
        self._scopes.setdefault(scope, OrderedDict())[artifact_id] = None
        self._scope_bytes[scope] = self._scope_bytes.get(scope, 0) + size
        self._bytes += size
        return info

    def _make_room(self, scope: str, size: int) -> None:
        """Evict the scope's least recently used past its budget, then anyone's past the store's."""
        evicted: list[str] = []
        own = self._scopes.get(scope)
        while own and self._scope_bytes[scope] + size > self.max_scope_bytes:
            evicted.append(self._evict((scope, next(iter(own)))))
        while self._items and self._bytes + size > self.max_bytes:
            evicted.append(self._evict(next(iter(self._items))))
        if evicted:
            first = self.evicted == 0
            self.evicted += len(evicted)
            logger.log(
                logging.WARNING if first else logging.INFO,
                'MemoryStore: evicted the %d least recently used artifact(s) to make room; they can no '
                'longer be read back (use DirectoryStore or RedisStore to keep them): %s',
                len(evicted),
                ', '.join(evicted),
            )

    def _evict(self, key: _Key) -> str:
        info, _ = self._items.pop(key)
        scope, artifact_id = key
        ids = self._scopes[scope]
        del ids[artifact_id]
        self._scope_bytes[scope] -= info.size_bytes
        if not ids:
            del self._scopes[scope], self._scope_bytes[scope]
        self._bytes -= info.size_bytes
        return artifact_id

    def _lookup(self, artifact_id: str, scope: str) -> tuple[StoredArtifact, bytes] | None:
        """The artifact, now the most recently used; None when it is not stored in `scope`."""
        key = (scope, artifact_id)
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
            self._scopes[scope].move_to_end(artifact_id)
        return item

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        item = self._lookup(artifact_id, scope)
        return None if item is None else item[1]

    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        item = self._lookup(artifact_id, scope)
        return None if item is None else item[0]

    async def _list(self, scope: str, limit: int) -> list[StoredArtifact]:
        ids = self._scopes.get(scope)
        if not ids:
            return []
        # most recently used first; a listing reads without touching the recency of what it lists
        recent = [self._items[(scope, artifact_id)][0] for artifact_id in reversed(ids)]
        return recent[:limit]
