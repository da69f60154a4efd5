from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[2].parent / 'shared' / 'fixtures'


@pytest.fixture(scope='session')
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f'shared fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)')
    return FIXTURES


@pytest.fixture(scope='session')
def documents(fixtures: Path) -> Path:
    return fixtures / 'documents'


@pytest.fixture(scope='session')
def images(fixtures: Path) -> Path:
    return fixtures / 'images'
