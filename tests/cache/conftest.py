from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/ is not a package (the top-level conftest is not ours), so put it on the path for the shared helper.
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from _redis_server import RedisServer, running_redis_server  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server per test, killed at teardown; tests may stop and restart it on the same port."""
    with running_redis_server() as server:
        yield server
