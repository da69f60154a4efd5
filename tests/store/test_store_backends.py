"""The `ArtifactStore` contract, run against every backend."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from pydantic_ai_history.store import (
    ArtifactStore,
    DirectoryStore,
    InvalidArtifactId,
    MemoryStore,
    RedisStore,
    StoredArtifact,
    StoreError,
    artifact_id,
    scope_tag,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=['memory', 'directory', pytest.param('redis', marks=pytest.mark.redis)])
async def store(request, tmp_path) -> AsyncIterator[ArtifactStore]:
    if request.param == 'memory':
        s: ArtifactStore = MemoryStore()
    elif request.param == 'directory':
        s = DirectoryStore(tmp_path / 'spill')
    else:
        s = RedisStore(request.getfixturevalue('redis_server').url)
    yield s
    await s.aclose()


async def test_round_trip_random_5mb(store):
    data = os.urandom(5 * 1024 * 1024)
    aid = artifact_id(data)
    info = await store.put(aid, data, media_type='application/octet-stream', source='tool:download')
    assert info.artifact_id == aid
    assert info.size_bytes == len(data)
    assert await store.get(aid) == data
    assert await store.info(aid) == info
    assert await store.read(aid, offset=len(data) - 10) == data[-10:]


async def test_info_fields_and_metadata(store):
    data = 'résumé 字 ✓\n'.encode()
    aid = artifact_id(data)
    info = await store.put(
        aid, data, media_type='text/plain', source='read_file', metadata={'path': 'a/b.txt', 'tokens': '12'}
    )
    assert isinstance(info, StoredArtifact)
    assert (info.media_type, info.source) == ('text/plain', 'read_file')
    assert info.metadata == {'path': 'a/b.txt', 'tokens': '12'}
    assert info.created_at > 0
    assert await store.info(aid) == info


async def test_byte_ranges(store):
    data = bytes(range(256)) * 4
    aid = artifact_id(data)
    await store.put(aid, data, media_type='application/octet-stream', source='t')
    assert await store.read(aid) == data
    assert await store.read(aid, offset=10, limit=5) == data[10:15]
    assert await store.read(aid, offset=1000) == data[1000:]
    assert await store.read(aid, offset=1000, limit=100) == data[1000:]
    assert await store.read(aid, offset=5000, limit=10) == b''
    assert await store.read(aid, offset=3, limit=0) == b''
    with pytest.raises(ValueError, match='must not be negative'):
        await store.read(aid, offset=-1)
    with pytest.raises(ValueError, match='must not be negative'):
        await store.read(aid, limit=-1)


async def test_empty_artifact(store):
    aid = artifact_id(b'')
    info = await store.put(aid, b'', media_type='text/plain', source='t')
    assert info.size_bytes == 0
    assert await store.get(aid) == b''
    assert await store.read(aid, offset=0, limit=10) == b''


async def test_missing(store):
    assert await store.get('art_missing') is None
    assert await store.info('art_missing') is None
    assert await store.read('art_missing', offset=0, limit=1) is None
    assert await store.read('art_missing', limit=0) is None


async def test_put_is_idempotent(store):
    data = b'same content'
    aid = artifact_id(data)
    first = await store.put(aid, data, media_type='text/plain', source='first')
    second = await store.put(aid, data, media_type='text/markdown', source='second')
    assert second == first  # the stored copy is kept
    assert await store.get(aid) == data
    assert await store.info(aid) == first


@pytest.mark.parametrize(
    'bad_id',
    [
        *('../etc/passwd', '/etc/passwd', 'a/b', 'a\\b', '..', '.', '%2e%2e', 'a\x00b'),
        *('', 'x' * 129, 'a.b', 'art_ü', 'a\n', 'a b'),
    ],
)
async def test_invalid_ids_rejected(store, bad_id):
    with pytest.raises(InvalidArtifactId):
        await store.put(bad_id, b'x', media_type='text/plain', source='t')
    with pytest.raises(InvalidArtifactId):
        await store.get(bad_id)
    with pytest.raises(InvalidArtifactId):
        await store.info(bad_id)
    with pytest.raises(InvalidArtifactId):
        await store.read(bad_id)


def test_invalid_id_error_types():
    assert issubclass(InvalidArtifactId, ValueError)
    assert issubclass(InvalidArtifactId, StoreError)


def test_artifact_id():
    aid = artifact_id(b'abc')
    assert aid == 'art_ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    assert artifact_id(b'abc', prefix='') == aid[4:]


async def test_longest_valid_id(store):
    aid = 'A-_9' * 32
    await store.put(aid, b'x', media_type='text/plain', source='t')
    assert await store.get(aid) == b'x'


async def test_a_scope_lists_what_it_holds_newest_first_and_nothing_of_other_scopes(store):
    """What a search over a conversation reads: its own artifacts, info only, bounded by `limit`."""
    await store.prepare()  # a persistent store's ids are keyed by its secret
    clock = [1_000.0]
    for backend in (store, getattr(store, '_store', None)):
        if backend is not None and hasattr(backend, '_clock'):
            backend._clock = lambda: clock[0]
    ids = []
    for number in range(3):
        data = f'artifact {number}'.encode()
        aid = store.artifact_id(data, scope='conversation:a')
        await store.put(aid, data, media_type='text/plain', source=f'tool {number}', scope='conversation:a')
        ids.append(aid)
        clock[0] += 10
        if isinstance(store, DirectoryStore):  # the listing orders by the sidecars' modification time
            os.utime(store.root / scope_tag('conversation:a') / f'{aid}.json', (clock[0], clock[0]))
    other = b'another conversation'
    await store.put(
        store.artifact_id(other, scope='conversation:b'),
        other,
        media_type='text/plain',
        source='x',
        scope='conversation:b',
    )
    await store.put(artifact_id(b'default'), b'default', media_type='text/plain', source='d')

    listed = await store.list_artifacts(scope='conversation:a')
    assert [i.artifact_id for i in listed] == ids[::-1]
    assert [i.source for i in listed] == ['tool 2', 'tool 1', 'tool 0']
    assert [i.artifact_id for i in await store.list_artifacts(scope='conversation:a', limit=2)] == ids[:0:-1]
    assert [i.source for i in await store.list_artifacts(scope='conversation:b')] == ['x']
    assert [i.source for i in await store.list_artifacts()] == ['d'], 'the default scope holds only its own'
    assert await store.list_artifacts(scope='conversation:none') == []


async def test_a_store_that_cannot_list_says_so():
    class Legacy(ArtifactStore):
        async def _put(self, *args):
            raise NotImplementedError

        async def _get(self, artifact_id, scope):
            return None

        async def _info(self, artifact_id, scope):
            return None

    with pytest.raises(StoreError, match='cannot list'):
        await Legacy().list_artifacts()
