from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope='session')
def fixtures(fixtures_dir: Path) -> Path:
    return fixtures_dir


@pytest.fixture(scope='session')
def documents(fixtures: Path) -> Path:
    return fixtures / 'documents'


@pytest.fixture(scope='session')
def images(fixtures: Path) -> Path:
    return fixtures / 'images'
