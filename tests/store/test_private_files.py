"""What the package writes to disk is its owner's only: store roots and scope folders 0700, files 0600, the
SQLite cache (with its -wal and -shm companions) 0600, whatever the process's umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pydantic_ai_history.cache import SQLiteCache
from pydantic_ai_history.store import DirectoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(os.name != 'posix', reason='POSIX permissions')]


@pytest.fixture(params=[0o000, 0o022, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def test_sqlite_cache_files_are_private(tmp_path: Path, umask: int) -> None:
    path = tmp_path / 'new' / 'folders' / 'cache.sqlite'
    cache = SQLiteCache(path)
    assert await cache.set('k', 'a summary of what the user said')
    assert await cache.get('k') == 'a summary of what the user said'
    assert not cache.degraded
    files = [path, *(path.with_name(path.name + suffix) for suffix in ('-wal', '-shm'))]
    assert all(f.exists() for f in files), 'WAL mode writes its companions'
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    assert mode(tmp_path / 'new') == mode(tmp_path / 'new' / 'folders') == 0o700
    await cache.aclose()


async def test_sqlite_cache_leaves_an_existing_file_as_it_is(tmp_path: Path, umask: int) -> None:
    path = tmp_path / 'cache.sqlite'
    path.touch()
    path.chmod(0o640)  # the operator's choice, e.g. a group that backs it up
    cache = SQLiteCache(path)
    assert await cache.set('k', 'v')
    assert mode(path) == 0o640
    await cache.aclose()


async def test_directory_store_root_folders_and_files_are_private(tmp_path: Path, umask: int) -> None:
    root = tmp_path / 'spill' / 'root'
    store = DirectoryStore(root)
    await store.prepare()
    for scope in ('', 'tenant:alice'):
        artifact = store.artifact_id(b'what a tool returned', scope=scope)
        await store.put(artifact, b'what a tool returned', media_type='text/plain', source='t', scope=scope)
    assert mode(root) == mode(root.parent) == 0o700
    entries = list(root.rglob('*'))
    folders = [p for p in entries if p.is_dir()]
    files = [p for p in entries if p.is_file()]
    assert len(folders) == 1  # the tenant's scope folder
    assert len(files) >= 5  # the secret, and a .bin and a .json per artifact
    assert {str(p): mode(p) for p in folders} == {str(p): 0o700 for p in folders}
    assert {str(p): mode(p) for p in files} == {str(p): 0o600 for p in files}
