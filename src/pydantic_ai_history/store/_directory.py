"""A spill store in a directory: durable, one file per artifact, confined to its root."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from ._base import ArtifactStore, StoredArtifact, StoreError

__all__ = ('DirectoryStore',)

_T = TypeVar('_T')

# Refuse to follow a symlink in the last path component when opening; ids have no separators, so
# the last component is the only one below the (already resolved) root.
_O_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)


class DirectoryStore(ArtifactStore):
    """Artifacts as `<root>/<id>.bin` with a `<root>/<id>.json` sidecar holding their `StoredArtifact` info.

    Every path is checked to resolve to a direct child of the resolved root, and symlinks are never
    followed, so neither an id nor a link planted inside the root can read or write outside it. Files are
    written to a temporary name in the root and renamed into place, so a reader never sees half a file.
    The root is created on first `put` when `create` is true; any failure to write (missing root with
    `create=False`, read-only root, root that is a file) raises `StoreError`, so callers keep the
    content inline. File IO runs in a worker thread.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        create: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.create = create
        self._clock = clock

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: dict[str, str]
    ) -> StoredArtifact:
        info = StoredArtifact(artifact_id, media_type, len(data), source, self._clock(), metadata)
        return await self._run(self._put_sync, info, data)

    async def _get(self, artifact_id: str) -> bytes | None:
        return await self._run(self._read_sync, artifact_id, 0, None)

    async def _read(self, artifact_id: str, offset: int, limit: int | None) -> bytes | None:
        return await self._run(self._read_sync, artifact_id, offset, limit)

    async def _info(self, artifact_id: str) -> StoredArtifact | None:
        return await self._run(self._info_sync, artifact_id)

    async def _run(self, func: Callable[..., _T], *args: object) -> _T:
        return await anyio.to_thread.run_sync(func, *args)

    def _path(self, artifact_id: str, suffix: str) -> Path:
        path = self.root / f'{artifact_id}{suffix}'
        # The id pattern already excludes separators and dots; this also catches a symlink planted in root.
        if path.is_symlink() or not path.resolve().is_relative_to(self.root) or path.parent != self.root:
            raise StoreError(f'refusing {path}: a symlink, or outside the store root {self.root}')
        return path

    def _ensure_root(self) -> None:
        if self.root.is_dir():
            return
        if self.root.exists():
            raise StoreError(f'store root {self.root} exists and is not a directory')
        if not self.create:
            raise StoreError(f'store root {self.root} does not exist')
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f'cannot create store root {self.root}: {e}') from e

    def _put_sync(self, info: StoredArtifact, data: bytes) -> StoredArtifact:
        self._ensure_root()
        data_path = self._path(info.artifact_id, '.bin')
        info_path = self._path(info.artifact_id, '.json')
        if data_path.exists():
            existing = self._info_sync(info.artifact_id)
            if existing is not None:
                return existing
        # Data first, sidecar last: an artifact with a sidecar is always complete.
        self._write_atomic(data_path, data)
        self._write_atomic(info_path, info.to_json())
        return info

    def _write_atomic(self, path: Path, data: bytes) -> None:
        try:
            # Temporary names start with a dot and contain dots, so they can never collide with an id.
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix='.', suffix='.tmp')
        except OSError as e:
            raise StoreError(f'cannot write to store root {self.root}: {e}') from e
        try:
            with os.fdopen(fd, 'wb') as f:
                f.write(data)
            # os.replace swaps the directory entry; it never writes through a symlink at `path`.
            os.replace(tmp, path)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f'cannot write {path}: {e}') from e
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _open(self, path: Path) -> int | None:
        try:
            return os.open(path, os.O_RDONLY | _O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:
            # ELOOP when a symlink appeared after the check in `_path`.
            raise StoreError(f'cannot read {path}: {e}') from e

    def _read_sync(self, artifact_id: str, offset: int, limit: int | None) -> bytes | None:
        path = self._path(artifact_id, '.bin')
        fd = self._open(path)
        if fd is None:
            return None
        try:
            with os.fdopen(fd, 'rb') as f:
                f.seek(offset)
                return f.read() if limit is None else f.read(limit)
        except OSError as e:
            raise StoreError(f'cannot read {path}: {e}') from e

    def _info_sync(self, artifact_id: str) -> StoredArtifact | None:
        path = self._path(artifact_id, '.json')
        fd = self._open(path)
        if fd is None:
            return None
        try:
            with os.fdopen(fd, 'rb') as f:
                raw = f.read()
        except OSError as e:
            raise StoreError(f'cannot read {path}: {e}') from e
        return StoredArtifact.from_json(raw, artifact_id)
