"""The spill store: where the full original of anything the package reduced is kept for read-back.

`MemoryStore` is bounded and evicts (losing read-back of what it evicts); `DirectoryStore` is durable;
`RedisStore` is shared between processes. Ids are content hashes (`artifact_id(data)`), validated
against `^[A-Za-z0-9_-]{1,128}$`.
"""

from __future__ import annotations

from ._base import ArtifactStore, InvalidArtifactId, StoredArtifact, StoreError, artifact_id
from ._directory import DirectoryStore
from ._memory import MemoryStore
from ._redis import RedisStore

__all__ = (
    'ArtifactStore',
    'DirectoryStore',
    'InvalidArtifactId',
    'MemoryStore',
    'RedisStore',
    'StoreError',
    'StoredArtifact',
    'artifact_id',
)
