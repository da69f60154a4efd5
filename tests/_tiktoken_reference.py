"""tiktoken's own construction of an encoding from the packaged file: the tests' reference tokenizer.

tiktoken's `tiktoken_ext.openai_public` builds each encoding from a URL, its `expected_hash`, a pattern and
special tokens. Here its `load_tiktoken_bpe` is pointed at the packaged file (with tiktoken's cache turned
off, so nothing is copied or downloaded); everything else is tiktoken's, so a test comparing against it does
not trust the package's own loader.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any
from unittest import mock

import tiktoken
from tiktoken_ext import openai_public

PACKAGE = 'pydantic_ai_history.tokens._encodings'


@dataclass(frozen=True)
class Published:
    """What tiktoken's constructor for an encoding asks for and builds (without loading the ranks)."""

    url: str
    expected_hash: str
    pat_str: str
    special_tokens: dict[str, int]


def packaged_path(name: str) -> str:
    return str(resources.files(PACKAGE).joinpath(f'{name}.tiktoken'))


def published(name: str) -> Published:
    """The URL, hash, pattern and special tokens tiktoken's `openai_public.<name>()` uses."""
    asked: list[tuple[str, str]] = []

    def record(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        asked.append((url, expected_hash or ''))
        return {}

    with mock.patch.object(openai_public, 'load_tiktoken_bpe', record):
        spec: dict[str, Any] = getattr(openai_public, name)()
    ((url, expected_hash),) = asked
    return Published(url, expected_hash, spec['pat_str'], spec['special_tokens'])


@functools.cache
def reference_encoding(name: str) -> tiktoken.Encoding:
    """`name` built by tiktoken's own code (parser, pattern, special tokens) from the packaged file."""
    real = openai_public.load_tiktoken_bpe

    def local(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        return real(packaged_path(name), expected_hash)

    with (
        mock.patch.object(openai_public, 'load_tiktoken_bpe', local),
        mock.patch.dict(os.environ, {'TIKTOKEN_CACHE_DIR': ''}),
    ):
        return tiktoken.Encoding(**getattr(openai_public, name)())
