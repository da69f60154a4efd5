"""The spill store interface: where the full original of anything the package reduced is kept."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..messages._utf8 import utf8

logger = logging.getLogger('pydantic_ai_history.store')

# Letters, digits, `_` and `-` only: no dots, separators, NUL or percent-escapes, so an id can never
# name anything but a single entry inside a store, whatever the backend does with it.
ARTIFACT_ID_PATTERN = re.compile(r'[A-Za-z0-9_-]{1,128}')

SECRET_BYTES = 32
"""Length of a generated id secret (256 bits)."""

_Loading = tuple[asyncio.AbstractEventLoop, 'asyncio.Task[bytes]']
"""The secret being loaded, on the loop that loads it."""

_ID_DOMAIN = b'pydantic-ai-history/artifact-id/v1\0'

ID_HEX_CHARS = 32
"""Hex characters of the keyed HMAC an artifact id carries (128 bits): unguessable, and no two contents of a
scope share one at any size a store reaches; the model reads and copies every id, and the full digest's 64
cost twice the tokens (o200k: 38.5 on average, 30 to 49, against 20, 14 to 28). Ids made with all 64 (by
0.1.0) stay valid: a store finds an artifact by its id as given."""

Metadata = dict[str, str]
"""An artifact's metadata: text by text key."""


class StoreError(Exception):
    """The store could not do what was asked; callers keep the content inline instead."""


class InvalidArtifactId(StoreError, ValueError):
    """The artifact id does not match `^[A-Za-z0-9_-]{1,128}$`."""


class StoreQuotaExceeded(StoreError):
    """The artifact does not fit the store's or its scope's budget; it was refused and nothing was evicted."""


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
        # ASCII: a lone surrogate in a source or metadata value (a file name) is escaped and read back exactly
        return json.dumps(dataclasses.asdict(self)).encode()

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
    """The plain content hash of `data` (`prefix` + hex sha256).

    Anyone who knows the content can compute it, so the stages never show it to a model: they use
    `ArtifactStore.artifact_id`, which is keyed with the store's secret and the run's scope.
    """
    return prefix + hashlib.sha256(data).hexdigest()


def keyed_artifact_id(secret: bytes, data: bytes, scope: str = '', prefix: str = 'art_') -> str:
    """`prefix` + hex HMAC-SHA256(secret, scope, sha256(data)), its first `ID_HEX_CHARS`: unguessable without
    the secret.

    Equal content gets the same id inside one scope (so it is stored once), a different id in another.
    """
    scope_bytes = utf8(scope)
    message = _ID_DOMAIN + len(scope_bytes).to_bytes(8, 'big') + scope_bytes + hashlib.sha256(data).digest()
    return prefix + hmac.new(secret, message, hashlib.sha256).hexdigest()[:ID_HEX_CHARS]


def scope_tag(scope: str) -> str:
    """A name for `scope` that is safe as a file or key component (`''`, the default scope, stays `''`)."""
    if not scope:
        return ''
    return 'scope-' + hashlib.sha256(utf8(scope)).hexdigest()[:40]


def validate_artifact_id(artifact_id: str) -> str:
    if not isinstance(artifact_id, str) or ARTIFACT_ID_PATTERN.fullmatch(artifact_id) is None:
        raise InvalidArtifactId(f'invalid artifact id {artifact_id!r}: expected ^[A-Za-z0-9_-]{{1,128}}$')
    return artifact_id


def check_bounds(owner: str, **bounds: float | None) -> None:
    """`ValueError` naming the first bound that is set but not positive (None means no bound)."""
    for name, value in bounds.items():
        if value is not None and not value > 0:
            raise ValueError(f'{owner}: {name} must be positive (None: no bound), got {value!r}')


def check_artifact_size(artifact_id: str, size: int, *limits: int | None) -> None:
    """`StoreQuotaExceeded` when `size` bytes pass the smallest of the `limits` that are set."""
    largest = min((limit for limit in limits if limit is not None), default=None)
    if largest is not None and size > largest:
        raise StoreQuotaExceeded(
            f'artifact {artifact_id} is {size:,} bytes, more than one artifact may take ({largest:,})'
        )


def store_full(
    artifact_id: str, size: int, held: int, max_bytes: int, max_age: float | None, where: str = 'the store'
) -> StoreQuotaExceeded:
    """The refusal of an artifact that fits only if something a conversation may still read back were deleted:
    `where` (the store, or its scope) holds `held` of its `max_bytes` in artifacts within their retention."""
    kept = 'kept without an age bound' if max_age is None else f'used within the last {max_age:,.0f} s'
    return StoreQuotaExceeded(
        f'artifact {artifact_id} ({size:,} bytes) does not fit: {where} holds {held:,} of {max_bytes:,} '
        f'bytes in artifacts {kept}, which conversations may still read back; not stored'
    )


def _secret_bytes(secret: bytes | str | None) -> bytes | None:
    if secret is None:
        return None
    value = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(value) < 16:
        raise ValueError('an artifact id secret needs at least 16 bytes')
    return value


class ArtifactStore(ABC):
    """Bytes by artifact id and scope, with their `StoredArtifact` info.

    Every artifact belongs to a *scope* (a conversation or tenant key; `''` is the default scope): a read
    in one scope answers for another scope's artifacts exactly as for a missing id. Ids come from
    `artifact_id(data, scope=...)`, keyed with the store's `secret`, so the content does not give them away.
    Public methods validate ids (`InvalidArtifactId`); putting an id already stored keeps the stored copy.
    """

    # Class defaults too: a subclass written before secrets existed may not call this __init__.
    _secret: bytes | None = None
    _loading: _Loading | None = None

    def __init__(self, *, secret: bytes | str | None = None) -> None:
        self._secret = _secret_bytes(secret)
        self._loading: _Loading | None = None

    # ---- ids --------------------------------------------------------------------------------------------

    def artifact_id(self, data: bytes, *, scope: str = '') -> str:
        """The id under which `data` is stored in `scope`: keyed with this store's secret."""
        return keyed_artifact_id(self._id_secret(), data, scope)

    async def prepare(self) -> None:
        """Load (or create) the persisted secret before the first id or mark; a no-op once loaded.

        Concurrent callers share one load. When it cannot be loaded this raises `StoreError` (the next call
        tries again) rather than use a secret of this process, whose ids and marks no other process knows.
        """
        if self._secret is not None:
            return
        loop = asyncio.get_running_loop()
        loading = self._loading
        if loading is None or loading[0] is not loop:
            loading = (loop, loop.create_task(self._load_secret()))
            self._loading = loading
        task = loading[1]
        try:
            secret = await asyncio.shield(task)
        finally:
            if task.done() and self._loading is loading:
                self._loading = None  # a failed load is tried again by the next call
        if self._secret is None:
            self._secret = secret

    @property
    def secret_ready(self) -> bool:
        """Whether the secret is known (given, generated or loaded): ids and marks can be made without I/O."""
        return self._secret is not None

    def _id_secret(self) -> bytes:
        secret = self._secret
        if secret is None:
            secret = self._secret = self._load_secret_sync()
        return secret

    async def _load_secret(self) -> bytes:
        return self._load_secret_sync()

    def _load_secret_sync(self) -> bytes:
        # In-process stores (and subclasses written before secrets existed): a random secret per instance,
        # which dies with the process like the data.
        return os.urandom(SECRET_BYTES)

    # ---- content ----------------------------------------------------------------------------------------

    async def put(
        self,
        artifact_id: str,
        data: bytes,
        *,
        media_type: str,
        source: str,
        metadata: Mapping[str, str] | None = None,
        scope: str = '',
    ) -> StoredArtifact:
        """Store `data` under `artifact_id` in `scope`; `StoreError` (content not stored) on any failure."""
        validate_artifact_id(artifact_id)
        return await self._put(artifact_id, bytes(data), media_type, source, dict(metadata or {}), scope)

    async def get(self, artifact_id: str, *, scope: str = '') -> bytes | None:
        """All the bytes, or `None` if the id is not stored in `scope`."""
        return await self._get(validate_artifact_id(artifact_id), scope)

    async def info(self, artifact_id: str, *, scope: str = '') -> StoredArtifact | None:
        return await self._info(validate_artifact_id(artifact_id), scope)

    async def read(
        self, artifact_id: str, *, offset: int = 0, limit: int | None = None, scope: str = ''
    ) -> bytes | None:
        """At most `limit` bytes from `offset` (to the end when `limit` is `None`); `None` if missing."""
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError('offset and limit must not be negative')
        return await self._read(validate_artifact_id(artifact_id), offset, limit, scope)

    async def list_artifacts(self, *, scope: str = '', limit: int = 1_000) -> list[StoredArtifact]:
        """What `scope` holds (info only, no bytes), newest first, at most `limit` entries: what a search over
        the conversation reads. `StoreError` when the backend cannot list (a custom store written before
        listing existed): callers then read back by id only."""
        if limit < 1:
            raise ValueError('limit must be positive')
        found = await self._list(scope, limit)
        return sorted(found, key=lambda info: info.created_at, reverse=True)[:limit]

    async def _list(self, scope: str, limit: int) -> list[StoredArtifact]:
        # Not abstract: stores written before listing existed keep working, without search.
        raise StoreError(f'{type(self).__name__} cannot list its artifacts')

    async def aclose(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Release connections; the default has none."""

    @abstractmethod
    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: Metadata, scope: str
    ) -> StoredArtifact: ...

    @abstractmethod
    async def _get(self, artifact_id: str, scope: str) -> bytes | None: ...

    @abstractmethod
    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None: ...

    async def _read(self, artifact_id: str, offset: int, limit: int | None, scope: str) -> bytes | None:
        # Backends that can read a range without loading everything override this.
        data = await self._get(artifact_id, scope)
        if data is None:
            return None
        return data[offset:] if limit is None else data[offset : offset + limit]
