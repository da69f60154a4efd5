"""Shared fixtures: the real material in ../shared, the tokenizer cache, anyio."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
