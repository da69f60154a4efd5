"""Text that is not valid UTF-8 becomes bytes one way everywhere, and nesting is measured without parsing."""

from __future__ import annotations

import pytest

from pydantic_ai_history.cache import cache_key
from pydantic_ai_history.messages._nesting import MAX_PARSE_DEPTH, json_too_deep
from pydantic_ai_history.messages._utf8 import from_utf8, utf8
from pydantic_ai_history.readback._retrieval import chunk_text, detect_kind
from pydantic_ai_history.store import MemoryStore, StoredArtifact


@pytest.mark.parametrize('text', ['plain', 'naïve 東京', 'Jos\udce9', '\ud800 alone', 'a\udcff\udc80b'])
def test_utf8_round_trips_every_str(text: str) -> None:
    data = utf8(text)
    assert from_utf8(data) == text
    if text.isascii() or all(not 0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert data == text.encode()  # valid text: exactly `str.encode()`


def test_utf8_keeps_different_texts_apart() -> None:
    texts = ['Jos\udce9', 'José', 'Jos\udcc3\udca9', 'Jos\ufffd']
    assert len({utf8(t) for t in texts}) == len(texts)
    assert len({cache_key('k', t) for t in texts}) == len(texts)


@pytest.mark.anyio
async def test_stores_and_ids_take_a_lone_surrogate() -> None:
    store = MemoryStore()
    name = 'report-Jos\udce9.txt'
    artifact_id = store.artifact_id(utf8(name), scope=f'tenant-{name}')
    await store.put(artifact_id, utf8(name), media_type='text/plain', source=name, scope=f'tenant-{name}')
    info = await store.info(artifact_id, scope=f'tenant-{name}')
    assert info is not None
    assert info.source == name
    assert StoredArtifact.from_json(info.to_json(), artifact_id) == info


@pytest.mark.parametrize(
    ('text', 'deep'),
    [
        ('[' * 10_000 + ']' * 10_000, True),
        ('{"a": ' * 300 + '1' + '}' * 300, True),
        ('[' * MAX_PARSE_DEPTH + ']' * MAX_PARSE_DEPTH, False),
        ('{"text": "' + '[' * 5_000 + '"}', False),  # brackets inside a string do not nest
        ('[1, [2, [3]], {"a": [4]}]' * 1_000, False),
        ('plain text', False),
    ],
)
def test_json_too_deep(text: str, deep: bool) -> None:
    assert json_too_deep(text) is deep


def test_deep_json_is_chunked_as_text() -> None:
    text = '[' * 100_000 + '1' + ']' * 100_000
    assert detect_kind(text) == 'markdown'
    assert ''.join(c.text for c in chunk_text(text, max_chars=2_000, kind='json')) == text


def _nested(depth: int) -> dict:
    value: dict = {'leaf': 'bottom'}
    for _ in range(depth):
        value = {'k': value}
    return value


def test_a_value_nested_10_000_deep_is_read_without_recursion() -> None:
    from pydantic_ai_history.messages._nesting import cut_deep, json_text, value_too_deep

    deep = _nested(10_000)
    assert value_too_deep(deep)
    assert not value_too_deep(_nested(MAX_PARSE_DEPTH - 2))
    text = json_text(deep)  # raised RecursionError (pydantic gave up, then `str` recursed)
    assert text.startswith('{"k":{"k":')
    assert text.count('{') == MAX_PARSE_DEPTH
    assert f'nested deeper than {MAX_PARSE_DEPTH} levels' in text
    assert len(text) < 10_000
    # a shallow value is written as before, whole
    assert json_text(_nested(3)) == '{"k":{"k":{"k":{"leaf":"bottom"}}}}'
    looped: list = [1]
    looped.append(looped)
    assert value_too_deep(looped)
    assert json_text(cut_deep([(1, 2), {3}, {'a': None}])) == '[[1,2],[3],{"a":null}]'
