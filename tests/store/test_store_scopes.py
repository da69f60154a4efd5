"""Scopes, keyed ids, budgets, links and failing disks, on every backend that has them."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai_history.store import (
    ArtifactStore,
    DirectoryStore,
    MemoryStore,
    RedisStore,
    StoreError,
    StoreQuotaExceeded,
    artifact_id,
    keyed_artifact_id,
)
from pydantic_ai_history.store import _directory as directory_module

pytestmark = pytest.mark.anyio

SECRET = b'0123456789abcdef0123456789abcdef'


@pytest.fixture(params=['memory', 'directory', pytest.param('redis', marks=pytest.mark.redis)])
async def store(request: Any, tmp_path: Path) -> AsyncIterator[ArtifactStore]:
    s: ArtifactStore
    if request.param == 'memory':
        s = MemoryStore()
    elif request.param == 'directory':
        s = DirectoryStore(tmp_path / 'spill')
    else:
        s = RedisStore(request.getfixturevalue('redis_server').url)
    await s.prepare()
    yield s
    await s.aclose()


# ---- ids ----


def test_keyed_ids_depend_on_secret_scope_and_content() -> None:
    data = b'Card PIN reset code: 739'
    one = keyed_artifact_id(SECRET, data, 'tenant:a')
    assert one == keyed_artifact_id(SECRET, data, 'tenant:a')  # stable: equal content is stored once
    assert one.startswith('art_')
    # 128 bits of the HMAC: half the tokens of the full digest the content hash shows
    assert re.fullmatch(r'art_[0-9a-f]{32}', one)
    assert re.fullmatch(r'art_[0-9a-f]{64}', artifact_id(data))
    others = {
        keyed_artifact_id(SECRET, data, 'tenant:b'),
        keyed_artifact_id(SECRET[::-1], data, 'tenant:a'),
        keyed_artifact_id(SECRET, data + b' ', 'tenant:a'),
        artifact_id(data),
    }
    assert one not in others
    assert len(others) == 4
    # scope and content cannot run together
    assert keyed_artifact_id(SECRET, b'bc', 'a') != keyed_artifact_id(SECRET, b'c', 'ab')


def test_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match='16 bytes'):
        MemoryStore(secret=b'short')


def test_memory_stores_without_a_secret_use_the_process_secret() -> None:
    from pydantic_ai_history.messages._marks import process_secret
    from pydantic_ai_history.store import keyed_artifact_id

    data = b'the same content'
    assert MemoryStore().artifact_id(data) == keyed_artifact_id(process_secret(), data)
    assert MemoryStore(secret=SECRET).artifact_id(data) == MemoryStore(secret=SECRET).artifact_id(data)
    assert MemoryStore(secret=SECRET).artifact_id(data) != MemoryStore().artifact_id(data)


# ---- scopes ----


async def test_another_scope_reads_like_a_missing_id(store: ArtifactStore) -> None:
    data = b'alice: Card PIN reset code: 739'
    aid = store.artifact_id(data, scope='alice')
    await store.put(aid, data, media_type='text/plain', source='notes', scope='alice')
    assert await store.get(aid, scope='alice') == data
    never = store.artifact_id(b'never stored', scope='mallory')
    for probe in (aid, never):
        assert await store.get(probe, scope='mallory') is None
        assert await store.info(probe, scope='mallory') is None
        assert await store.read(probe, offset=0, limit=10, scope='mallory') is None
        assert await store.get(probe) is None  # the default scope is a scope like any other


async def test_the_same_content_in_two_scopes_is_two_artifacts(store: ArtifactStore) -> None:
    data = b'shared public document'
    a = store.artifact_id(data, scope='a')
    b = store.artifact_id(data, scope='b')
    assert a != b
    await store.put(a, data, media_type='text/plain', source='x', scope='a')
    await store.put(b, data, media_type='text/plain', source='y', scope='b')
    info_b = await store.info(b, scope='b')
    assert info_b is not None
    assert info_b.source == 'y'


# ---- budgets ----


async def test_memory_one_scope_never_evicts_another() -> None:
    now = [1_000_000.0]
    store = MemoryStore(max_bytes=100, max_scope_bytes=60, max_age=3_600, clock=lambda: now[0])
    await store.put('art_alice', b'a' * 40, media_type='text/plain', source='t', scope='alice')
    await store.put('art_m0', b'm' * 30, media_type='text/plain', source='t', scope='mallory')
    await store.put('art_m1', b'm' * 30, media_type='text/plain', source='t', scope='mallory')
    # Mallory at her budget: refused, nothing of hers (still in use) nor of anyone else evicted
    with pytest.raises(StoreQuotaExceeded, match='its scope holds 60 of 60 bytes'):
        await store.put('art_m2', b'm' * 30, media_type='text/plain', source='t', scope='mallory')
    now[0] += 7_200  # everything is past its retention now
    assert await store.get('art_alice', scope='alice') == b'a' * 40  # Alice reads hers: in use again
    for i in range(2, 10):  # Mallory churns through her own budget, evicting her own oldest
        await store.put(f'art_m{i}', b'm' * 30, media_type='text/plain', source='t', scope='mallory')
        now[0] += 7_200
    assert await store.get('art_alice', scope='alice') == b'a' * 40
    assert store.scope_bytes('mallory') == 60
    # the store is full (40 + 60): a third tenant is stored in place of the least recently used artifact
    # past its retention (Mallory's oldest: Alice just read hers)
    await store.put('art_bob', b'b' * 10, media_type='text/plain', source='t', scope='bob')
    assert await store.get('art_bob', scope='bob') == b'b' * 10
    assert await store.get('art_alice', scope='alice') == b'a' * 40
    assert await store.get('art_m8', scope='mallory') is None
    assert await store.get('art_m9', scope='mallory') == b'm' * 30
    assert store.size_bytes == 80


async def test_memory_evicts_the_least_recently_used_past_retention_across_scopes() -> None:
    now = [1_000_000.0]
    store = MemoryStore(max_bytes=100, max_scope_bytes=80, max_age=3_600, clock=lambda: now[0])
    await store.put('art_old', b'o' * 40, media_type='text/plain', source='t', scope='first')
    await store.put('art_read', b'r' * 40, media_type='text/plain', source='t', scope='second')
    assert await store.get('art_old', scope='first') == b'o' * 40  # read: now the most recently used
    with pytest.raises(StoreQuotaExceeded, match='the store holds 80 of 100 bytes'):
        await store.put('art_new', b'n' * 50, media_type='text/plain', source='t', scope='third')
    now[0] += 3_601
    await store.put('art_new', b'n' * 50, media_type='text/plain', source='t', scope='third')
    assert await store.get('art_read', scope='second') is None
    assert await store.get('art_old', scope='first') == b'o' * 40
    assert await store.get('art_new', scope='third') == b'n' * 50
    assert store.evicted == 1
    assert (store.scope_bytes('second'), store.size_bytes) == (0, 90)


async def test_memory_single_artifact_over_budget_is_refused_without_evicting() -> None:
    store = MemoryStore(max_bytes=512 * 1024, max_scope_bytes=128 * 1024)
    await store.put('art_small', b's' * 10, media_type='text/plain', source='t')
    with pytest.raises(StoreQuotaExceeded, match='more than one artifact may take'):
        await store.put('art_huge', b'h' * (500 * 1024), media_type='text/plain', source='t')
    assert await store.get('art_small') == b's' * 10
    assert store.size_bytes == 10


@pytest.mark.parametrize('backend', ['directory', pytest.param('redis', marks=pytest.mark.redis)])
async def test_durable_scope_budget_refuses_and_never_deletes(
    backend: str, tmp_path: Path, request: Any
) -> None:
    store: ArtifactStore
    if backend == 'directory':
        store = DirectoryStore(tmp_path / 'spill', max_scope_bytes=100, max_artifact_bytes=80)
    else:
        store = RedisStore(
            request.getfixturevalue('redis_server').url, max_scope_bytes=100, max_artifact_bytes=80
        )
    try:
        await store.put('art_1', b'1' * 60, media_type='text/plain', source='t', scope='mallory')
        with pytest.raises(StoreQuotaExceeded, match='budget'):
            await store.put('art_2', b'2' * 60, media_type='text/plain', source='t', scope='mallory')
        with pytest.raises(StoreQuotaExceeded, match='more than one artifact may take'):
            await store.put('art_3', b'3' * 81, media_type='text/plain', source='t', scope='alice')
        await store.put('art_2', b'2' * 60, media_type='text/plain', source='t', scope='alice')
        assert await store.get('art_1', scope='mallory') == b'1' * 60
        assert await store.get('art_2', scope='mallory') is None
        assert await store.get('art_2', scope='alice') == b'2' * 60
        # an idempotent put of what is stored is no new use of the budget
        await store.put('art_1', b'1' * 60, media_type='text/plain', source='t', scope='mallory')
    finally:
        await store.aclose()


# ---- directory: links, secret, full disk ----


async def test_hard_link_in_the_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / 'outside'
    outside.mkdir()
    secret = outside / 'secret.txt'
    secret.write_bytes(b'private key material')
    root = tmp_path / 'spill'
    root.mkdir()
    os.link(secret, root / 'art_read.bin')
    (root / 'art_read.json').write_text(
        '{"media_type": "text/plain", "size_bytes": 20, "source": "x", "created_at": 1}'
    )
    store = DirectoryStore(root)
    with pytest.raises(StoreError, match='exactly one link'):
        await store.get('art_read')
    with pytest.raises(StoreError, match='exactly one link'):
        await store.read('art_read', offset=0, limit=5)
    # a hard link in a scope folder too
    scope_folder = root / directory_module.scope_tag('alice')
    scope_folder.mkdir()
    os.link(secret, scope_folder / 'art_read.bin')
    with pytest.raises(StoreError, match='exactly one link'):
        await store.get('art_read', scope='alice')
    # writing over the planted link replaces the directory entry; the outside file is untouched
    await store.put('art_read', b'mine', media_type='text/plain', source='t', scope='alice')
    assert secret.read_bytes() == b'private key material'


async def test_scope_folder_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / 'outside'
    outside.mkdir()
    (outside / 'art_x.bin').write_bytes(b'outside')
    root = tmp_path / 'spill'
    root.mkdir()
    (root / directory_module.scope_tag('alice')).symlink_to(outside, target_is_directory=True)
    store = DirectoryStore(root)
    with pytest.raises(StoreError, match='symlink'):
        await store.get('art_x', scope='alice')
    with pytest.raises(StoreError):
        await store.put('art_y', b'y', media_type='text/plain', source='t', scope='alice')
    assert sorted(p.name for p in outside.iterdir()) == ['art_x.bin']


async def test_generated_secret_is_kept_beside_the_store(tmp_path: Path) -> None:
    root = tmp_path / 'spill'
    first = DirectoryStore(root)
    await first.prepare()
    data = b'a document'
    aid = first.artifact_id(data, scope='alice')
    await first.put(aid, data, media_type='text/plain', source='t', scope='alice')
    path = root / directory_module.SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # a restart (a new instance) makes the same ids and reads what was stored
    again = DirectoryStore(root)
    await again.prepare()
    assert again.artifact_id(data, scope='alice') == aid
    assert await again.get(aid, scope='alice') == data
    # a configured secret wins, and reading never needs the secret
    configured = DirectoryStore(root, secret=SECRET)
    assert configured.artifact_id(data, scope='alice') != aid
    assert await configured.get(aid, scope='alice') == data


async def test_unusable_root_is_an_error_never_a_process_secret(tmp_path: Path) -> None:
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    store = DirectoryStore(blocker / 'spill')
    for _ in range(2):  # each call tries again
        with pytest.raises(StoreError, match=r'cannot read or create the secret \.artifact-id-secret'):
            await store.prepare()
    assert not store.secret_ready
    with pytest.raises(StoreError):
        store.artifact_id(b'x')
    blocker.unlink()  # the root can be created now: the next call loads a secret
    await store.prepare()
    assert store.artifact_id(b'x').startswith('art_')


async def test_full_disk_is_a_clean_failure_and_opens_the_breaker(tmp_path: Path, monkeypatch: Any) -> None:
    now = [0.0]
    root = tmp_path / 'spill'
    store = DirectoryStore(root, cooldown=30, monotonic=lambda: now[0])
    await store.put('art_before', b'kept', media_type='text/plain', source='t')

    def no_space(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(directory_module, '_write_all', no_space)
    with pytest.raises(StoreError, match='No space left'):
        await store.put('art_1', b'x' * 100, media_type='text/plain', source='t', scope='alice')
    assert store.breaker.is_open
    attempts = store.breaker.attempts
    for i in range(5):  # refused at once: the disk is not tried again during the cool-down
        with pytest.raises(StoreError, match='circuit open'):
            await store.put(f'art_{i + 2}', b'x', media_type='text/plain', source='t')
    assert store.breaker.attempts == attempts
    assert store.breaker.refused == 5
    # nothing half-written is left behind, and what was stored still reads (reads are not gated)
    assert sorted(p.name for p in root.rglob('*') if p.is_file()) == ['art_before.bin', 'art_before.json']
    assert await store.get('art_before') == b'kept'
    # after the cool-down, one write is tried; the disk has room again
    monkeypatch.undo()
    now[0] += 31
    await store.put('art_after', b'ok', media_type='text/plain', source='t')
    assert not store.breaker.is_open
    assert await store.get('art_after') == b'ok'
