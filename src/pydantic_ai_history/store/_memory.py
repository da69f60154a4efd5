"""A bounded in-process spill store: what a conversation may still read back stays, what does not fit is
refused."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from ..messages._marks import process_secret
from ._base import (
    ArtifactStore,
    Metadata,
    StoredArtifact,
    check_artifact_size,
    check_bounds,
    logger,
    store_full,
)

_Key = tuple[str, str]
"""(scope, artifact id)."""

DEFAULT_MEMORY_MAX_AGE = 24 * 3600.0
"""Default retention of `MemoryStore`: an artifact written or read in the last day is kept for the
conversation that may read it back; older ones make room for new ones."""


class MemoryStore(ArtifactStore):
    """Artifacts in process memory: at most `max_bytes` in total and `max_scope_bytes` per scope.

    An artifact written or read within `max_age` (a day) belongs to a conversation that may still read it
    back: it is never evicted to make room. Eviction order: when a put does not fit its scope's budget, the
    scope's own artifacts unused for longer than `max_age` go, least recently used first; when it does not fit
    the store, anyone's unused for longer than `max_age`, least recently used first. A put that still does not
    fit (or is larger than `max_artifact_bytes` or either budget) is refused with `StoreQuotaExceeded`
    before anything is evicted, so callers say the original is lost instead of naming an id that would not
    read back. `max_age=None` keeps everything: a full store then refuses every new artifact. Evictions are
    logged and counted in `evicted`; an evicted id reads as "no longer stored".

    Ids are keyed with the process's own secret by default, so data and note marks die with the process
    (use `DirectoryStore` or `RedisStore` when they must outlive it). It never awaits between reading and
    writing its dicts, so concurrent tasks on one loop need no lock.

    Example:
        ```python
        from pydantic_ai_history import create_history_processor
        from pydantic_ai_history.store import MemoryStore

        # one process, originals for a day: 64 MiB in all, 8 MiB per conversation (scope)
        store = MemoryStore(64 * 1024 * 1024, max_scope_bytes=8 * 1024 * 1024)
        processor = create_history_processor(store=store)
        ```
    """

    def __init__(
        self,
        max_bytes: int = 512 * 1024 * 1024,
        *,
        max_scope_bytes: int | None = None,
        max_artifact_bytes: int | None = None,
        max_age: float | None = DEFAULT_MEMORY_MAX_AGE,
        secret: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(secret=secret)
        check_bounds('MemoryStore', max_age=max_age)
        self.max_bytes = max_bytes
        self.max_scope_bytes = max_scope_bytes if max_scope_bytes is not None else max(max_bytes // 4, 1)
        self.max_artifact_bytes = (
            max_artifact_bytes if max_artifact_bytes is not None else self.max_scope_bytes
        )
        if min(self.max_bytes, self.max_scope_bytes, self.max_artifact_bytes) < 1:
            raise ValueError('max_bytes, max_scope_bytes and max_artifact_bytes must be positive')
        self.max_age = max_age
        """Seconds an artifact is kept for its conversation after it was last written or read (never evicted
        to make room before); None: never evicted."""
        self._clock = clock
        self._items: OrderedDict[_Key, tuple[StoredArtifact, bytes]] = OrderedDict()
        """Every artifact, least recently used first."""
        self._used: dict[_Key, float] = {}
        """When each artifact was last written or read (by `clock`)."""
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
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: Metadata, scope: str
    ) -> StoredArtifact:
        existing = self._lookup(artifact_id, scope)
        if existing is not None:
            return existing[0]
        size = len(data)
        check_artifact_size(artifact_id, size, self.max_artifact_bytes, self.max_scope_bytes, self.max_bytes)
        self._make_room(artifact_id, scope, size)
        now = self._clock()
        info = StoredArtifact(artifact_id, media_type, size, source, now, metadata)
        key = (scope, artifact_id)
        self._items[key] = (info, data)
        self._used[key] = now
        self._scopes.setdefault(scope, OrderedDict())[artifact_id] = None
        self._scope_bytes[scope] = self._scope_bytes.get(scope, 0) + size
        self._bytes += size
        return info

    def _make_room(self, artifact_id: str, scope: str, size: int) -> None:
        """Evict what `_room_for` chose; `StoreQuotaExceeded`, evicting nothing, when it found no room."""
        victims = self._room_for(scope, size)
        held = self.scope_bytes(scope)
        if victims is None and held + size > self.max_scope_bytes:
            raise store_full(artifact_id, size, held, self.max_scope_bytes, self.max_age, 'its scope')
        if victims is None:
            raise store_full(artifact_id, size, self._bytes, self.max_bytes, self.max_age)
        if victims:
            self._evict_all(victims)

    def _room_for(self, scope: str, size: int) -> list[_Key] | None:
        """The artifacts to evict so `size` more bytes fit the scope's budget and the store's: only those
        past `max_age`, least recently used first (the scope's own for its budget). None when they are not
        enough."""
        expired = self._expired(self._clock())
        own = ((scope, artifact_id) for artifact_id in self._scopes.get(scope, ()))
        victims = _take(own, self.scope_bytes(scope) + size - self.max_scope_bytes, expired, self._size)
        if victims is None:
            return None
        freed = sum(self._size(key) for key in victims)
        chosen = set(victims)
        others = (key for key in self._items if key not in chosen)
        more = _take(others, self._bytes - freed + size - self.max_bytes, expired, self._size)
        return None if more is None else [*victims, *more]

    def _expired(self, now: float) -> Callable[[_Key], bool]:
        max_age = self.max_age
        if max_age is None:
            return lambda key: False
        return lambda key: now - self._used[key] > max_age

    def _size(self, key: _Key) -> int:
        return self._items[key][0].size_bytes

    def _evict_all(self, victims: list[_Key]) -> None:
        for key in victims:
            self._evict(key)
        first = self.evicted == 0
        self.evicted += len(victims)
        logger.log(
            logging.WARNING if first else logging.INFO,
            'MemoryStore: evicted %d artifact(s) unused for longer than max_age (%s s) to make room: %s',
            len(victims),
            self.max_age,
            ', '.join(artifact_id for _, artifact_id in victims),
        )

    def _evict(self, key: _Key) -> None:
        info, _ = self._items.pop(key)
        del self._used[key]
        scope, artifact_id = key
        ids = self._scopes[scope]
        del ids[artifact_id]
        self._scope_bytes[scope] -= info.size_bytes
        if not ids:
            del self._scopes[scope], self._scope_bytes[scope]
        self._bytes -= info.size_bytes

    def _lookup(self, artifact_id: str, scope: str) -> tuple[StoredArtifact, bytes] | None:
        """The artifact, now the most recently used; None when it is not stored in `scope`."""
        key = (scope, artifact_id)
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
            self._scopes[scope].move_to_end(artifact_id)
            self._used[key] = self._clock()
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


def _take(
    keys: Iterable[_Key], over: int, expired: Callable[[_Key], bool], size: Callable[[_Key], int]
) -> list[_Key] | None:
    """The least recently used of `keys` (in that order) past their retention until `over` bytes are freed;
    None when the first one still in its retention comes before (the rest are used more recently still)."""
    taken: list[_Key] = []
    for key in keys:
        if over <= 0:
            break
        if not expired(key):
            return None
        taken.append(key)
        over -= size(key)
    return taken if over <= 0 else None
