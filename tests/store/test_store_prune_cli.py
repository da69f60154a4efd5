"""`pydantic-ai-history prune`: a store's retention applied on demand, to a folder or a Redis prefix."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai_history.cli import main, parse_size
from pydantic_ai_history.store import DirectoryStore, RedisStore

DAY = 86_400


def test_sizes_read_like_people_write_them() -> None:
    assert parse_size('200000') == 200_000
    assert parse_size('500 KB') == 500_000
    assert parse_size('1.5GiB') == 1_610_612_736
    for bad in ('lots', '5 parsecs', '0'):
        with pytest.raises(ValueError, match=repr(bad)):
            parse_size(bad)


def test_prune_a_folder_by_age_and_size(tmp_path: Path, capsys: Any) -> None:
    root = tmp_path / 'spill'

    async def fill() -> None:
        store = DirectoryStore(root)
        await store.prepare()
        for i in range(6):
            await store.put(f'art_{i}', b'x' * 1_000, media_type='text/plain', source='t', scope=f's{i % 2}')

    asyncio.run(fill())
    for i, days_ago in enumerate((40, 35, 3, 2, 1, 0)):
        when = time.time() - days_ago * DAY
        for path in root.rglob(f'art_{i}.bin'):
            os.utime(path, (when, when))
    assert main(['prune', str(root)]) == 0  # the defaults: 30 days, 1 GiB
    assert 'removed 2 artifact(s)' in capsys.readouterr().out
    assert main(['prune', str(root), '--max-bytes', '3000']) == 0  # the oldest until 90% of it is held
    assert 'removed 2 artifact(s)' in capsys.readouterr().out
    assert sorted(p.stem for p in root.rglob('art_*.bin')) == ['art_4', 'art_5']
    assert main(['prune', str(root), '--max-age', '0.5']) == 0
    assert sorted(p.stem for p in root.rglob('art_*.bin')) == ['art_5']


def test_prune_refuses_what_is_not_a_store(tmp_path: Path, capsys: Any) -> None:
    other = tmp_path / 'documents'
    other.mkdir()
    (other / 'report.bin').write_bytes(b'mine')
    assert main(['prune', str(other)]) == 2
    assert 'does not look like a DirectoryStore root' in capsys.readouterr().err
    assert (other / 'report.bin').exists()
    assert main(['prune']) == 2
    assert main(['prune', str(other), '--redis', 'redis://x']) == 2
    assert main(['prune', str(tmp_path / 'missing')]) == 2
    assert main(['prune', str(other), '--max-bytes', 'lots']) == 2


@pytest.mark.redis
def test_prune_a_redis_prefix(redis_server: Any, capsys: Any) -> None:
    async def fill() -> None:
        store = RedisStore(redis_server.url, prefix='cli:', max_bytes=None)
        for i in range(5):
            await store.put(f'art_{i}', b'x' * 1_000, media_type='text/plain', source='t')
        await store.aclose()

    asyncio.run(fill())
    assert main(['prune', '--redis', redis_server.url, '--prefix', 'cli:', '--max-bytes', '2500']) == 0
    assert 'removed 3 artifact(s), 3,000 bytes; 2 left, 2,000 bytes' in capsys.readouterr().out
