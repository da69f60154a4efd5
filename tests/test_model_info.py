"""model_info: override > model profile (2.x) > genai-prices > table > ContextWindowUnknownError."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic_ai.models.test import TestModel

from pydantic_ai_history import model_info as windows
from pydantic_ai_history.model_info import (
    KNOWN_CONTEXT_WINDOWS,
    ContextWindowUnknownError,
    model_info,
    model_name_of,
)


def _profile_supports_window() -> bool:
    try:
        model = TestModel(profile={'context_window': 12_345})  # type: ignore[typeddict-unknown-key]
    except TypeError:  # pydantic-ai 1.0: TestModel takes no profile
        return False
    return windows.profile_window(model) == 12_345


def test_override_wins_over_everything() -> None:
    info = model_info('openai:gpt-4o', context_window=32_000)
    assert (info.context_window, info.source) == (32_000, 'override')
    assert info.input_price_per_mtok is not None  # the price still comes from genai-prices


@pytest.mark.skipif(
    not _profile_supports_window(), reason='this pydantic-ai version drops context_window from model profiles'
)
def test_profile_beats_genai_prices_and_table() -> None:
    model = TestModel(profile={'context_window': 12_345})  # type: ignore[typeddict-unknown-key]
    info = model_info(model)
    assert (info.context_window, info.source) == (12_345, 'profile')
    assert model_info(model, context_window=9_000).source == 'override'


def test_genai_prices_beats_table() -> None:
    window, price = windows._genai_prices('openai:gpt-4o')
    if window is None:
        pytest.skip('this genai-prices version has no context windows')
    info = model_info('openai:gpt-4o')
    assert (info.context_window, info.source, info.input_price_per_mtok) == (window, 'genai-prices', price)


def test_table_when_genai_prices_does_not_know_the_model() -> None:
    name = 'my-vllm:llama-3-8b-finetuned-inhouse'
    assert windows._genai_prices(name) == (None, None)
    info = model_info(name)
    assert (info.context_window, info.source) == (KNOWN_CONTEXT_WINDOWS['llama-3'], 'table')
    # longest prefix wins
    assert windows._table_window('x:gpt-4-turbo-2024') == KNOWN_CONTEXT_WINDOWS['gpt-4-turbo']
    assert windows._table_window('x:gpt-4-0613') == KNOWN_CONTEXT_WINDOWS['gpt-4']


def test_unknown_model_raises_a_clear_error() -> None:
    info = model_info(TestModel())
    assert (info.context_window, info.source) == (None, 'unknown')
    with pytest.raises(ContextWindowUnknownError) as error:
        info.require_context_window()
    assert error.value.model_name == 'test:test'
    message = str(error.value)
    assert "'test:test'" in message
    assert 'context_window=' in message
    assert model_info(None).source == 'unknown'


@dataclass
class _Model:
    model_name: str
    system: str


def test_model_name_of() -> None:
    assert model_name_of('anthropic:claude-sonnet-4-5') == 'anthropic:claude-sonnet-4-5'
    assert model_name_of(_Model('gpt-4o', 'openai')) == 'openai:gpt-4o'
    assert model_name_of(_Model('anthropic:claude-3', 'function')) == 'anthropic:claude-3'
    assert model_name_of(TestModel()) == 'test:test'
    assert model_name_of(None) is None
    assert model_name_of(object()) is None
