"""A bounded in-process spill store."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from ._base import ArtifactStore, StoredArtifact, StoreError

__all__ = ('MemoryStore',)

logger = logging.getLogger('pydantic_ai_history.store')


class MemoryStore(ArtifactStore):
    """Artifacts in process memory, at most `max_bytes` of content in total.

    When a new artifact does not fit, the oldest are evicted with a warning: their read-back is lost, and
    a model asking for them gets "not found". Nothing survives the process. Use `DirectoryStore` when
    spilled content must stay readable. Like `MemoryCache`, it never awaits between reading and writing
    its dict, so concurrent tasks on one event loop need no lock.
    """

    def __init__(self, max_bytes: int = 512 * 1024 * 1024, *, clock: Callable[[], float] = time.time) -> None:
        if max_bytes < 1:
            raise ValueError('max_bytes must be positive')
        self.max_bytes = max_bytes
        self._clock = clock
        self._items: OrderedDict[str, tuple[StoredArtifact, bytes]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: dict[str, str]
    ) -> StoredArtifact:
        existing = self._items.get(artifact_id)
        if existing is not None:
            return existing[0]
        if len(data) > self.max_bytes:
            raise StoreError(
                f'artifact {artifact_id} is {len(data)} bytes, more than the store holds ({self.max_bytes})'
            )
        evicted: list[str] = []
        while self._bytes + len(data) > self.max_bytes:
            old_id, (old_info, _) = self._items.popitem(last=False)
            self._bytes -= old_info.size_bytes
            evicted.append(old_id)
        if evicted:
            logger.warning(
                'MemoryStore full (%d bytes): evicted %d oldest artifact(s), which can no longer be read '
                'back (use DirectoryStore to keep them): %s',
                self.max_bytes,
                len(evicted),
                ', '.join(evicted),
            )
        info = StoredArtifact(artifact_id, media_type, len(data), source, self._clock(), metadata)
        self._items[artifact_id] = (info, data)
        self._bytes += len(data)
        return info

    async def _get(self, artifact_id: str) -> bytes | None:
        item = self._items.get(artifact_id)
        return None if item is None else item[1]

    async def _info(self, artifact_id: str) -> StoredArtifact | None:
        item = self._items.get(artifact_id)
        return None if item is None else item[0]
