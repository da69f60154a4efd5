"""Shared fixtures: the real material (../shared/fixtures, else tests/fixtures), anyio, a real redis-server.

The tokenizer needs nothing: the package ships its encodings (no TIKTOKEN_CACHE_DIR, no network).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _fixtures import HAS_SHARED, SHARED, local_fixtures, tiktoken_cache
from _redis_server import RedisServer, running_redis_server


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


@pytest.fixture(scope='session')
def fixtures_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """../shared/fixtures when it sits beside the repository (CI); else the subset shipped in tests/fixtures,
    with the package's sessions and generated stand-ins for the largest files (see tests/_fixtures.py)."""
    if HAS_SHARED:
        return SHARED
    return local_fixtures(tmp_path_factory.mktemp('fixtures'))


@pytest.fixture(scope='session')
def shared_dir() -> Path:
    """../shared itself (its tiktoken cache, the fixtures the benchmarks read): a skip when it is absent."""
    if not HAS_SHARED:
        pytest.skip(f'{SHARED.parent} is absent (it sits beside the repository in CI)')
    return SHARED.parent


@pytest.fixture(scope='session')
def tiktoken_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TIKTOKEN_CACHE_DIR for the benchmarks' own tokenizer: ../shared's, else one made of the package's."""
    return tiktoken_cache(tmp_path_factory.mktemp('tiktoken-cache'))


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server per test on a free loopback port, killed at teardown; tests may restart it."""
    with running_redis_server() as server:
        yield server
