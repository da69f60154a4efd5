"""A single-file SQLite cache that survives restarts."""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from ..store._private_files import create_private_file, make_private_dirs
from ._base import SummaryCache, logger
from ._fallback import FallbackCache

_T = TypeVar('_T')

_SCHEMA = 'CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL)'
# Expired rows are skipped on read and deleted when read; a full sweep every this many writes
# keeps keys that are never read again from piling up.
_PURGE_EVERY = 256


class SQLiteCache(FallbackCache):
    """A cache in one SQLite file, in WAL mode, shared by every processor that points at the same path.

    Instances coordinate through SQLite's own locking; calls run in a thread because a write may wait up to
    `busy_timeout` (100 ms) on another writer. Expiry uses wall-clock time, since entries outlive the process.
    Files this cache creates are 0600 (new folders 0700) whatever the umask.

    It never fails a run: when the file is locked or unwritable, calls go to an in-memory `fallback` for
    `cooldown` seconds (one warning per outage); a corrupt file is left untouched, logged once, and the cache
    stays in memory for the life of the instance. `degraded` and `corrupt` say which.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 0.1,
        cooldown: float = 30.0,
        fallback: SummaryCache | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(_SQLiteFile(self), fallback, cooldown=cooldown, clock=monotonic)
        self.breaker.name = f'SQLite cache {path}'
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._wall_clock = clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._writes = 0
        self.corrupt = False
        """The file is not a usable SQLite database; this instance caches in memory only."""

    @property
    def degraded(self) -> bool:
        """Whether calls currently go to the in-memory fallback."""
        return self.corrupt or super().degraded

    async def _try_primary(
        self, call: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any
    ) -> tuple[bool, _T | None]:
        return (False, None) if self.corrupt else await super()._try_primary(call, *args, **kwargs)

    async def purge_expired(self) -> int:
        """Delete every expired row now; returns how many were removed."""
        return await self._run(self._purge_sync)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close_sync)
        await super().aclose()

    async def _run(self, func: Callable[..., _T], *args: object) -> _T:
        try:
            return await anyio.to_thread.run_sync(self._locked, func, *args)
        except sqlite3.Error as e:
            if _is_corrupt(e):
                self.corrupt = True
                self.breaker.open_until = math.inf  # no outage warning: this is reported as an error
                logger.error(
                    'SQLite cache %s is not a usable database (%s: %s); it is left untouched and this cache '
                    'keeps entries in memory from now on. Move or delete the file to cache on disk again.',
                    self.path,
                    type(e).__name__,
                    e,
                )
            raise

    def _locked(self, func: Callable[..., _T], *args: object) -> _T:
        with self._lock:
            return func(self._connect(), *args)

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            # summaries are what users and tools said: the file (and SQLite's -wal and -shm beside it, which
            # take its mode) is created 0600, its missing folders 0700
            make_private_dirs(self.path.parent)
            create_private_file(self.path)
            # Autocommit mode: each statement is its own transaction, so no write lock is held between calls.
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute(f'PRAGMA busy_timeout = {max(int(self.busy_timeout * 1000), 0)}')
            try:
                self._initialise(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _initialise(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL takes an exclusive lock that SQLite's busy handler does not wait for:
        # two instances opening the same new file at once get 'database is locked' at once. Retry until
        # `busy_timeout`, as every other statement waits.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute('PRAGMA journal_mode=WAL')
                conn.execute('PRAGMA synchronous=NORMAL')
                conn.execute(_SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if 'locked' not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _get_sync(self, conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute('SELECT value, expires_at FROM cache WHERE key = ?', (key,)).fetchone()
        if row is None:
            return None
        value, expires_at = row
        if expires_at is not None and self._wall_clock() >= expires_at:
            conn.execute('DELETE FROM cache WHERE key = ? AND expires_at <= ?', (key, self._wall_clock()))
            return None
        return str(value)

    def _set_sync(self, conn: sqlite3.Connection, key: str, value: str, ttl: float | None) -> None:
        expires_at = None if ttl is None else self._wall_clock() + ttl
        conn.execute(
            'INSERT OR REPLACE INTO cache (key, value, expires_at) VALUES (?, ?, ?)',
            (key, value, expires_at),
        )
        self._writes += 1
        if self._writes % _PURGE_EVERY == 0:
            self._purge_sync(conn)

    def _delete_sync(self, conn: sqlite3.Connection, key: str) -> None:
        conn.execute('DELETE FROM cache WHERE key = ?', (key,))

    def _purge_sync(self, conn: sqlite3.Connection) -> int:
        return conn.execute('DELETE FROM cache WHERE expires_at <= ?', (self._wall_clock(),)).rowcount

    def _close_sync(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _is_corrupt(error: Exception) -> bool:
    """Whether `error` says the file itself is unusable (as opposed to busy, locked or unwritable)."""
    if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
        return True  # 'file is not a database', 'database disk image is malformed'
    return 'malformed' in str(error) or 'not a database' in str(error)


class _SQLiteFile(SummaryCache):
    """The file itself, as the primary of its `SQLiteCache`; errors raise."""

    def __init__(self, owner: SQLiteCache) -> None:
        super().__init__()
        self.owner = owner

    async def _get(self, key: str) -> str | None:
        return await self.owner._run(self.owner._get_sync, key)

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        await self.owner._run(self.owner._set_sync, key, value, ttl)

    async def _delete(self, key: str) -> None:
        await self.owner._run(self.owner._delete_sync, key)
