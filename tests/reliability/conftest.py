"""Reliability suite: shared fixtures and a real redis-server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/ is not a package: put it (for the redis helper) and this folder (for `strategies`) on the path.
_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE.parent), str(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _redis_server import RedisServer, running_redis_server  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server per test, killed at teardown (tests may kill it themselves mid-run)."""
    with running_redis_server() as server:
        yield server
