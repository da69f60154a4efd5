"""The spill store: where the full original of anything the package reduced is kept for read-back.

`MemoryStore` is bounded and in-process; `DirectoryStore` is durable; `RedisStore` is shared between
processes. Every store keeps an artifact for as long as its retention says a conversation may read it back
(`max_age`, `ttl`): a put that does not fit otherwise is refused (`StoreQuotaExceeded`), never stored
and then deleted, and never stored by deleting an artifact still within its retention. Every artifact
belongs to a scope (a conversation or tenant key) and is read back only in it. Ids are keyed hashes
(`store.artifact_id(data, scope=...)`), unguessable from the content, and validated against
`^[A-Za-z0-9_-]{1,128}$`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._base import (
    ArtifactStore,
    InvalidArtifactId,
    StoredArtifact,
    StoreError,
    StoreQuotaExceeded,
    artifact_id,
    keyed_artifact_id,
    scope_tag,
)
from ._memory import MemoryStore

if TYPE_CHECKING:
    from ._breaker import StoreBreaker
    from ._directory import DirectoryStore
    from ._redis import RedisStore
    from ._redis_client import RedisPoolSettings
    from ._retention import DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, PruneReport

__all__ = (
    'DEFAULT_MAX_AGE',
    'DEFAULT_MAX_BYTES',
    'ArtifactStore',
    'DirectoryStore',
    'InvalidArtifactId',
    'MemoryStore',
    'PruneReport',
    'RedisPoolSettings',
    'RedisStore',
    'StoreBreaker',
    'StoreError',
    'StoreQuotaExceeded',
    'StoredArtifact',
    'artifact_id',
    'keyed_artifact_id',
    'scope_tag',
)

# Backends load on first use: the default path never needs them (their imports, e.g. sqlite3, cost time).
_LAZY = {
    'DEFAULT_MAX_AGE': '._retention',
    'DEFAULT_MAX_BYTES': '._retention',
    'DirectoryStore': '._directory',
    'PruneReport': '._retention',
    'RedisPoolSettings': '._redis_client',
    'RedisStore': '._redis',
    'StoreBreaker': '._breaker',
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
