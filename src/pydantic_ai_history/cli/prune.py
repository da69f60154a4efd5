"""`pydantic-ai-history prune`: apply a persistent store's retention now (age and size, oldest first).

Stores prune as they write; this is for a root or a Redis prefix no process writes to any more, for a cron
job, or to apply tighter bounds once.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from ..store import DirectoryStore, RedisStore
from ..store._directory import SECRET_FILE
from ..store._retention import PruneReport, StoreBound
from .common import fail

_UNITS = {'': 1, 'b': 1} | {
    prefix + suffix: base**power
    for power, prefix in enumerate('kmg', 1)
    for suffix, base in (('b', 1000), ('ib', 1024))
}
"""Decimal (kb, mb, gb) and binary (kib, mib, gib) size units, case-insensitive."""
_SIZE = re.compile(r'\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*')


def parse_size(text: str) -> int:
    """Bytes from `'500000'`, `'500 KB'`, `'1.5GiB'`...; `ValueError` naming what is wrong."""
    match = _SIZE.fullmatch(text.replace('_', '').replace(',', ''))
    unit = match.group(2).lower() if match else ''
    if match is None or unit not in _UNITS:
        raise ValueError(f'{text!r} is not a size (e.g. 500MB, 1GiB, 200000)')
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f'{text!r} must be positive')
    return value


def run_prune(
    root: str | None,
    *,
    redis_url: str | None,
    prefix: str | None,
    max_age: float | None,
    max_bytes: int | None,
) -> PruneReport:
    """Prune a `DirectoryStore` root or a `RedisStore` prefix; `max_age` in seconds. A bound left None is the
    store's default."""
    if (root is None) == (redis_url is None):
        fail('give a store ROOT folder or --redis URL (one of them)')
    age: float | StoreBound = 'store' if max_age is None else max_age
    size: int | StoreBound = 'store' if max_bytes is None else max_bytes
    if root is not None:
        folder = Path(root)
        if not folder.is_dir():
            fail(f'{root}: no such folder')
        if (
            not (folder / SECRET_FILE).exists()
            and not any(folder.glob('*.json'))
            and not any(folder.glob('scope-*'))
        ):
            fail(f'{root} does not look like a DirectoryStore root: nothing was touched')
        return asyncio.run(DirectoryStore(folder, create=False).prune(max_age=age, max_bytes=size))

    async def prune_redis() -> PruneReport:
        store = RedisStore(redis_url) if prefix is None else RedisStore(redis_url, prefix=prefix)
        try:
            return await store.prune(max_age=age, max_bytes=size)
        finally:
            await store.aclose()

    return asyncio.run(prune_redis())
