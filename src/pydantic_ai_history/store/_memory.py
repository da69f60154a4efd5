"""A bounded in-process spill store, with a budget per scope."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from ._base import ArtifactStore, StoredArtifact, StoreQuotaExceeded

__all__ = ('MemoryStore',)

logger = logging.getLogger('pydantic_ai_history.store')


class _Scope:
    """One scope's artifacts, oldest first, and when the scope was last used."""

    def __init__(self, now: float) -> None:
        self.items: OrderedDict[str, tuple[StoredArtifact, bytes]] = OrderedDict()
        self.bytes = 0
        self.used_at = now


class MemoryStore(ArtifactStore):
    """Artifacts in process memory: at most `max_bytes` in total and `max_scope_bytes` per scope.

    A put may evict only older artifacts of its own scope (with a warning: their read-back is lost), and
    artifacts of scopes idle for more than `reclaim_idle_after` seconds: an active conversation's
    artifacts are never evicted by another's. An artifact larger than `max_artifact_bytes`, or one that
    does not fit even so, is refused with `StoreQuotaExceeded` and nothing is evicted; callers keep the
    content inline. Ids are keyed with `secret`, by default random per instance (nothing survives the
    process anyway). Use `DirectoryStore` when spilled content must stay readable. Like `MemoryCache`, it
    never awaits between reading and writing its dicts, so concurrent tasks on one loop need no lock.
    """

    def __init__(
        self,
        max_bytes: int = 512 * 1024 * 1024,
        *,
        max_scope_bytes: int | None = None,
        max_artifact_bytes: int | None = None,
        reclaim_idle_after: float = 3600.0,
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
        self.reclaim_idle_after = reclaim_idle_after
        self._clock = clock
        self._scopes: dict[str, _Scope] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return sum(len(s.items) for s in self._scopes.values())

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def scope_bytes(self, scope: str = '') -> int:
        """Bytes held for `scope`."""
        found = self._scopes.get(scope)
        return 0 if found is None else found.bytes

    async def _put(
        self,
        artifact_id: str,
        data: bytes,
        media_type: str,
        source: str,
        metadata: dict[str, str],
        scope: str,
    ) -> StoredArtifact:
        now = self._clock()
        bucket = self._scopes.get(scope)
        existing = None if bucket is None else bucket.items.get(artifact_id)
        if existing is not None:
            assert bucket is not None
            bucket.used_at = now
            return existing[0]
        size = len(data)
        limit = min(self.max_artifact_bytes, self.max_scope_bytes, self.max_bytes)
        if size > limit:
            raise StoreQuotaExceeded(
                f'artifact {artifact_id} is {size:,} bytes, more than one artifact may take ({limit:,})'
            )
        if bucket is None:
            bucket = self._scopes[scope] = _Scope(now)
        bucket.used_at = now
        if not self._make_room(bucket, size, now):
            if not bucket.items:
                del self._scopes[scope]
            raise StoreQuotaExceeded(
                f'the store is full ({self._bytes:,} of {self.max_bytes:,} bytes, held by active scopes); '
                f'artifact {artifact_id} ({size:,} bytes) was not stored'
            )
        info = StoredArtifact(artifact_id, media_type, size, source, now, metadata)
        bucket.items[artifact_id] = (info, data)
        bucket.bytes += size
        self._bytes += size
        return info

    def _make_room(self, bucket: _Scope, size: int, now: float) -> bool:
        """Evict within the scope, then from idle scopes; False, with nothing evicted, if it cannot fit."""
        idle = sorted(
            (
                s
                for s in self._scopes.values()
                if s is not bucket and now - s.used_at > self.reclaim_idle_after
            ),
            key=lambda s: s.used_at,
        )
        held_by_active = self._bytes - bucket.bytes - sum(s.bytes for s in idle)
        if held_by_active + size > self.max_bytes:
            return False
        evicted: list[str] = []
        while bucket.items and bucket.bytes + size > self.max_scope_bytes:
            evicted.append(self._evict_oldest(bucket))
        for other in idle:
            while other.items and self._bytes + size > self.max_bytes:
                evicted.append(self._evict_oldest(other))
        while bucket.items and self._bytes + size > self.max_bytes:
            evicted.append(self._evict_oldest(bucket))
        if evicted:
            self._scopes = {k: s for k, s in self._scopes.items() if s.items or s is bucket}
            logger.warning(
                'MemoryStore: evicted %d artifact(s) to make room, which can no longer be read back '
                '(use DirectoryStore to keep them): %s',
                len(evicted),
                ', '.join(evicted),
            )
        return True

    def _evict_oldest(self, bucket: _Scope) -> str:
        old_id, (old_info, _) = bucket.items.popitem(last=False)
        bucket.bytes -= old_info.size_bytes
        self._bytes -= old_info.size_bytes
        return old_id

    def _lookup(self, artifact_id: str, scope: str) -> tuple[StoredArtifact, bytes] | None:
        bucket = self._scopes.get(scope)
        if bucket is None:
            return None
        item = bucket.items.get(artifact_id)
        if item is not None:
            bucket.used_at = self._clock()
        return item

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        item = self._lookup(artifact_id, scope)
        return None if item is None else item[1]

    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        item = self._lookup(artifact_id, scope)
        return None if item is None else item[0]

    async def _list(self, scope: str, limit: int) -> list[StoredArtifact]:
        bucket = self._scopes.get(scope)
        if bucket is None:
            return []
        newest = list(bucket.items.values())[-limit:]
        return [info for info, _ in reversed(newest)]
