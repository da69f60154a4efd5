"""A spill store in a directory: durable, a file per artifact, a folder per scope, confined to its root."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from ._base import (
    ARTIFACT_ID_PATTERN,
    SECRET_BYTES,
    ArtifactStore,
    Metadata,
    StoredArtifact,
    StoreError,
    StoreQuotaExceeded,
    check_artifact_size,
    check_bounds,
    logger,
    scope_tag,
    store_full,
    validate_artifact_id,
)
from ._breaker import StoreBreaker

# O_NOFOLLOW: ids have no separators, so the last path component is the only one below the checked folder.
from ._private_files import O_NOFOLLOW, PRIVATE_DIR_MODE, create_private_file, make_private_dirs
from ._retention import DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, Held, PruneReport, StoreBound, plan_prune

_T = TypeVar('_T')

SECRET_FILE = '.artifact-id-secret'
"""The id secret generated for a store that was given none, kept in its root (mode 0600)."""


def _write_all(fd: int, data: bytes) -> None:
    with open(fd, 'wb', closefd=False) as f:
        f.write(data)


class DirectoryStore(ArtifactStore):
    """Artifacts as `<root>/<scope>/<id>.bin` with a `<id>.json` sidecar holding their `StoredArtifact` info.

    The default scope `''` lives in the root, every other in a folder named after its hash. Paths are
    checked to stay inside the resolved root, symlinks are never followed and hard-linked files are refused,
    so nothing planted in the root reads or writes outside it. Files are written under a temporary name and
    renamed, so a reader never sees half a file. A failed write raises `StoreError` (callers keep the content
    inline) and opens the breaker: writes are refused at once for `cooldown` seconds.

    Retention, on by default: an artifact unused (not written or read) for `max_age` (30 days) is deleted, at
    least every `prune_every` seconds as the store writes. Until then it belongs to a conversation that may
    still read it back, and no write deletes it to make room: a put that would take the root past `max_bytes`
    (1 GiB of data and sidecars, all scopes) first deletes what expired (oldest first) and, if it still does
    not fit, is refused with `StoreQuotaExceeded` before anything is written, as is an artifact larger than
    `max_bytes`. So callers say the original is lost instead of naming an id that would not read back.
    `pydantic-ai-history prune ROOT` (`prune()`) applies the bounds on demand and, unlike a write, deletes the
    least recently used past `max_bytes` even within `max_age`. `None` switches a bound off (`max_age=None`:
    a full root refuses every new artifact). `max_scope_bytes`/`max_artifact_bytes` refuse what would pass
    them (`StoreQuotaExceeded`): nothing of a scope is deleted to make room in it.

    Folders are created 0700 and files 0600 whatever the umask. Without a `secret`, one is generated once into
    `<root>/.artifact-id-secret`, so ids and notes stay stable across restarts and processes; if it cannot be
    read or created, `prepare()` raises `StoreError` and nothing is stored. Reads never need it.

    Example:
        ```python
        import tempfile

        from pydantic_ai_history import create_history_processor
        from pydantic_ai_history.store import DirectoryStore

        # originals survive restarts; a week of retention, at most 256 MiB on disk
        root = tempfile.mkdtemp()  # e.g. /var/lib/my-app/artifacts
        store = DirectoryStore(root, max_age=7 * 24 * 3600, max_bytes=256 * 1024 * 1024)
        processor = create_history_processor(store=store)
        ```
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        create: bool = True,
        max_age: float | None = DEFAULT_MAX_AGE,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        prune_every: float = 3600.0,
        max_scope_bytes: int | None = None,
        max_artifact_bytes: int | None = None,
        secret: bytes | str | None = None,
        cooldown: float = 30.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(secret=secret)
        check_bounds('DirectoryStore', max_age=max_age, max_bytes=max_bytes, prune_every=prune_every)
        self._given_root = root
        self._root: Path | None = None
        self.create = create
        self.max_age = max_age
        """Seconds an artifact is kept after it was last written or read; None keeps it forever."""
        self.max_bytes = max_bytes
        """Bytes the root may hold (data and sidecars of every scope); None: no bound."""
        self.prune_every = prune_every
        """Seconds between two prunes a writing process makes, at most."""
        self.max_scope_bytes = max_scope_bytes
        self.max_artifact_bytes = max_artifact_bytes
        self._clock = clock
        self._pruning = threading.Lock()
        self._next_prune = 0.0
        self._room = threading.Lock()
        """Guards the two counts below: a put reserves its bytes before it writes them."""
        self._known_bytes: int | None = None
        """What the root held at the last prune, plus what this process wrote since (None before one)."""
        self._reserved = 0
        """Bytes of puts this process is writing now."""
        self.breaker = StoreBreaker(name=f'DirectoryStore({root})', cooldown=cooldown, clock=monotonic)
        """Opened by a failed write; reads are not gated (a full disk still reads)."""

    @property
    def root(self) -> Path:
        """The directory, resolved on first use: building the store touches no file system (workflow code
        may build it, as a durable agent's module does)."""
        if self._root is None:
            self._root = Path(self._given_root).expanduser().resolve()
        return self._root

    # ---- secret -------------------------------------------------------------------------------------------

    async def _load_secret(self) -> bytes:
        return await self._run(self._load_secret_sync)

    def _load_secret_sync(self) -> bytes:
        try:
            return self._read_or_create_secret()
        except (OSError, StoreError) as e:
            # never a secret of this process: its ids and marks would mean nothing to the next one
            raise StoreError(
                f'DirectoryStore({self.root}): cannot read or create the secret {SECRET_FILE} in the root '
                f'({e}); nothing can be stored or marked until it can (or pass `secret=`)'
            ) from e

    def _read_or_create_secret(self) -> bytes:
        self._ensure_root()
        path = self.root / SECRET_FILE
        secret = os.urandom(SECRET_BYTES)
        if create_private_file(path, secret):
            return secret
        for _ in range(50):
            secret_read = self._read_file(path)
            if secret_read is not None and len(secret_read) >= SECRET_BYTES:
                return secret_read[:SECRET_BYTES]
            time.sleep(0.01)  # another process created it a moment ago and is still writing it
        raise StoreError(f'{path} is incomplete')

    # ---- operations ---------------------------------------------------------------------------------------

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: Metadata, scope: str
    ) -> StoredArtifact:
        check_artifact_size(artifact_id, len(data), self.max_artifact_bytes, self.max_bytes)
        info = StoredArtifact(artifact_id, media_type, len(data), source, self._clock(), metadata)

        async def write() -> StoredArtifact:
            return await self._run(self._put_sync, info, data, scope)

        return await self.breaker.call(write, (OSError, _WriteFailed))

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        return await self._run(self._read_sync, artifact_id, 0, None, scope)

    async def _read(self, artifact_id: str, offset: int, limit: int | None, scope: str) -> bytes | None:
        return await self._run(self._read_sync, artifact_id, offset, limit, scope)

    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        return await self._run(self._info_sync, artifact_id, scope)

    async def _list(self, scope: str, limit: int) -> list[StoredArtifact]:
        return await self._run(self._list_sync, scope, limit)

    async def _run(self, func: Callable[..., _T], *args: object) -> _T:
        return await anyio.to_thread.run_sync(func, *args)

    # ---- retention ----------------------------------------------------------------------------------------

    async def prune(
        self, *, max_age: float | StoreBound | None = 'store', max_bytes: int | StoreBound | None = 'store'
    ) -> PruneReport:
        """Delete what the retention bounds say now: expired artifacts, then the least recently used past
        `max_bytes`. `'store'`: the store's own bound; None switches one off for this call."""
        age = self.max_age if max_age == 'store' else max_age
        size = self.max_bytes if max_bytes == 'store' else max_bytes
        return await self._run(self._prune_sync, age, size)

    def _prune_after_write(self) -> None:
        """A prune of what expired, in the writing thread; one at a time per store, and a failure only logged.
        Never past `max_bytes`: a write makes room by refusing, not by deleting what is still in use."""
        if not self._pruning.acquire(blocking=False):
            return
        try:
            self._prune_locked(self.max_age, None)
        except (OSError, StoreError) as e:
            logger.warning('DirectoryStore(%s): pruning failed (%s); tried again later', self.root, e)
            self._next_prune = self._clock() + self.prune_every
        finally:
            self._pruning.release()

    def _reserve(self, artifact_id: str, need: int) -> None:
        """Count `need` bytes about to be written; when they would take the root past `max_bytes`, delete what
        expired first, then `StoreQuotaExceeded` if they still do not fit (nothing in use is deleted)."""
        if self._fits(need):
            return
        self._prune_sync(self.max_age, None)  # counts what the root holds now
        if self._fits(need):
            return
        with self._room:
            held = (self._known_bytes or 0) + self._reserved
        raise store_full(artifact_id, need, held, self.max_bytes or 0, self.max_age)

    def _fits(self, need: int) -> bool:
        """Reserve `need` bytes if they fit `max_bytes` by this process's count (unknown before a prune)."""
        with self._room:
            bound = self.max_bytes
            if bound is not None and (
                self._known_bytes is None or self._known_bytes + self._reserved + need > bound
            ):
                return False
            self._reserved += need
            return True

    def _release(self, need: int, *, written: bool) -> None:
        """The reserved bytes were written (now part of what the root holds) or not."""
        with self._room:
            self._reserved -= need
            if written and self._known_bytes is not None:
                self._known_bytes += need

    def _prune_sync(self, max_age: float | None, max_bytes: int | None) -> PruneReport:
        with self._pruning:
            return self._prune_locked(max_age, max_bytes)

    def _prune_locked(self, max_age: float | None, max_bytes: int | None) -> PruneReport:
        now = self._clock()
        if not self.root.is_dir():
            with self._room:
                self._known_bytes = 0
            return PruneReport(0, 0, 0, 0)
        held, junk = self._scan(now)
        deleted, kept = plan_prune(held, now=now, max_age=max_age, max_bytes=max_bytes)
        for item in deleted:
            data = Path(item.key)
            data.with_suffix('.json').unlink(missing_ok=True)  # the info first: then it reads as missing
            data.unlink(missing_ok=True)
        for path in junk:
            path.unlink(missing_ok=True)
        self._remove_empty_scopes()
        result = PruneReport(len(deleted), sum(h.size for h in deleted), len(kept), sum(h.size for h in kept))
        with self._room:
            self._known_bytes = result.held_bytes
        self._next_prune = now + self.prune_every
        if deleted:
            logger.info('DirectoryStore(%s): pruned: %s', self.root, result)
        return result

    def _folders(self) -> list[Path]:
        """The root and every scope folder in it (never through a symlink)."""
        folders = [self.root]
        with os.scandir(self.root) as entries:
            folders.extend(
                Path(e.path)
                for e in entries
                if e.name.startswith('scope-') and e.is_dir(follow_symlinks=False)
            )
        return folders

    def _scan(self, now: float) -> tuple[list[Held], list[Path]]:
        """Every complete artifact, and the leftovers of interrupted writes older than an hour."""
        held: list[Held] = []
        junk: list[Path] = []
        for folder in self._folders():
            with os.scandir(folder) as entries:
                files = {e.name: e for e in entries if e.is_file(follow_symlinks=False)}
            for name, entry in files.items():
                stat_ = entry.stat(follow_symlinks=False)
                stem, _, suffix = name.rpartition('.')
                ours = suffix == 'bin' and ARTIFACT_ID_PATTERN.fullmatch(stem) is not None
                sidecar = files.get(f'{stem}.json') if ours else None
                if sidecar is not None:
                    size = stat_.st_size + sidecar.stat(follow_symlinks=False).st_size
                    held.append(Held(entry.path, size, stat_.st_mtime))
                elif _leftover(name, suffix, files) and now - stat_.st_mtime > _LEFTOVER_AGE:
                    junk.append(Path(entry.path))
        return held, junk

    def _remove_empty_scopes(self) -> None:
        """Remove scope folders left empty for an hour (a write into one meanwhile re-creates it)."""
        for folder in self._folders()[1:]:
            try:
                if time.time() - os.lstat(folder).st_mtime > _LEFTOVER_AGE:
                    os.rmdir(folder)  # refuses a folder that is not empty
            except OSError:
                continue

    def _touch(self, path: Path) -> None:
        """Mark `path` used now (by the store's clock): retention deletes the least recently used first."""
        now = self._clock()
        # a read-only root still reads; its artifacts then age from when they were written
        with contextlib.suppress(OSError, NotImplementedError):
            os.utime(path, (now, now), follow_symlinks=False)

    # ---- paths --------------------------------------------------------------------------------------------

    def _folder(self, scope: str) -> Path:
        tag = scope_tag(scope)
        return self.root / tag if tag else self.root

    def _path(self, artifact_id: str, suffix: str, scope: str) -> Path:
        folder = self._folder(scope)
        path = folder / f'{artifact_id}{suffix}'
        # The id pattern already excludes separators and dots; this also catches a symlink planted in root.
        if (
            folder.is_symlink()
            or path.is_symlink()
            or not path.resolve().is_relative_to(self.root)
            or path.parent != folder
        ):
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
            make_private_dirs(self.root)
        except OSError as e:
            raise StoreError(f'cannot create store root {self.root}: {e}') from e

    def _ensure_folder(self, scope: str) -> Path:
        self._ensure_root()
        folder = self._folder(scope)
        if folder != self.root:
            try:
                folder.mkdir(mode=PRIVATE_DIR_MODE)
                os.chmod(folder, PRIVATE_DIR_MODE)
            except FileExistsError:
                pass  # made before (or a file, or a symlink to one: refused just below)
            except OSError as e:
                raise _WriteFailed(f'cannot create {folder}: {e}') from e
            mode = os.lstat(folder).st_mode
            if not stat.S_ISDIR(mode):
                raise StoreError(f'refusing {folder}: not a directory (a symlink or a file)')
        return folder

    # ---- writing ------------------------------------------------------------------------------------------

    def _put_sync(self, info: StoredArtifact, data: bytes, scope: str) -> StoredArtifact:
        folder = self._ensure_folder(scope)
        data_path = self._path(info.artifact_id, '.bin', scope)
        info_path = self._path(info.artifact_id, '.json', scope)
        if data_path.exists():
            existing = self._info_sync(info.artifact_id, scope)
            if existing is not None:
                self._touch(data_path)
                return existing
        if self.max_scope_bytes is not None:
            held = self._folder_bytes(folder)
            if held + len(data) > self.max_scope_bytes:
                raise StoreQuotaExceeded(
                    f'artifact {info.artifact_id} ({len(data):,} bytes) would take its scope past its budget '
                    f'({held:,} of {self.max_scope_bytes:,} bytes held); not stored'
                )
        # Data first, sidecar last: an artifact with a sidecar is always complete.
        sidecar = info.to_json()
        need = len(data) + len(sidecar)
        self._reserve(info.artifact_id, need)
        written = False
        try:
            self._write_atomic(folder, data_path, data)
            self._write_atomic(folder, info_path, sidecar)
            self._touch(data_path)
            written = True
        finally:
            self._release(need, written=written)
        bounded = self.max_age is not None or self.max_bytes is not None
        if bounded and self._clock() >= self._next_prune:  # a prune of what expired (and leftovers) is due
            self._prune_after_write()
        return info

    def _folder_bytes(self, folder: Path) -> int:
        with os.scandir(folder) as entries:
            return sum(
                e.stat(follow_symlinks=False).st_size
                for e in entries
                if e.name.endswith('.bin') and e.is_file(follow_symlinks=False)
            )

    def _write_atomic(self, folder: Path, path: Path, data: bytes) -> None:
        try:
            # Temporary names start with a dot and contain dots, so they can never collide with an id.
            fd, tmp = _temporary_file(folder)
        except OSError as e:
            raise _WriteFailed(f'cannot write to store folder {folder}: {e}') from e
        try:
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            # os.replace swaps the directory entry; it never writes through a symlink or hard link at `path`.
            os.replace(tmp, path)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            raise _WriteFailed(f'cannot write {path}: {e}') from e
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ---- reading ------------------------------------------------------------------------------------------

    def _open(self, path: Path) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY | O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            # ELOOP when a symlink appeared after the check in `_path`.
            raise StoreError(f'cannot read {path}: {e}') from e
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            # A hard link planted in the root would name a file that lives (also) somewhere else.
            raise StoreError(f'refusing {path}: not a regular file with exactly one link')
        return fd

    def _read_file(self, path: Path, offset: int = 0, limit: int | None = None) -> bytes | None:
        fd = self._open(path)
        if fd is None:
            return None
        try:
            with os.fdopen(fd, 'rb') as f:
                f.seek(offset)
                return f.read() if limit is None else f.read(limit)
        except OSError as e:
            raise StoreError(f'cannot read {path}: {e}') from e

    def _read_sync(self, artifact_id: str, offset: int, limit: int | None, scope: str) -> bytes | None:
        path = self._path(artifact_id, '.bin', scope)
        data = self._read_file(path, offset, limit)
        if data is not None:
            self._touch(path)
        return data

    def _info_sync(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        raw = self._read_file(self._path(artifact_id, '.json', scope))
        return None if raw is None else StoredArtifact.from_json(raw, artifact_id)

    def _list_sync(self, scope: str, limit: int) -> list[StoredArtifact]:
        """The sidecars of `scope`'s folder, newest (by modification time) first, at most `limit` read."""
        folder = self._folder(scope)
        if not folder.is_dir() or folder.is_symlink():
            return []
        with os.scandir(folder) as entries:
            sidecars = [
                (e.stat(follow_symlinks=False).st_mtime, e.name.removesuffix('.json'))
                for e in entries
                if e.name.endswith('.json')
                and not e.name.startswith('.')
                and e.is_file(follow_symlinks=False)
            ]
        found: list[StoredArtifact] = []
        for _, artifact_id in sorted(sidecars, reverse=True)[:limit]:
            try:
                info = self._info_sync(validate_artifact_id(artifact_id), scope)
            except StoreError:  # a corrupt sidecar or a planted link: not listed
                continue
            if info is not None:
                found.append(info)
        return found


_LEFTOVER_AGE = 3600.0
"""Seconds after which a temporary file, a half-written artifact or an empty scope folder is removed."""


def _leftover(name: str, suffix: str, files: Mapping[str, object]) -> bool:
    """A temporary file of ours, or data or sidecar without the other; nothing else in a root is touched."""
    stem = name.rpartition('.')[0]
    if suffix == 'tmp':
        return name.startswith('.')
    if ARTIFACT_ID_PATTERN.fullmatch(stem) is None:
        return False
    if suffix == 'bin':
        return f'{stem}.json' not in files
    return suffix == 'json' and f'{stem}.bin' not in files


def _temporary_file(folder: Path) -> tuple[int, str]:
    """A new temporary file in `folder`; the folder is made again if a prune removed it a moment ago."""
    try:
        return tempfile.mkstemp(dir=folder, prefix='.', suffix='.tmp')
    except FileNotFoundError:
        folder.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
        os.chmod(folder, PRIVATE_DIR_MODE)
        return tempfile.mkstemp(dir=folder, prefix='.', suffix='.tmp')


class _WriteFailed(StoreError):
    """A write the disk refused (full, read-only, I/O error): opens the breaker."""
