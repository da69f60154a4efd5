"""model_info: override > model profile (2.x) > genai-prices > table > unknown (the policy falls back), and
model names as pydantic-ai and the providers write them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic_ai.models.test import TestModel

import pydantic_ai_history.budget.model_info as windows
from pydantic_ai_history.budget._policy import ContextPolicy
from pydantic_ai_history.budget.model_info import (
    KNOWN_CONTEXT_WINDOWS,
    KNOWN_MAX_OUTPUT_TOKENS,
    ContextWindowUnknownError,
    model_info,
    model_name_of,
    parse_model_name,
)
from pydantic_ai_history.tokens import profile_for_model
from pydantic_ai_history.tokens._model_name import ModelFamily


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


def test_unknown_model_is_unknown_and_the_error_says_how_to_set_it() -> None:
    info = model_info(TestModel())
    assert (info.context_window, info.source) == (None, 'unknown')
    with pytest.raises(ContextWindowUnknownError) as error:
        info.require_context_window()
    assert error.value.model_name == 'test:test'
    message = str(error.value)
    assert "'test:test'" in message
    assert 'ContextPolicy(context_window=...)' in message
    assert 'ContextPolicy(strict=True)' in message
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
    # a Bedrock version or an Ollama tag is not a provider: the serving provider is kept in front
    assert (
        model_name_of(_Model('us.anthropic.claude-3-5-sonnet-20241022-v2:0', 'bedrock'))
        == 'bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0'
    )
    assert model_name_of(_Model('llama3.1:8b', 'ollama')) == 'ollama:llama3.1:8b'
    assert (
        model_name_of(_Model('anthropic/claude-3.5-sonnet', 'openrouter'))
        == 'openrouter:anthropic/claude-3.5-sonnet'
    )


# ---- model names --------------------------------------------------------------------------------------

KNOWN = 'known'
"""The window comes from genai-prices or the built-in table (which one depends on the genai-prices version
installed); with 'table' the table's number itself is checked."""


@pytest.mark.parametrize(
    ('name', 'provider', 'family', 'ref', 'source', 'max_output'),
    [
        # Bedrock: `[region.]vendor.model-vN:M`, the `:0` a version
        (
            'bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0',
            'bedrock',
            'anthropic',
            'claude-3-5-sonnet-20241022',
            KNOWN,
            8_192,
        ),
        (
            'bedrock:anthropic.claude-3-7-sonnet-20250219-v1:0',
            'bedrock',
            'anthropic',
            'claude-3-7-sonnet-20250219',
            KNOWN,
            64_000,
        ),
        (
            'anthropic.claude-3-haiku-20240307-v1:0',
            None,
            'anthropic',
            'claude-3-haiku-20240307',
            KNOWN,
            4_096,
        ),
        (
            'bedrock:eu.anthropic.claude-sonnet-4-20250514-v1:0',
            'bedrock',
            'anthropic',
            'claude-sonnet-4-20250514',
            KNOWN,
            64_000,
        ),
        ('bedrock:meta.llama3-70b-instruct-v1:0', 'bedrock', 'meta', 'llama-3-70b-instruct', KNOWN, None),
        (
            'bedrock:us.meta.llama3-2-90b-instruct-v1:0',
            'bedrock',
            'meta',
            'llama-3.2-90b-instruct',
            KNOWN,
            None,
        ),
        (
            'bedrock:mistral.mistral-large-2407-v1:0',
            'bedrock',
            'mistral',
            'mistral-large-2407',
            'table',
            None,
        ),
        ('bedrock:amazon.titan-text-express-v1', 'bedrock', 'amazon', 'titan-text-express', 'unknown', None),
        # OpenRouter and other vendor/model ids, with OpenRouter's `:free`
        (
            'openrouter:anthropic/claude-3.5-sonnet',
            'openrouter',
            'anthropic',
            'claude-3-5-sonnet',
            KNOWN,
            8_192,
        ),
        (
            'openrouter:meta-llama/llama-3.1-70b-instruct:free',
            'openrouter',
            'meta',
            'llama-3.1-70b-instruct',
            'table',
            None,
        ),
        ('openrouter:google/gemini-2.5-pro', 'openrouter', 'google', 'gemini-2.5-pro', KNOWN, 65_536),
        ('openrouter:openai/gpt-4o-mini', 'openrouter', 'openai', 'gpt-4o-mini', KNOWN, 16_384),
        ('meta-llama/llama-3.1-70b-instruct', None, 'meta', 'llama-3.1-70b-instruct', 'table', None),
        (
            'fireworks:accounts/fireworks/models/llama-v3p1-70b-instruct',
            'fireworks',
            'meta',
            'llama-3.1-70b-instruct',
            'table',
            None,
        ),
        # Vertex: plain, `@version`, publisher paths
        ('google-vertex:gemini-2.5-pro', 'google-vertex', 'google', 'gemini-2.5-pro', KNOWN, 65_536),
        (
            'google-vertex:claude-sonnet-4@20250514',
            'google-vertex',
            'anthropic',
            'claude-sonnet-4',
            KNOWN,
            64_000,
        ),
        (
            'google-vertex:projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-1',
            'google-vertex',
            'anthropic',
            'claude-opus-4-1',
            KNOWN,
            32_000,
        ),
        ('google-gla:gemini-2.0-flash', 'google-gla', 'google', 'gemini-2.0-flash', KNOWN, 8_192),
        # Ollama: the window is the server's num_ctx, so it stays unknown (the policy warns and falls back)
        ('ollama:llama3.2', 'ollama', 'meta', 'llama-3.2', 'unknown', None),
        ('ollama:qwen2.5-coder:7b-instruct-q4_K_M', 'ollama', 'qwen', 'qwen2.5-coder', 'unknown', None),
        ('llama3.1:8b', None, 'meta', 'llama-3.1', 'table', None),
        ('mistral:7b', None, 'mistral', 'mistral', 'unknown', None),
        # Azure deployments: named by the user; OpenAI's unless the name says otherwise
        ('azure:gpt-4o', 'azure', 'openai', 'gpt-4o', KNOWN, 16_384),
        ('azure:my-prod-deployment', 'azure', 'openai', 'my-prod-deployment', 'unknown', None),
        # plain names and first-party providers
        ('openai:gpt-5', 'openai', 'openai', 'gpt-5', KNOWN, 128_000),
        ('gpt-4.1-mini', None, 'openai', 'gpt-4.1-mini', KNOWN, 32_768),
        ('openai:o3-mini', 'openai', 'openai', 'o3-mini', KNOWN, 100_000),
        (
            'anthropic:claude-opus-4-1-20250805',
            'anthropic',
            'anthropic',
            'claude-opus-4-1-20250805',
            KNOWN,
            32_000,
        ),
        (
            'gateway/anthropic:claude-sonnet-4-5',
            'gateway/anthropic',
            'anthropic',
            'claude-sonnet-4-5',
            KNOWN,
            64_000,
        ),
        ('groq:llama-3.3-70b-versatile', 'groq', 'meta', 'llama-3.3-70b-versatile', KNOWN, None),
        ('mistral:mistral-large-latest', 'mistral', 'mistral', 'mistral-large-latest', KNOWN, None),
        (
            'huggingface:Qwen/Qwen2.5-72B-Instruct',
            'huggingface',
            'qwen',
            'qwen2.5-72b-instruct',
            'unknown',
            None,
        ),
        ('my-vllm:my-finetune', 'my-vllm', None, 'my-finetune', 'unknown', None),
    ],
)
def test_real_model_ids(
    name: str, provider: str | None, family: ModelFamily | None, ref: str, source: str, max_output: int | None
) -> None:
    parsed = parse_model_name(name)
    assert (parsed.provider, parsed.family, parsed.ref) == (provider, family, ref)
    info = model_info(name)  # never raises
    assert info.max_output_tokens == max_output
    if source == KNOWN:
        assert info.source in ('genai-prices', 'table')
    else:
        assert info.source == source
    if info.source == 'table':
        assert info.context_window == windows._table_window(name)
    assert (info.context_window is None) is (info.source == 'unknown')


def test_a_version_or_tag_is_not_a_provider() -> None:
    bedrock = parse_model_name('bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0')
    assert (bedrock.model_id, bedrock.vendor, bedrock.tag) == (
        'us.anthropic.claude-3-5-sonnet-20241022-v2:0',
        'anthropic',
        '0',
    )
    ollama = parse_model_name('llama3.1:8b')
    assert (ollama.provider, ollama.model_id, ollama.tag) == (None, 'llama3.1:8b', '8b')
    assert parse_model_name('ollama:llama3.1:8b').tag == '8b'
    assert parse_model_name('openrouter:meta-llama/llama-3.1-8b-instruct:free').tag == 'free'
    assert parse_model_name('hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M').provider is None


def test_any_string_parses() -> None:
    for name in (
        '',
        ':',
        '::',
        'a:',
        ':b',
        '/',
        'x/',
        '@',
        'bedrock:',
        'fallback:openai:gpt-4o,anthropic:claude',
    ):
        parsed = parse_model_name(name)
        assert parsed.name == name
        assert model_info(name).source in ('unknown', 'genai-prices', 'table')


def test_table_entries_apply_only_to_their_own_family() -> None:
    # `o1` is an OpenAI prefix: a Qwen model served as `o1-...` by a custom provider does not get its window
    assert (
        windows._table_lookup(KNOWN_CONTEXT_WINDOWS, parse_model_name('acme:qwen/o1-preview-clone')) is None
    )
    assert windows._table_lookup(KNOWN_CONTEXT_WINDOWS, parse_model_name('acme:o1-preview-clone')) == 200_000


def test_max_output_longest_prefix_wins() -> None:
    assert windows.known_max_output_tokens('openai:gpt-5') == 128_000
    assert windows.known_max_output_tokens('openai:gpt-5-mini-2025-08-07') == KNOWN_MAX_OUTPUT_TOKENS['gpt-5']
    assert windows.known_max_output_tokens('gpt-5-chat-latest') == KNOWN_MAX_OUTPUT_TOKENS['gpt-5-chat']
    assert windows.known_max_output_tokens('openai:gpt-4o-2024-05-13') == 4_096
    assert windows.known_max_output_tokens('openai:gpt-4o-2024-08-06') == 16_384
    assert windows.known_max_output_tokens('openai:o1-mini') == 65_536
    assert windows.known_max_output_tokens('anthropic:claude-opus-4-5-20251101') == 64_000
    assert windows.known_max_output_tokens('anthropic:claude-opus-4-20250514') == 32_000


def test_gpt5_reserves_its_output_cap() -> None:
    info = model_info('openai:gpt-5')
    assert info.max_output_tokens == 128_000
    assert info.context_window == 400_000
    limits = ContextPolicy().resolve(info)
    assert (limits.reserve_tokens, limits.budget) == (128_000, 272_000)  # gpt-5's documented input limit


@pytest.mark.parametrize(
    'name', ['ollama:llama3.2', 'ollama:llama3.1:8b', 'bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0']
)
def test_ollama_and_bedrock_ids_resolve_without_an_exception(name: str) -> None:
    limits = ContextPolicy().resolve(model_info(name))
    assert limits.budget > 0
    if name.startswith('ollama:'):
        assert limits.window_source == 'fallback'
    else:
        assert limits.window_source in ('genai-prices', 'table')
        assert limits.model_window == 200_000
    with pytest.raises(ContextWindowUnknownError):
        ContextPolicy(strict=True).resolve(model_info('ollama:llama3.2'))


@pytest.mark.parametrize(
    ('name', 'profile'),
    [
        ('bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0', 'anthropic'),
        ('anthropic.claude-3-haiku-20240307-v1:0', 'anthropic'),
        ('openrouter:anthropic/claude-3.5-sonnet', 'anthropic'),
        ('google-vertex:claude-sonnet-4@20250514', 'anthropic'),
        ('google-vertex:gemini-2.5-pro', 'google'),
        ('openrouter:google/gemini-2.5-pro', 'google'),
        ('ollama:gemma3:4b', 'google'),
        ('bedrock:meta.llama3-70b-instruct-v1:0', 'other'),
        ('ollama:llama3.1:8b', 'other'),
        ('bedrock:mistral.mistral-large-2407-v1:0', 'other'),
        ('openrouter:openai/gpt-4o-mini', 'openai'),
        ('azure:my-prod-deployment', 'openai'),
    ],
)
def test_token_profile_follows_the_family(name: str, profile: str) -> None:
    assert profile_for_model(name).name == profile


@pytest.mark.anyio
async def test_an_ollama_model_and_a_bedrock_claude_id_are_processed_with_one_fallback_warning() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from pydantic_ai_history.events import HistoryEvent, HistoryWarning
    from pydantic_ai_history.processor import HistoryProcessor

    events: list[HistoryEvent] = []
    processor = HistoryProcessor(policy=ContextPolicy(), on_history_event=events.append)
    history = [
        ModelRequest(parts=[UserPromptPart(content='hello')]),
        ModelResponse(parts=[TextPart(content='hi')]),
        ModelRequest(parts=[UserPromptPart(content='and now?')]),
    ]
    # what pydantic-ai's Ollama and Bedrock models report as `model_name` and `system` (the `openai` and
    # `boto3` packages they need are not installed here; nothing is sent)
    ollama = _Model('llama3.1:8b', 'ollama')
    assert model_name_of(ollama) == 'ollama:llama3.1:8b'
    bedrock = _Model('us.anthropic.claude-3-5-sonnet-20241022-v2:0', 'bedrock')
    for model in (ollama, bedrock, ollama):
        result = await processor.process(history, model=model)
        assert all(a is b for a, b in zip(result, history, strict=True))  # fits: unchanged, the same objects
    fallbacks = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'context_window_fallback']
    assert [e.details['model'] for e in fallbacks] == ['ollama:llama3.1:8b']  # once, and not for Bedrock
    assert processor.limits_for(bedrock).model_window == 200_000
    assert processor.counter_for(bedrock).tokenizer_profile.name == 'anthropic'
    assert processor.counter_for(ollama).tokenizer_profile.name == 'other'


@pytest.mark.skipif(
    not _profile_supports_window(), reason='this pydantic-ai version has no dict profiles on TestModel'
)
def test_the_profile_output_cap_beats_the_table() -> None:
    # pydantic-ai 2.68's Anthropic profile key (set by AnthropicModel and BedrockConverseModel for Claude)
    model = TestModel(profile={'anthropic_max_output_tokens': 12_000})  # type: ignore[typeddict-unknown-key]
    assert model_info(model).max_output_tokens == 12_000
    assert model_info(TestModel()).max_output_tokens is None
