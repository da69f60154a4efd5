"""The packaged o200k_base and cl100k_base files: official, verified, and enough to count offline."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from tiktoken import registry
from tiktoken.load import load_tiktoken_bpe

import pydantic_ai_history.tokens._counter as tokens_module
import pydantic_ai_history.tokens._encodings as encodings_module
from _tiktoken_reference import packaged_path, published, reference_encoding
from pydantic_ai_history.testing import StrictProvider
from pydantic_ai_history.tokens import TokenCounter, estimate_tokens_offline
from pydantic_ai_history.tokens._encodings import (
    PACKAGED,
    EncodingUnavailableError,
    load_encoding,
    packaged_encoding,
    parse_bpe,
)

NAMES = ('o200k_base', 'cl100k_base')

SAMPLES = (
    'Hello, world! The quick brown fox jumps over the lazy dog.',
    "def f(x):\n    return {'a': [1, 2, 3]}  # it's code\n\n\n",
    '人工智能助手在长时间的对话中会积累大量的消息记录。',
    'Ünïcödé — emoji 🎉🎉 and numbers 1234567 3.14159',
    '   leading and trailing whitespace   \n\t\r\n',
    '<|endoftext|> is plain text to encode_ordinary',
)


@pytest.mark.parametrize('name', NAMES)
def test_shipped_file_matches_tiktoken_published_hash(name: str) -> None:
    expected = published(name)
    data = Path(packaged_path(name)).read_bytes()
    assert hashlib.sha256(data).hexdigest() == expected.expected_hash
    assert PACKAGED[name].sha256 == expected.expected_hash
    assert PACKAGED[name].url == expected.url


@pytest.mark.parametrize('name', NAMES)
def test_pattern_and_special_tokens_are_tiktokens(name: str) -> None:
    expected = published(name)
    assert PACKAGED[name].pat_str == expected.pat_str
    assert PACKAGED[name].special_tokens == expected.special_tokens


@pytest.mark.parametrize('name', NAMES)
def test_parse_matches_tiktokens_parser(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', '')  # read the file, do not copy it into a cache
    path = packaged_path(name)
    assert parse_bpe(Path(path).read_bytes()) == load_tiktoken_bpe(path)


@pytest.mark.parametrize('name', NAMES)
def test_packaged_encoding_encodes_like_tiktokens(name: str) -> None:
    ours = load_encoding(name)
    reference = reference_encoding(name)
    assert ours.n_vocab == reference.n_vocab
    assert ours.special_tokens_set == reference.special_tokens_set
    for text in SAMPLES:
        assert ours.encode_ordinary(text) == reference.encode_ordinary(text)
        assert ours.encode(text, allowed_special='all') == reference.encode(text, allowed_special='all')


def test_load_is_shared_within_a_process() -> None:
    assert load_encoding('o200k_base') is load_encoding('o200k_base')


def test_damaged_file_is_refused() -> None:
    spec = PACKAGED['o200k_base']
    damaged = type(spec)(**{**spec.__dict__, 'sha256': '0' * 64})
    with pytest.raises(ValueError, match='sha256'):
        packaged_encoding(damaged)


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """tiktoken's registry as in a process that has built no encoding yet (its constructors discovered);
    returns the constructors, which the test may replace before the package registers its own."""
    registry.list_encoding_names()
    assert registry.ENCODING_CONSTRUCTORS is not None
    constructors = dict(registry.ENCODING_CONSTRUCTORS)
    monkeypatch.setattr(registry, 'ENCODING_CONSTRUCTORS', constructors)
    monkeypatch.setattr(registry, 'ENCODINGS', {})
    monkeypatch.setattr(encodings_module, '_loaded', {})
    return constructors


TOY = {'pat_str': r'\S+|\s+', 'mergeable_ranks': {bytes([i]): i for i in range(256)}, 'special_tokens': {}}
"""The arguments of a byte-level encoding: stands for what tiktoken's own constructor would download."""


def test_the_packaged_encoding_is_built_by_tiktoken_once(fresh_registry: dict[str, Any]) -> None:
    ours = load_encoding('o200k_base')
    assert tiktoken.get_encoding('o200k_base') is ours
    assert tiktoken.encoding_for_model('gpt-4o') is ours
    assert {'o200k_base': ours} == registry.ENCODINGS  # cl100k is registered, not built
    assert tiktoken.get_encoding('cl100k_base') is load_encoding('cl100k_base')


def test_an_encoding_the_app_built_first_is_reused(fresh_registry: dict[str, Any]) -> None:
    apps = tiktoken.Encoding('o200k_base', **TOY)
    registry.ENCODINGS['o200k_base'] = apps
    assert load_encoding('o200k_base') is apps
    assert TokenCounter('gpt-4o').count_text('two words') == len(apps.encode_ordinary('two words'))


def test_a_module_imported_again_keeps_the_registered_constructor(fresh_registry: dict[str, Any]) -> None:
    """Temporal's workflow sandbox imports the package again per run; tiktoken (passed through) is shared."""
    encodings_module.register_with_tiktoken()
    assert registry.ENCODING_CONSTRUCTORS is not None
    first = registry.ENCODING_CONSTRUCTORS['o200k_base']
    spec = importlib.util.find_spec(encodings_module.__name__)
    assert spec is not None
    assert spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)
    again.register_with_tiktoken()
    assert registry.ENCODING_CONSTRUCTORS['o200k_base'] is first  # not wrapped a second time
    assert again.load_encoding('o200k_base') is load_encoding('o200k_base')


def test_damaged_package_falls_back_to_tiktokens_constructor(
    fresh_registry: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spec = PACKAGED['o200k_base']
    monkeypatch.setitem(PACKAGED, 'o200k_base', type(spec)(**{**spec.__dict__, 'sha256': '0' * 64}))
    fresh_registry['o200k_base'] = lambda: {'name': 'o200k_base', **TOY}
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history.tokens'):
        encoding = load_encoding('o200k_base')
    assert encoding.n_vocab == 256  # the replaced constructor's encoding
    assert tiktoken.get_encoding('o200k_base') is encoding
    assert [r.getMessage() for r in caplog.records] == [
        'o200k_base encoding loaded by tiktoken; the packaged file: o200k_base.tiktoken has sha256 '
        '446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d, expected ' + '0' * 64
    ]


def test_damaged_package_and_no_tiktoken_names_both(
    fresh_registry: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline() -> dict[str, Any]:
        raise ConnectionError('no network')

    spec = PACKAGED['o200k_base']
    monkeypatch.setitem(PACKAGED, 'o200k_base', type(spec)(**{**spec.__dict__, 'sha256': '0' * 64}))
    fresh_registry['o200k_base'] = offline
    with pytest.raises(
        EncodingUnavailableError, match=r'the packaged file: .*sha256.*; tiktoken: ConnectionError'
    ):
        load_encoding('o200k_base')
    assert 'o200k_base' not in registry.ENCODINGS


def test_neither_source_means_one_warning_and_an_estimate(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*args: Any) -> Any:
        raise ConnectionError('no network')

    monkeypatch.setattr(encodings_module, '_loaded', {})
    monkeypatch.setattr(encodings_module, 'packaged_encoding', refuse)
    monkeypatch.setattr(tiktoken, 'get_encoding', refuse)
    monkeypatch.setattr(tokens_module, '_offline_warned', set())
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history.tokens'):
        counters = [TokenCounter('gpt-4o'), TokenCounter('gpt-4.1')]
        assert all(c.offline for c in counters)
        assert counters[0].count_text('hello world') == estimate_tokens_offline('hello world')
    assert sum('could not be loaded' in r.getMessage() for r in caplog.records) == 1
    provider = StrictProvider(respond=lambda messages, info: None, context_window=100)  # type: ignore[arg-type,return-value]
    assert provider.count([]) > 0  # the simulated provider estimates too instead of raising


def test_unknown_encoding_is_asked_of_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = reference_encoding('cl100k_base')
    asked: list[str] = []

    def get_encoding(name: str) -> Any:
        asked.append(name)
        return sentinel

    monkeypatch.setattr(encodings_module, '_loaded', {})
    monkeypatch.setattr(tiktoken, 'get_encoding', get_encoding)
    assert load_encoding('p50k_base') is sentinel
    assert asked == ['p50k_base']


def test_fresh_process_without_cache_or_network_counts_exactly(tmp_path: Path) -> None:
    """No TIKTOKEN_CACHE_DIR, HOME and the temp dir empty, every proxy dead, sockets refused: exact counts,
    and tiktoken's own `get_encoding` returns the package's encodings, each file parsed once."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith('_proxy')}
    env.pop('TIKTOKEN_CACHE_DIR', None)
    env.pop('DATA_GYM_CACHE_DIR', None)
    env.update(
        HOME=str(tmp_path),
        TMPDIR=str(tmp_path),
        XDG_CACHE_HOME=str(tmp_path),
        HTTPS_PROXY='http://127.0.0.1:9',
        HTTP_PROXY='http://127.0.0.1:9',
    )
    script = textwrap.dedent(
        """
        import socket

        def refuse(*args, **kwargs):
            raise OSError('network unreachable')

        socket.socket.connect = refuse
        socket.create_connection = refuse
        import tiktoken
        import pydantic_ai_history.tokens._encodings as encodings
        from pydantic_ai_history.tokens import TokenCounter

        parse, parsed = encodings.parse_bpe, []
        encodings.parse_bpe = lambda data: parsed.append(len(data)) or parse(data)
        for model in ('gpt-4o', 'gpt-4'):
            counter = TokenCounter(model)
            print(counter.offline, counter.count_text('The quick brown fox jumps over the lazy dog.'))
        # the app's own tiktoken calls get the same objects, built once each
        o200k, cl100k = encodings.load_encoding('o200k_base'), encodings.load_encoding('cl100k_base')
        assert tiktoken.get_encoding('o200k_base') is o200k is tiktoken.encoding_for_model('gpt-4o')
        assert tiktoken.get_encoding('cl100k_base') is cl100k is tiktoken.encoding_for_model('gpt-4')
        assert len(parsed) == 2, parsed
        """
    )
    result = subprocess.run(
        [sys.executable, '-c', script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert 'could not be loaded' not in result.stderr
    text = 'The quick brown fox jumps over the lazy dog.'
    lines = result.stdout.split('\n')
    assert lines[0] == f'False {len(reference_encoding("o200k_base").encode_ordinary(text))}'
    assert lines[1] == f'False {len(reference_encoding("cl100k_base").encode_ordinary(text))}'
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or cached
