"""Shared fixtures: the real material in ../shared, the tokenizer cache, anyio, a real redis-server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from _redis_server import RedisServer, running_redis_server

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
FIXTURES = SHARED / 'fixtures'

if 'TIKTOKEN_CACHE_DIR' not in os.environ and (SHARED / 'tiktoken-cache').is_dir():
    os.environ['TIKTOKEN_CACHE_DIR'] = str(SHARED / 'tiktoken-cache')


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
