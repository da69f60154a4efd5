from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pydantic_ai_history.store import DirectoryStore, InvalidArtifactId, StoreError, artifact_id

pytestmark = pytest.mark.anyio

IS_ROOT = hasattr(os, 'geteuid') and os.geteuid() == 0


def listing(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob('*')}


async def test_layout_and_sidecar(tmp_path):
    root = tmp_path / 'spill'
    store = DirectoryStore(root)
    data = b'hello'
    aid = artifact_id(data)
    info = await store.put(aid, data, media_type='text/plain', source='tool', metadata={'k': 'v'})
    assert sorted(p.name for p in root.iterdir()) == [f'{aid}.bin', f'{aid}.json']  # no temporary files left
    assert (root / f'{aid}.bin').read_bytes() == data
    sidecar = json.loads((root / f'{aid}.json').read_text())
    assert sidecar == {
        'artifact_id': aid,
        'media_type': 'text/plain',
        'size_bytes': 5,
        'source': 'tool',
        'created_at': info.created_at,
        'metadata': {'k': 'v'},
    }


async def test_survives_a_new_instance(tmp_path):
    data = os.urandom(1000)
    aid = artifact_id(data)
    info = await DirectoryStore(tmp_path / 'spill').put(aid, data, media_type='image/png', source='t')
    again = DirectoryStore(tmp_path / 'spill')
    assert await again.get(aid) == data
    assert await again.info(aid) == info


async def test_creates_root_or_refuses_when_asked(tmp_path):
    store = DirectoryStore(tmp_path / 'a' / 'b' / 'spill')
    await store.put('art_x', b'x', media_type='text/plain', source='t')
    assert (tmp_path / 'a' / 'b' / 'spill' / 'art_x.bin').exists()

    strict = DirectoryStore(tmp_path / 'missing', create=False)
    with pytest.raises(StoreError, match='does not exist'):
        await strict.put('art_x', b'x', media_type='text/plain', source='t')
    assert await strict.get('art_x') is None  # reading a missing root is just "not found"
    assert not (tmp_path / 'missing').exists()


async def test_root_is_a_file(tmp_path):
    root = tmp_path / 'file'
    root.write_bytes(b'not a directory')
    with pytest.raises(StoreError, match='not a directory'):
        await DirectoryStore(root).put('art_x', b'x', media_type='text/plain', source='t')
    # A root below a regular file cannot be created, even by root.
    with pytest.raises(StoreError, match='cannot create store root'):
        await DirectoryStore(root / 'spill').put('art_x', b'x', media_type='text/plain', source='t')
    assert root.read_bytes() == b'not a directory'


@pytest.mark.skipif(IS_ROOT, reason='running as root: chmod 0o500 does not stop root from writing')
async def test_read_only_root(tmp_path):
    root = tmp_path / 'spill'
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(StoreError, match='cannot write'):
            await DirectoryStore(root).put('art_x', b'x', media_type='text/plain', source='t')
        assert list(root.iterdir()) == []
    finally:
        root.chmod(0o700)


async def test_write_failure_leaves_no_temporary_file(tmp_path, monkeypatch):
    # Works as root too: make the rename into place fail.
    root = tmp_path / 'spill'
    store = DirectoryStore(root)

    def failing_replace(src, dst):
        raise PermissionError(13, 'Permission denied', str(dst))

    monkeypatch.setattr(os, 'replace', failing_replace)
    with pytest.raises(StoreError, match='cannot write'):
        await store.put('art_x', b'x', media_type='text/plain', source='t')
    monkeypatch.undo()
    assert list(root.iterdir()) == []
    assert await store.get('art_x') is None


@pytest.mark.parametrize(
    'bad_id',
    ['../etc/passwd', '/etc/passwd', 'a/b', '..', '%2e%2e', 'a\x00b', '../outside', 'x' * 129, 'x' * 5000],
)
async def test_traversal_attempts_write_nothing_outside(tmp_path, bad_id):
    root = tmp_path / 'spill'
    root.mkdir()
    (tmp_path / 'outside').mkdir()
    before = listing(tmp_path)
    store = DirectoryStore(root)
    with pytest.raises(InvalidArtifactId):
        await store.put(bad_id, b'pwned', media_type='text/plain', source='t')
    with pytest.raises(InvalidArtifactId):
        await store.get(bad_id)
    assert listing(tmp_path) == before


async def test_symlink_inside_root_pointing_outside_is_refused(tmp_path):
    root = tmp_path / 'spill'
    root.mkdir()
    outside = tmp_path / 'outside'
    outside.mkdir()
    secret = outside / 'secret.txt'
    secret.write_bytes(b'secret')
    # Links planted under the names the store would use, one to an existing file, one dangling.
    (root / 'art_read.bin').symlink_to(secret)
    (root / 'art_read.json').symlink_to(outside / 'info.json')
    (root / 'art_write.bin').symlink_to(outside / 'written.bin')
    before_outside = listing(outside)
    before_root = listing(root)

    store = DirectoryStore(root)
    with pytest.raises(StoreError, match='symlink'):
        await store.get('art_read')
    with pytest.raises(StoreError, match='symlink'):
        await store.read('art_read', offset=0, limit=3)
    with pytest.raises(StoreError, match='symlink'):
        await store.info('art_read')
    with pytest.raises(StoreError, match='symlink'):
        await store.put('art_write', b'pwned', media_type='text/plain', source='t')
    assert listing(outside) == before_outside
    assert listing(root) == before_root
    assert secret.read_bytes() == b'secret'


async def test_symlink_to_a_directory_inside_root_is_refused(tmp_path):
    root = tmp_path / 'spill'
    root.mkdir()
    (root / 'art_x.bin').symlink_to(tmp_path)
    with pytest.raises(StoreError):
        await DirectoryStore(root).get('art_x')


async def test_root_given_through_a_symlink_works(tmp_path):
    real = tmp_path / 'real'
    real.mkdir()
    (tmp_path / 'link').symlink_to(real)
    store = DirectoryStore(tmp_path / 'link')
    await store.put('art_x', b'x', media_type='text/plain', source='t')
    assert (real / 'art_x.bin').read_bytes() == b'x'
    assert await store.get('art_x') == b'x'


async def test_corrupt_sidecar_is_a_store_error(tmp_path):
    store = DirectoryStore(tmp_path)
    await store.put('art_x', b'x', media_type='text/plain', source='t')
    (tmp_path / 'art_x.json').write_text('{not json')
    with pytest.raises(StoreError, match='corrupt'):
        await store.info('art_x')
    assert await store.get('art_x') == b'x'


async def test_incomplete_artifact_is_rewritten(tmp_path):
    # Bytes without a sidecar (a crash between the two renames): the next put completes it.
    store = DirectoryStore(tmp_path)
    (tmp_path / 'art_x.bin').write_bytes(b'x')
    assert await store.info('art_x') is None
    info = await store.put('art_x', b'x', media_type='text/plain', source='t')
    assert await store.info('art_x') == info
