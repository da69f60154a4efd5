from __future__ import annotations

import asyncio
import os
import time

import anyio
import pytest

from pydantic_ai_history.store import RedisStore, StoreError, StoreQuotaExceeded, artifact_id

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_shared_between_two_instances_and_keys(redis_server):
    writer = RedisStore(redis_server.url, prefix='t:')
    reader = RedisStore(redis_server.url, prefix='t:')
    try:
        data = os.urandom(1 << 20)
        aid = artifact_id(data)
        info = await writer.put(aid, data, media_type='application/pdf', source='upload', metadata={'n': '1'})
        assert await reader.get(aid) == data
        assert await reader.info(aid) == info
        assert await reader.read(aid, offset=100, limit=50) == data[100:150]
        client = writer._clients.get()
        # the bytes, the info, the default scope's byte count (for its budget), and the retention index
        assert sorted(await client.keys('t:*')) == [
            b't::bytes:default',
            b't::index',
            b't::sizes',
            b't::total',
            f't:{aid}'.encode(),
            f't:{aid}:info'.encode(),
        ]
        assert await client.get('t::bytes:default') == str(len(data)).encode()
        assert await client.get('t::total') == str(len(data)).encode()
        # kept 30 days by default
        assert 30 * 86_400 - 10 < await client.ttl(f't:{aid}') <= 30 * 86_400
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_existing_client(redis_server):
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        store = RedisStore(client=client)
        await store.put('art_x', b'\x00\xff', media_type='application/octet-stream', source='t')
        assert await store.get('art_x') == b'\x00\xff'
        await store.aclose()
        assert await client.ping()  # not closed: the caller owns it
    finally:
        await client.aclose()


async def test_ttl_expires_both_keys(redis_server):
    store = RedisStore(redis_server.url, ttl=0.2)
    try:
        await store.put('art_x', b'x', media_type='text/plain', source='t')
        deadline = time.monotonic() + 5
        while await store.info('art_x') is not None or await store.get('art_x') is not None:
            assert time.monotonic() < deadline, 'not expired within 5 s'
            await anyio.sleep(0.05)
    finally:
        await store.aclose()


async def test_unreachable_server_is_a_store_error(redis_server):
    # cooldown=0: every call tries the server (the breaker is tested in tests/reliability)
    store = RedisStore(redis_server.url, socket_timeout=1.0, cooldown=0)
    try:
        await store.put('art_x', b'x', media_type='text/plain', source='t')
        redis_server.stop()
        with pytest.raises(StoreError, match='RedisStore failed'):
            await store.put('art_y', b'y', media_type='text/plain', source='t')
        with pytest.raises(StoreError):
            await store.get('art_x')
        with pytest.raises(StoreError):
            await store.read('art_x', offset=0, limit=1)
        redis_server.start()  # empty after a restart: no persistence
        assert await store.get('art_x') is None
        await store.put('art_x', b'x', media_type='text/plain', source='t')
        assert await store.read('art_x', offset=0, limit=1) == b'x'
    finally:
        await store.aclose()


async def test_concurrent_prepares_load_the_secret_once(redis_server):
    store = RedisStore(redis_server.url, prefix='once:')
    loads = []
    load = store._load_secret

    async def counted():
        loads.append(1)
        return await load()

    store._load_secret = counted
    try:
        await asyncio.gather(*(store.prepare() for _ in range(200)))
        assert len(loads) == 1
        assert store.secret_ready
        # another process (a new instance) reads the same secret: the same ids
        again = RedisStore(redis_server.url, prefix='once:')
        await again.prepare()
        assert again.artifact_id(b'x', scope='s') == store.artifact_id(b'x', scope='s')
        await again.aclose()
    finally:
        await store.aclose()


async def test_an_unreachable_server_never_gives_a_process_secret(redis_server, caplog):
    store = RedisStore(redis_server.url, prefix='down:', socket_timeout=0.3, cooldown=0)
    redis_server.stop()
    try:
        with pytest.raises(StoreError, match='RedisStore failed'):
            await store.prepare()
        assert not store.secret_ready
        with pytest.raises(StoreError, match='prepare'):
            store.artifact_id(b'x')
        assert 'for this process only' not in caplog.text
        redis_server.start()
        await store.prepare()  # tried again, and loaded now
        assert store.artifact_id(b'x').startswith('art_')
    finally:
        await store.aclose()


def test_pool_settings_are_checked():
    from pydantic_ai_history.store import RedisPoolSettings

    with pytest.raises(ValueError, match='max_connections'):
        RedisPoolSettings(max_connections=0)
    with pytest.raises(ValueError, match='retries'):
        RedisPoolSettings(retries=-1)


async def test_a_full_prefix_refuses_rather_than_delete_what_is_within_its_ttl(redis_server):
    now = [1_000.0]
    store = RedisStore(redis_server.url, prefix='cap:', max_bytes=100, ttl=None, clock=lambda: now[0])
    try:
        for i in range(3):  # 3 x 30 bytes, across two scopes
            now[0] += 1
            await store.put(
                f'art_{i}', bytes([i]) * 30, media_type='text/plain', source='t', scope=f's{i % 2}'
            )
        with pytest.raises(StoreQuotaExceeded, match='the store holds 90 of 100 bytes'):
            await store.put('art_3', b'3' * 30, media_type='text/plain', source='t', scope='s1')
        assert await store.get('art_3', scope='s1') is None
        assert await store.info('art_3', scope='s1') is None
        assert [await store.get(f'art_{i}', scope=f's{i % 2}') for i in (0, 1, 2)] == [
            bytes([i]) * 30 for i in (0, 1, 2)
        ]
        client = store._clients.get()
        assert await client.get('cap::total') == b'90'
        assert await client.get(store._quota_key('s0')) == b'60'
        assert await client.get(store._quota_key('s1')) == b'30'
        with pytest.raises(StoreError, match='more than one artifact may take'):
            await store.put('art_big', b'x' * 101, media_type='text/plain', source='t')
        # an explicit prune deletes the oldest past a bound, and each scope's count follows
        report = await store.prune(max_bytes=70)
        assert (report.removed, report.held_bytes) == (1, 60)
        assert await store.get('art_0', scope='s0') is None
        assert await client.get(store._quota_key('s0')) == b'30'
        await store.put('art_3', b'3' * 30, media_type='text/plain', source='t', scope='s1')
        assert await store.get('art_3', scope='s1') == b'3' * 30
    finally:
        await store.aclose()


async def test_a_put_makes_room_only_from_what_its_ttl_expired(redis_server):
    now = [1_000.0]
    store = RedisStore(redis_server.url, prefix='live:', max_bytes=100, ttl=3_600, clock=lambda: now[0])
    try:
        await store.put('art_old', b'o' * 60, media_type='text/plain', source='t', scope='a')
        now[0] += 1_800
        await store.put('art_mid', b'm' * 30, media_type='text/plain', source='t', scope='b')
        with pytest.raises(StoreQuotaExceeded):
            await store.put('art_new', b'n' * 40, media_type='text/plain', source='t', scope='c')
        assert await store.get('art_old', scope='a') == b'o' * 60
        now[0] += 1_801  # 'art_old' is past its ttl by the store's clock: its room is taken back
        await store.put('art_new', b'n' * 40, media_type='text/plain', source='t', scope='c')
        assert await store.get('art_new', scope='c') == b'n' * 40
        assert await store.get('art_mid', scope='b') == b'm' * 30
        assert await store._clients.get().get('live::total') == b'70'
    finally:
        await store.aclose()


async def test_prune_takes_expired_artifacts_out_of_every_count(redis_server):
    now = [1_000.0]
    store = RedisStore(redis_server.url, prefix='age:', ttl=0.3, clock=lambda: now[0])
    try:
        await store.put('art_a', b'a' * 10, media_type='text/plain', source='t', scope='s')
        await store.put('art_b', b'b' * 20, media_type='text/plain', source='t', scope='s')
        client = store._clients.get()
        assert await client.get('age::total') == b'30'
        deadline = time.monotonic() + 5
        while await client.exists('age:' + store._key('art_a', 's')[len('age:') :]):
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)
        now[0] += 1  # both are past their age now
        report = await store.prune()
        assert (report.removed, report.freed_bytes, report.held, report.held_bytes) == (2, 30, 0, 0)
        assert await client.get('age::total') == b'0'
    finally:
        await store.aclose()
