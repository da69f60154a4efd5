"""The spill store interface: where the full original of anything the package reduced is kept."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ('ArtifactStore', 'InvalidArtifactId', 'StoreError', 'StoredArtifact', 'artifact_id')

# Letters, digits, `_` and `-` only: no dots, separators, NUL or percent-escapes, so an id can never
# name anything but a single entry inside a store, whatever the backend does with it.
ARTIFACT_ID_PATTERN = re.compile(r'[A-Za-z0-9_-]{1,128}')


class StoreError(Exception):
    """The store could not do what was asked; callers keep the content inline instead."""


class InvalidArtifactId(StoreError, ValueError):
    """The artifact id does not match `^[A-Za-z0-9_-]{1,128}$`."""


@dataclass(frozen=True)
class StoredArtifact:
    """What a store knows about one artifact, without its bytes."""

    artifact_id: str
    media_type: str
    size_bytes: int
    source: str
    """Where the content came from, e.g. a tool name or a file name; shown to the model on read-back."""
    created_at: float
    """Seconds since the epoch."""
    metadata: dict[str, str] = field(default_factory=dict[str, str])

    def to_json(self) -> bytes:
        """The sidecar every backend keeps beside the bytes."""
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, raw: bytes | str, artifact_id: str) -> StoredArtifact:
        """Read a sidecar back; `StoreError` when it is corrupt (the bytes alone cannot be described)."""
        try:
            d = json.loads(raw)
            return cls(
                artifact_id=artifact_id,
                media_type=str(d['media_type']),
                size_bytes=int(d['size_bytes']),
                source=str(d['source']),
                created_at=float(d['created_at']),
                metadata={str(k): str(v) for k, v in d.get('metadata', {}).items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StoreError(f'corrupt artifact info for {artifact_id}: {e}') from e


def artifact_id(data: bytes, prefix: str = 'art_') -> str:
    """The content-hash id of `data`: `prefix` + hex sha256, so equal content is stored once."""
    return prefix + hashlib.sha256(data).hexdigest()


def validate_artifact_id(artifact_id: str) -> str:
    if not isinstance(artifact_id, str) or ARTIFACT_ID_PATTERN.fullmatch(artifact_id) is None:
        raise InvalidArtifactId(f'invalid artifact id {artifact_id!r}: expected ^[A-Za-z0-9_-]{{1,128}}$')
    return artifact_id


class ArtifactStore(ABC):
    """Bytes by artifact id, with their `StoredArtifact` info.

    The public methods validate ids (raising `InvalidArtifactId`) before a backend sees them. Putting an
    id that is already stored keeps the stored copy and returns its info: ids are content hashes.
    """

    async def put(
        self,
        artifact_id: str,
        data: bytes,
        *,
        media_type: str,
        source: str,
        metadata: Mapping[str, str] | None = None,
    ) -> StoredArtifact:
        validate_artifact_id(artifact_id)
        return await self._put(artifact_id, bytes(data), media_type, source, dict(metadata or {}))

    async def get(self, artifact_id: str) -> bytes | None:
        """All the bytes, or `None` if the id is not stored."""
        return await self._get(validate_artifact_id(artifact_id))

    async def info(self, artifact_id: str) -> StoredArtifact | None:
        return await self._info(validate_artifact_id(artifact_id))

    async def read(self, artifact_id: str, *, offset: int = 0, limit: int | None = None) -> bytes | None:
        """At most `limit` bytes from `offset` (to the end when `limit` is `None`); `None` if missing."""
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError('offset and limit must not be negative')
        return await self._read(validate_artifact_id(artifact_id), offset, limit)

    async def aclose(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Release connections; the default has none."""

    @abstractmethod
    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: dict[str, str]
    ) -> StoredArtifact: ...

    @abstractmethod
    async def _get(self, artifact_id: str) -> bytes | None: ...

    @abstractmethod
    async def _info(self, artifact_id: str) -> StoredArtifact | None: ...

    async def _read(self, artifact_id: str, offset: int, limit: int | None) -> bytes | None:
        # Backends that can read a range without loading everything override this.
        data = await self._get(artifact_id)
        if data is None:
            return None
        return data[offset:] if limit is None else data[offset : offset + limit]
