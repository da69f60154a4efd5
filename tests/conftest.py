"""Shared fixtures: the real material in ../shared, anyio, a real redis-server.

The tokenizer needs nothing: the package ships its encodings (no TIKTOKEN_CACHE_DIR, no network).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _redis_server import RedisServer, running_redis_server

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
FIXTURES = SHARED / 'fixtures'


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


@pytest.fixture(scope='session')
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f'the shared fixtures folder {FIXTURES} is absent (it sits beside the repository in CI)')
    return FIXTURES


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server per test on a free loopback port, killed at teardown; tests may restart it."""
    with running_redis_server() as server:
        yield server
