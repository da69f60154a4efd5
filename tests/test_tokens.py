"""TokenCounter: exact tiktoken counts, every part type, images, anchoring, memoization, offline fallback.

What "exact" means for OpenAI-family models: `count_message(m)` equals

    message_overhead * wire_messages(m) + sum(part costs)

with `wire_messages` = 1 for a response and the number of sent parts for a request, and part costs

- text, system prompt, thinking: `len(o200k.encode_ordinary(content))`;
- tool call: `tool_call_overhead + n(tool_name) + n(args as compact JSON)`;
- tool return: `tool_call_overhead + n(tool_name) + n(content, JSON unless str)`;

where the overheads are the documented constants of the model's `TokenizerProfile` (correction 1.0).
The tests below recompute this independently from tiktoken; no count is hard-coded.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import tracemalloc
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

import pydantic_ai_history.tokens._counter as tokens_module
import pydantic_ai_history.tokens._encodings as encodings_module
from _tiktoken_reference import reference_encoding
from pydantic_ai_history import _compat
from pydantic_ai_history.tokens import (
    TokenCounter,
    estimate_tokens_offline,
    image_size,
    image_tokens,
    profile_for_model,
)

SRC = Path(tokens_module.__file__)


def n(text: str) -> int:
    # built on first use (not at import: collection must not depend on a tokenizer), by tiktoken's own code
    return len(reference_encoding('o200k_base').encode_ordinary(text))


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(',', ':'), ensure_ascii=False)


def conversations(fixtures_dir: Path) -> dict[str, list[ModelMessage]]:
    folder = fixtures_dir / 'conversations'
    return {
        p.name: ModelMessagesTypeAdapter.validate_json(p.read_bytes()) for p in sorted(folder.glob('*.json'))
    }


def expected_openai_message(message: ModelMessage, model: str = 'openai:gpt-4o') -> int:
    """An independent recomputation of the documented formula (see the module docstring)."""
    profile = profile_for_model(model)
    assert profile.encoding == 'o200k_base'
    assert profile.correction == 1.0
    total = 0
    for part in message.parts:
        if isinstance(part, (SystemPromptPart, TextPart, ThinkingPart)):
            total += n(part.content)
        elif isinstance(part, UserPromptPart):
            assert isinstance(part.content, str)
            total += n(part.content)
        elif isinstance(part, ToolCallPart):
            args = part.args if isinstance(part.args, str) else compact_json(part.args or {})
            total += profile.tool_call_overhead + n(part.tool_name) + n(args)
        elif isinstance(part, ToolReturnPart):
            content = part.content if isinstance(part.content, str) else compact_json(part.content)
            total += profile.tool_call_overhead + n(part.tool_name) + n(content)
        else:
            raise AssertionError(f'unexpected part {part!r} in the fixtures')
    wire_messages = 1 if isinstance(message, ModelResponse) else len(message.parts)
    return total + profile.message_overhead * wire_messages


# ---- exactness on real conversations ------------------------------------------------------------------


def test_count_message_equals_tiktoken_on_every_real_message(fixtures_dir: Path) -> None:
    counter = TokenCounter('openai:gpt-4o')
    checked = 0
    for name, messages in conversations(fixtures_dir).items():
        for index, message in enumerate(messages):
            assert counter.count_message(message) == expected_openai_message(message), (name, index)
            checked += 1
    assert checked > 400  # 804 messages in ../shared/fixtures, 415 in tests/fixtures


def test_count_messages_and_estimate_add_up(fixtures_dir: Path) -> None:
    counter = TokenCounter('openai:gpt-4o')
    profile = counter.tokenizer_profile
    for messages in conversations(fixtures_dir).values():
        expected = sum(expected_openai_message(m) for m in messages)
        assert counter.count_messages(messages) == expected
        estimate = counter.estimate(messages)
        assert estimate.tokenizer == expected
        assert estimate.per_message == tuple(expected_openai_message(m) for m in messages)
        # nothing learned yet and no instructions: the documented reply priming is the only overhead
        assert estimate.overhead == profile.reply_overhead
        assert estimate.total == expected + profile.reply_overhead


def test_correction_applies_to_whole_message(fixtures_dir: Path) -> None:
    messages = next(iter(conversations(fixtures_dir).values()))
    exact = TokenCounter('openai:gpt-4o')
    corrected = TokenCounter('openai:gpt-4o', correction=1.25)
    for message in messages:
        assert corrected.count_message(message) == math.ceil(exact.count_message(message) * 1.25)


@pytest.mark.parametrize(
    ('model', 'encoding', 'correction_above_one'),
    [
        ('openai:gpt-4o', 'o200k_base', False),
        ('openai:gpt-4.1-mini', 'o200k_base', False),
        ('openai:o3-mini', 'o200k_base', False),
        ('gpt-5', 'o200k_base', False),
        ('openai:gpt-4-0613', 'cl100k_base', False),
        ('gpt-3.5-turbo', 'cl100k_base', False),
        ('anthropic:claude-sonnet-4-5', 'cl100k_base', True),
        ('bedrock:us.anthropic.claude-3-5-sonnet', 'cl100k_base', True),
        # a full Bedrock id: the `:0` is a version, the model is Claude (the Anthropic profile)
        ('bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0', 'cl100k_base', True),
        ('openrouter:anthropic/claude-3.5-sonnet', 'cl100k_base', True),
        ('google-vertex:claude-sonnet-4@20250514', 'cl100k_base', True),
        ('openrouter:google/gemini-2.5-pro', 'o200k_base', True),
        ('openrouter:openai/gpt-4o', 'o200k_base', False),
        ('ollama:llama3.1:8b', 'cl100k_base', True),
        ('google-gla:gemini-2.5-pro', 'o200k_base', True),
        ('mistral:mistral-large-latest', 'cl100k_base', True),
        (None, 'cl100k_base', True),
    ],
)
def test_profile_for_model(model: str | None, encoding: str, correction_above_one: bool) -> None:
    profile = profile_for_model(model)
    assert profile.encoding == encoding
    assert (profile.correction > 1) is correction_above_one


def test_a_bedrock_claude_id_is_counted_as_anthropic_offline() -> None:
    bedrock = TokenCounter('bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0')
    direct = TokenCounter('anthropic:claude-3-5-sonnet-20241022')
    assert bedrock.tokenizer_profile == direct.tokenizer_profile
    assert bedrock.tokenizer_profile.name == 'anthropic'
    text = 'Bedrock serves Claude under an id whose last colon is a version.'
    assert bedrock.count_text(text) == direct.count_text(text) > 0
    assert not bedrock.offline  # the packaged encoding, no network


# ---- every part type ------------------------------------------------------------------------------------


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter('openai:gpt-4o')


def test_text_like_parts(counter: TokenCounter) -> None:
    text = 'The quick brown fox jumps over the lazy dog. ' * 7
    assert counter.count_part(SystemPromptPart(content=text)) == n(text)
    assert counter.count_part(UserPromptPart(content=text)) == n(text)
    assert counter.count_part(TextPart(content=text)) == n(text)
    assert counter.count_part(ThinkingPart(content=text, signature='sig')) == n(text)


def test_tool_call_args_str_and_dict_count_the_same(counter: TokenCounter) -> None:
    args = {'city': 'Zürich', 'days': [1, 2, 3], 'nested': {'unit': 'celsius'}}
    as_dict = ToolCallPart(tool_name='get_weather', args=args, tool_call_id='c1')
    as_str = ToolCallPart(tool_name='get_weather', args=compact_json(args), tool_call_id='c1')
    overhead = counter.tokenizer_profile.tool_call_overhead
    expected = overhead + n('get_weather') + n(compact_json(args))
    assert counter.count_part(as_dict) == counter.count_part(as_str) == expected
    assert counter.count_part(ToolCallPart(tool_name='noop', args=None, tool_call_id='c2')) == overhead + n(
        'noop'
    )


@pytest.mark.parametrize(
    'content',
    [
        'plain text result',
        {'status': 'ok', 'rows': [{'id': 1, 'name': 'Ada'}, {'id': 2, 'name': 'Grace'}]},
        [1, 'two', {'three': 3}],
    ],
    ids=['str', 'dict', 'list'],
)
def test_tool_return_content(counter: TokenCounter, content: Any) -> None:
    part = ToolReturnPart(tool_name='query', content=content, tool_call_id='c1')
    body = content if isinstance(content, str) else compact_json(content)
    assert counter.count_part(part) == counter.tokenizer_profile.tool_call_overhead + n('query') + n(body)


def test_tool_return_multimodal(counter: TokenCounter, fixtures_dir: Path) -> None:
    png = (fixtures_dir / 'images/large/astronaut.png').read_bytes()
    content = ['here is the picture', BinaryContent(data=png, media_type='image/png')]
    part = ToolReturnPart(tool_name='camera', content=content, tool_call_id='c1')
    expected = (
        counter.tokenizer_profile.tool_call_overhead
        + n('camera')
        + n('here is the picture')
        + image_tokens(512, 512, 'openai')
    )
    assert counter.count_part(part) == expected


def test_user_prompt_with_images_and_documents(counter: TokenCounter, fixtures_dir: Path) -> None:
    from pdfminer.pdfpage import PDFPage

    jpg = (fixtures_dir / 'images/large/portrait_8.jpg').read_bytes()
    pdf_path = fixtures_dir / 'documents/REPAIR-2022-INV-001_multipage.pdf'
    with pdf_path.open('rb') as fh:
        pages = sum(1 for _ in PDFPage.get_pages(fh))
    assert pages > 1
    text_doc = 'name: test\nversion: 1.0.0\n'
    part = UserPromptPart(
        content=[
            'Compare these.',
            BinaryContent(data=jpg, media_type='image/jpeg'),
            BinaryContent(data=pdf_path.read_bytes(), media_type='application/pdf'),
            BinaryContent(data=text_doc.encode(), media_type='text/plain'),
            ImageUrl(url='https://example.com/remote.png'),
        ]
    )
    profile = counter.tokenizer_profile
    expected = (
        n('Compare these.')
        + image_tokens(600, 450, 'openai')
        + profile.pdf_tokens_per_page * pages
        + n(text_doc)
        + image_tokens(1024, 1024, 'openai')  # documented assumption for a remote image we do not fetch
    )
    assert counter.count_part(part) == expected


@pytest.mark.filterwarnings('ignore::UserWarning')
def test_retry_prompt_str_and_list(counter: TokenCounter) -> None:
    overhead = counter.tokenizer_profile.tool_call_overhead
    as_str = RetryPromptPart(content='city must be a real city', tool_name='get_weather', tool_call_id='c1')
    assert counter.count_part(as_str) == overhead + n(as_str.model_response())
    errors: list[Any] = [
        {'type': 'missing', 'loc': ('city',), 'msg': 'Field required', 'input': {}},
        {'type': 'int_parsing', 'loc': ('days',), 'msg': 'Input should be a valid integer', 'input': 'x'},
    ]
    as_list = RetryPromptPart(content=errors, tool_name='get_weather', tool_call_id='c1')
    assert 'Field required' in as_list.model_response()
    assert counter.count_part(as_list) == overhead + n(as_list.model_response())


@pytest.mark.skipif(
    _compat.RETRY_FEEDBACK_PART is None, reason='RetryFeedbackPart exists on pydantic-ai 2.x only'
)
def test_retry_feedback_part(counter: TokenCounter) -> None:
    from pydantic_ai.messages import RetryFeedbackPart, RetryInfo

    part = RetryFeedbackPart(content='Please answer with a number.', retry=RetryInfo('validation_error'))
    assert counter.count_part(part) == counter.tokenizer_profile.tool_call_overhead + n(part.model_response())


def test_native_tool_parts(counter: TokenCounter) -> None:
    call_cls, return_cls = _compat.NATIVE_TOOL_CALL_PARTS[0], _compat.NATIVE_TOOL_RETURN_PARTS[0]
    args = {'query': 'weather in Paris'}
    call = call_cls(tool_name='web_search', args=args, tool_call_id='ws1')
    ret = return_cls(
        tool_name='web_search', content=[{'title': 'Paris weather', 'url': 'https://x'}], tool_call_id='ws1'
    )
    overhead = counter.tokenizer_profile.tool_call_overhead
    assert counter.count_part(call) == overhead + n('web_search') + n(compact_json(args))
    assert counter.count_part(ret) == overhead + n('web_search') + n(compact_json(ret.content))


@pytest.mark.skipif(_compat.COMPACTION_PART is None, reason='CompactionPart is absent on pydantic-ai 1.0')
def test_compaction_part(counter: TokenCounter) -> None:
    summary = 'Summary: the user asked for flights from SFO to JFK; two options were found.'
    assert counter.count_part(_compat.COMPACTION_PART(content=summary)) == n(summary)
    assert counter.count_part(_compat.COMPACTION_PART(content=None)) == 0
    request = ModelRequest(parts=[_compat.COMPACTION_PART(content=summary)])
    assert counter.count_message(request) == n(summary) + counter.tokenizer_profile.message_overhead


@pytest.mark.skipif(_compat.FILE_PART is None, reason='FilePart is absent on pydantic-ai 1.0')
def test_file_part(counter: TokenCounter, fixtures_dir: Path) -> None:
    png = (fixtures_dir / 'images/large/page.png').read_bytes()
    part = _compat.FILE_PART(content=BinaryContent(data=png, media_type='image/png'))
    assert counter.count_part(part) == image_tokens(384, 191, 'openai')


def test_bookkeeping_parts_cost_nothing(counter: TokenCounter) -> None:
    """A capability load is never sent (pydantic-ai drops it before the model): it costs nothing."""
    import pydantic_ai.messages as m

    if not hasattr(m, 'CapabilityLoadDeltaPart'):
        pytest.skip('this pydantic-ai has no bookkeeping parts (on-demand capabilities are 2.x only)')
    part = m.CapabilityLoadDeltaPart(loaded=['weather'])
    assert counter.count_part(part) == 0
    # not a wire message either: a request of bookkeeping only costs nothing, beside text it adds nothing
    assert counter.count_message(ModelRequest(parts=[part])) == 0
    with_text = ModelRequest(parts=[UserPromptPart(content='hello there'), part])
    assert counter.count_message(with_text) == n('hello there') + counter.tokenizer_profile.message_overhead


def test_a_tool_availability_change_costs_its_announcement(counter: TokenCounter) -> None:
    """Providers without a native channel for it (all of 2.68's provider models) receive a tool-availability
    change as a system-voice announcement naming the tools, a message of its own."""
    import pydantic_ai.messages as m

    if not hasattr(m, 'ToolAvailabilityDeltaPart'):
        pytest.skip('this pydantic-ai has no tool-availability changes (2.x only)')
    from pydantic_ai.models import TOOL_AVAILABILITY_ANNOUNCEMENT

    part = m.ToolAvailabilityDeltaPart(tools_added=['search', 'get_weather'])
    announced = TOOL_AVAILABILITY_ANNOUNCEMENT.format(names='`search`, `get_weather`')
    assert counter.count_part(part) == n(announced) > 0
    overhead = counter.tokenizer_profile.message_overhead
    assert counter.count_message(ModelRequest(parts=[part])) == n(announced) + overhead
    # a change that adds nothing is dropped before the model: no text
    assert counter.count_part(m.ToolAvailabilityDeltaPart(tools_added=[])) == 0


# ---- images and documents ----------------------------------------------------------------------------


def test_image_size_reads_every_real_image(fixtures_dir: Path) -> None:
    from PIL import Image

    paths = [
        p
        for p in sorted((fixtures_dir / 'images').glob('*/*'))
        if p.suffix.lower() != '.rst' and 'LICENSE' not in p.name
    ]
    seen = 0
    for path in paths:
        data = path.read_bytes()
        try:
            with Image.open(path) as image:
                real = image.size
        except Exception:
            real = None
        assert image_size(data) == real, path.name
        seen += real is not None
    assert seen >= 20


def test_image_tokens_match_provider_documentation() -> None:
    # OpenAI vision docs: 1024x1024 high detail = 765, 2048x4096 = 1105.
    assert image_tokens(1024, 1024, 'openai') == 765
    assert image_tokens(2048, 4096, 'openai') == 1105
    # Anthropic vision docs: tokens = w*h/750, 1092x1092 ~ 1590; larger images are resized to 1568 first.
    assert image_tokens(1092, 1092, 'anthropic') == math.ceil(1092 * 1092 / 750)
    assert image_tokens(3000, 3000, 'anthropic') == image_tokens(1568, 1568, 'anthropic')
    # Gemini docs: 258 when both sides <= 384, else 258 per 768x768 tile.
    assert image_tokens(384, 384, 'gemini') == 258
    assert image_tokens(1000, 800, 'gemini') == 258 * 2 * 2
    assert image_tokens(0, 10, 'openai') == 0


@pytest.mark.parametrize(
    'model', ['openai:gpt-4o', 'anthropic:claude-sonnet-4-5', 'google-gla:gemini-2.5-pro']
)
def test_real_large_image_priced_by_pixels_not_bytes(fixtures_dir: Path, model: str) -> None:
    data = (fixtures_dir / 'images/large/meadow_cube.jpg').read_bytes()  # 2.4 MB, 2048x12288
    counter = TokenCounter(model)
    profile = counter.tokenizer_profile
    part = UserPromptPart(content=[BinaryContent(data=data, media_type='image/jpeg')])
    assert counter.count_part(part) == math.ceil(
        image_tokens(2048, 12288, profile.image_formula) * profile.correction
    )
    assert counter.count_part(part) < len(data) / 100


def test_decompression_bomb_is_not_decoded(fixtures_dir: Path) -> None:
    data = (fixtures_dir / 'images/pillow/decompression_bomb.gif').read_bytes()
    counter = TokenCounter('openai:gpt-4o')
    gc.collect()
    tracemalloc.start()
    try:
        size = image_size(data)
        count = counter.count_part(UserPromptPart(content=[BinaryContent(data=data, media_type='image/gif')]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size is None  # Pillow refuses the header; nothing was decoded
    assert count == image_tokens(1024, 1024, 'openai')  # unknown size: the documented default
    assert peak < 2_000_000  # the 4.3-gigapixel canvas would need gigabytes


def test_pdf_pages_counted(fixtures_dir: Path) -> None:
    from pdfminer.pdfpage import PDFPage

    counter = TokenCounter('openai:gpt-4o')
    for path in sorted((fixtures_dir / 'documents').glob('*.pdf')):
        with path.open('rb') as fh:
            pages = sum(1 for _ in PDFPage.get_pages(fh))
        part = UserPromptPart(content=[BinaryContent(data=path.read_bytes(), media_type='application/pdf')])
        assert counter.count_part(part) == counter.tokenizer_profile.pdf_tokens_per_page * pages, path.name


# ---- tool definitions and instructions --------------------------------------------------------------


def test_tool_definitions_and_instructions_overhead() -> None:
    from pydantic_ai.tools import ToolDefinition

    counter = TokenCounter('openai:gpt-4o')
    profile = counter.tokenizer_profile
    schema = {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}
    tool = ToolDefinition(
        name='get_weather', description='Weather for a city.', parameters_json_schema=schema
    )
    expected_tools = (
        profile.tool_definition_overhead
        + n('get_weather')
        + n('Weather for a city.')
        + n(compact_json(schema))
    ) + profile.tools_overhead
    assert counter.count_tool_definitions([tool]) == expected_tools
    assert counter.count_tool_definitions([]) == 0
    request = ModelRequest(parts=[UserPromptPart(content='hi')], instructions='Be brief.')
    estimate = counter.estimate([request], tool_definitions=[tool])
    assert (
        estimate.overhead
        == profile.reply_overhead + profile.message_overhead + n('Be brief.') + expected_tools
    )
    assert estimate.total == estimate.tokenizer + estimate.overhead


# ---- anchoring ----------------------------------------------------------------------------------------


def _turn(prompt: str, answer: str, input_tokens: int) -> tuple[ModelRequest, ModelResponse]:
    return (
        ModelRequest(parts=[UserPromptPart(content=prompt)]),
        ModelResponse(
            parts=[TextPart(content=answer)], usage=RequestUsage(input_tokens=input_tokens, output_tokens=5)
        ),
    )


def test_anchor_used_only_when_prefix_was_marked_sent() -> None:
    counter = TokenCounter('openai:gpt-4o')
    request, _ = _turn('What is the capital of France?', '', 0)
    sent = [request]
    tokenizer_count = counter.count_messages(sent)
    provider_count = tokenizer_count + 900  # instructions and tool definitions the provider also counted
    response = ModelResponse(
        parts=[TextPart(content='Paris.')], usage=RequestUsage(input_tokens=provider_count)
    )
    follow_up = ModelRequest(parts=[UserPromptPart(content='And of Italy?')])
    history = [request, response, follow_up]

    unverified = counter.estimate(history)
    assert not unverified.anchor_verified
    assert unverified.anchor_index == 1
    assert unverified.total == unverified.tokenizer + counter.tokenizer_profile.reply_overhead

    counter.mark_sent(sent)
    verified = counter.estimate(history)
    assert verified.anchor_verified
    assert verified.anchor_input_tokens == provider_count
    assert verified.overhead == 900  # learned: what the provider counted beyond our messages
    assert verified.total == provider_count + counter.count_message(response) + counter.count_message(
        follow_up
    )

    # the learned overhead now applies to histories that cannot be anchored
    other = [ModelRequest(parts=[UserPromptPart(content='unrelated question')])]
    assert counter.estimate(other).total == counter.count_messages(other) + 900


def test_anchor_never_below_tokenizer_count() -> None:
    counter = TokenCounter('openai:gpt-4o')
    request = ModelRequest(parts=[UserPromptPart(content='word ' * 2_000)])
    counter.mark_sent([request])
    response = ModelResponse(
        parts=[TextPart(content='ok')], usage=RequestUsage(input_tokens=10)
    )  # a bogus low usage
    current = ModelRequest(parts=[UserPromptPart(content='next')])
    estimate = counter.estimate([request, response, current])
    assert estimate.anchor_verified
    assert estimate.total >= estimate.tokenizer
    assert estimate.overhead == 0


def test_anchor_needs_the_same_objects_not_equal_ones() -> None:
    counter = TokenCounter('openai:gpt-4o')
    request = ModelRequest(parts=[UserPromptPart(content='hello')])
    counter.mark_sent([request])
    copy = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json([request]))[0]
    response = ModelResponse(parts=[TextPart(content='hi')], usage=RequestUsage(input_tokens=5_000))
    assert not counter.estimate(
        [copy, response, ModelRequest(parts=[UserPromptPart(content='x')])]
    ).anchor_verified


def test_reload_of_uncompacted_history_is_not_measured_by_compacted_usage(fixtures_dir: Path) -> None:
    """The harness bug: an app compacts, sends, then reloads its full stored history with the latest usage."""
    full = conversations(fixtures_dir)['tau_bench_airline_task2_trial1.json']
    counter = TokenCounter('openai:gpt-4o')
    # what the processor sent: the first request (system prompt + task) and the current request only
    compacted = [full[0], full[-1]]
    counter.mark_sent(compacted)
    small_usage = counter.count_messages(compacted) + 50
    response = ModelResponse(parts=[TextPart(content='Done.')], usage=RequestUsage(input_tokens=small_usage))
    new_request = ModelRequest(parts=[UserPromptPart(content='Thanks, anything else?')])

    # the app stored new_messages() only and reloads everything, uncompacted, from JSON
    reloaded = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json([*full, response, new_request])
    )
    estimate = counter.estimate(reloaded)
    uncompacted = counter.count_messages(reloaded)
    assert not estimate.anchor_verified
    assert estimate.total >= uncompacted
    assert uncompacted > 5 * small_usage  # the usage would have undercounted it badly

    # even the same objects, in a larger list, do not verify the anchor
    in_memory = [*full, response, new_request]
    assert counter.estimate(in_memory).total >= counter.count_messages(in_memory)
    assert not counter.estimate(in_memory).anchor_verified


# ---- memoization --------------------------------------------------------------------------------------


class _Spy:
    def __init__(self, counter: TokenCounter) -> None:
        counter.count_text('warm up')  # load the encoder
        self.inner = counter._encode
        self.texts: list[str] = []
        counter._encode = self

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        assert self.inner is not None
        return self.inner(text)


def test_grown_history_counts_only_the_new_message(fixtures_dir: Path) -> None:
    messages = conversations(fixtures_dir)['swe_gym_openhands_getmoto__moto-6387_0.json']
    counter = TokenCounter('openai:gpt-4o')
    counter.estimate(messages[:-1])
    spy = _Spy(counter)
    new = messages[-1]
    counter.estimate(messages)
    counter.count_messages(messages)
    new_texts = {t for t in _texts_of(new) if t}
    assert spy.texts
    assert set(spy.texts) <= new_texts
    spy.texts.clear()
    counter.estimate(messages)
    assert spy.texts == []


def test_reloaded_history_hits_the_text_memo(fixtures_dir: Path) -> None:
    messages = conversations(fixtures_dir)['tau_bench_airline_task33_trial0.json']
    counter = TokenCounter('openai:gpt-4o')
    before = counter.count_messages(messages)
    spy = _Spy(counter)
    reloaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))
    assert reloaded[0] is not messages[0]
    assert counter.count_messages(reloaded) == before
    assert spy.texts == []


def _texts_of(message: ModelMessage) -> list[str]:
    out: list[str] = []
    for part in message.parts:
        for attr in ('content', 'tool_name', 'args'):
            value = getattr(part, attr, None)
            if isinstance(value, str):
                out.append(value)
    return out


def test_identity_memo_does_not_keep_messages_alive() -> None:
    counter = TokenCounter('openai:gpt-4o')
    message = ModelRequest(parts=[UserPromptPart(content='short lived')])
    counter.count_message(message)
    assert len(counter._message_memo) == 1
    del message
    gc.collect()
    counter._message_memo.sweep()


def test_identity_memo_sweeps_dead_entries_as_it_grows() -> None:
    counter = TokenCounter('openai:gpt-4o')
    for i in range(20_000):
        counter.count_message(ModelRequest(parts=[UserPromptPart(content=f'short lived {i % 7}')]))
    assert len(counter._message_memo) <= 8_192  # swept whenever it doubles; none of them is alive


def test_truncate_text_fits_and_keeps_head_and_tail() -> None:
    counter = TokenCounter('openai:gpt-4o')
    text = SRC.read_text()
    cut = counter.truncate_text(text, 500)
    assert counter.count_text(cut) <= 500
    assert cut.startswith(text[:100])
    assert cut.endswith(text[-50:])
    assert 'tokens omitted' in cut
    assert counter.truncate_text('short', 500) == 'short'


# ---- offline fallback -------------------------------------------------------------------------------

CHINESE = (
    '人工智能助手在长时间的对话中会积累大量的消息记录。当历史记录超过模型的上下文窗口时，'
    '我们需要在不破坏工具调用配对的前提下压缩旧的消息，同时保留系统提示和用户的第一条消息。'
    '北京的天气今天晴朗，最高气温二十八摄氏度，适合外出散步。请把会议纪要整理成表格，并标出每个负责人的截止日期。'
)


@pytest.fixture
def no_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> Any:
        raise ConnectionError(f'no network to download {name}')

    # neither the packaged file nor tiktoken's download or cache
    monkeypatch.setattr(encodings_module, '_loaded', {})
    monkeypatch.setattr(encodings_module, 'packaged_encoding', refuse)
    monkeypatch.setattr(tiktoken, 'get_encoding', refuse)
    monkeypatch.setattr(tokens_module, '_offline_warned', set())


@pytest.mark.usefixtures('no_tiktoken')
def test_offline_counts_warn_once_and_never_raise(
    caplog: pytest.LogCaptureFixture, fixtures_dir: Path
) -> None:
    messages = conversations(fixtures_dir)['swe_agent_function_calling_simple.json']
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history.tokens'):
        first = TokenCounter('openai:gpt-4o')
        second = TokenCounter('openai:gpt-4o-mini')
        assert first.offline
        total = first.estimate(messages).total
        assert second.count_messages(messages) > 0
    warnings = [r for r in caplog.records if 'could not be loaded' in r.getMessage()]
    assert len(warnings) == 1
    assert total >= 0.9 * sum(expected_openai_message(m) for m in messages)


@pytest.mark.usefixtures('no_tiktoken')
def test_offline_does_not_undercount_chinese_or_code() -> None:
    counter = TokenCounter('openai:gpt-4o')
    code = SRC.read_text()
    assert counter.count_text(CHINESE) == estimate_tokens_offline(CHINESE)
    assert counter.count_text(CHINESE) >= 0.9 * n(CHINESE)
    assert counter.count_text(code) >= 0.9 * n(code)
    assert counter.count_text(CHINESE) >= 2 * len(CHINESE) / 4  # chars/4 would undercount badly


def test_offline_in_a_fresh_process_with_an_empty_cache(tmp_path: Path, fixtures_dir: Path) -> None:
    """Without the packaged files (a damaged install), no cache and no network: one warning, estimates."""
    empty = tmp_path / 'empty-cache'
    empty.mkdir()
    env = {
        **os.environ,
        'TIKTOKEN_CACHE_DIR': str(empty),
        'HTTPS_PROXY': 'http://127.0.0.1:9',
        'HTTP_PROXY': 'http://127.0.0.1:9',
    }
    env.pop('NO_PROXY', None)
    env.pop('no_proxy', None)
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        import pydantic_ai_history.tokens._encodings
        from pydantic_ai_history.tokens import TokenCounter
        pydantic_ai_history.tokens._encodings.PACKAGED.clear()
        path = Path({str(fixtures_dir / 'conversations/tau_bench_airline_task9_trial0.json')!r})
        messages = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
        counter = TokenCounter('openai:gpt-4o')
        again = TokenCounter('gpt-4o').count_messages(messages)
        print(counter.estimate(messages).total, counter.offline, again)
        """
    )
    result = subprocess.run(
        [sys.executable, '-c', script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    total, offline, again = result.stdout.split()
    assert offline == 'True'
    assert result.stderr.count('could not be loaded') == 1
    messages = conversations(fixtures_dir)['tau_bench_airline_task9_trial0.json']
    assert int(total) >= 0.9 * sum(expected_openai_message(m) for m in messages)
    assert int(again) > 0


def test_estimate_tokens_offline_edge_cases() -> None:
    assert estimate_tokens_offline('') == 0
    assert estimate_tokens_offline('abc') == 1
    assert estimate_tokens_offline('日本語') == 3


def test_timestamps_do_not_matter() -> None:
    counter = TokenCounter('openai:gpt-4o')
    a = ModelRequest(
        parts=[UserPromptPart(content='same', timestamp=datetime(2020, 1, 1, tzinfo=timezone.utc))]
    )
    b = ModelRequest(
        parts=[UserPromptPart(content='same', timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc))]
    )
    assert counter.count_message(a) == counter.count_message(b)


def test_tool_definitions_are_a_floor_under_the_learned_overhead() -> None:
    """The overhead learned from one agent's usage must not hide another request's many tools."""
    from pydantic_ai.tools import ToolDefinition

    counter = TokenCounter('openai:gpt-4o')
    first = ModelRequest(parts=[UserPromptPart(content='hello')])
    counter.mark_sent([first])
    answered = ModelResponse(
        parts=[TextPart(content='hi')], usage=RequestUsage(input_tokens=12, output_tokens=2)
    )
    counter.estimate([first, answered])  # learns a tiny overhead: that agent had no tools
    tools = [
        ToolDefinition(
            name=f'tool_{i}',
            description='Looks a record up by its identifier and returns every field of it. ' * 8,
            parameters_json_schema={'type': 'object', 'properties': {'record_id': {'type': 'string'}}},
        )
        for i in range(30)
    ]
    other = [ModelRequest(parts=[UserPromptPart(content='look up record 7')])]
    estimate = counter.estimate(other, tool_definitions=tools)
    assert estimate.total >= estimate.tokenizer + counter.count_tool_definitions(tools)
    assert counter.count_tool_definitions(tools) > 30 * 100


def test_interleaved_conversations_keep_their_own_shared_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs on one counter alternate: each still only looks up the messages it added."""
    counter = TokenCounter('openai:gpt-4o')

    def conversation(tag: str, turns: int) -> list[Any]:
        messages: list[Any] = [ModelRequest(parts=[UserPromptPart(content=f'{tag} task')])]
        for i in range(turns):
            messages.append(ModelResponse(parts=[TextPart(content=f'{tag} answer {i}')]))
            messages.append(ModelRequest(parts=[UserPromptPart(content=f'{tag} question {i}')]))
        return messages

    a, b = conversation('a', 20), conversation('b', 20)
    counter.estimate(a)
    counter.estimate(b)
    looked_up: list[Any] = []
    real = counter.count_message
    monkeypatch.setattr(counter, 'count_message', lambda m: looked_up.append(m) or real(m))
    grown_a = [
        *a,
        ModelResponse(parts=[TextPart(content='a more')]),
        ModelRequest(parts=[UserPromptPart('a next')]),
    ]
    counter.estimate(grown_a)
    assert looked_up == grown_a[-2:]
    looked_up.clear()
    grown_b = [*b, ModelResponse(parts=[TextPart(content='b more')])]
    counter.estimate(grown_b)
    assert looked_up == grown_b[-1:]


# ---- running counts: what a request costs is what is new -------------------------------------------------


def _grow(history: list[Any], tag: str, usage: int = 0) -> list[Any]:
    response = ModelResponse(
        parts=[TextPart(content=f'answer {tag}')], usage=RequestUsage(input_tokens=usage, output_tokens=3)
    )
    return [*history, response, ModelRequest(parts=[UserPromptPart(content=f'question {tag}')])]


def _looked_up(counter: TokenCounter, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    looked_up: list[Any] = []
    real = counter.count_message
    monkeypatch.setattr(counter, 'count_message', lambda m: looked_up.append(m) or real(m))
    return looked_up


def _fresh(messages: list[Any]) -> tuple[int, ...]:
    counter = TokenCounter('openai:gpt-4o')
    return tuple(counter.count_message(m) for m in messages)


def test_a_retried_last_request_recounts_only_itself_and_old_estimates_stand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = TokenCounter('openai:gpt-4o')
    base = _grow([ModelRequest(parts=[UserPromptPart(content='task')])], '0')
    first = counter.estimate([*base, ModelResponse(parts=[TextPart(content='a long first try ' * 50)])])
    looked_up = _looked_up(counter, monkeypatch)
    retry = [*base, ModelResponse(parts=[TextPart(content='short')])]
    second = counter.estimate(retry)
    assert looked_up == [retry[-1]]
    assert second.per_message == _fresh(retry)
    assert second.tokenizer == sum(_fresh(retry))
    # the first estimate still describes its own history
    assert first.per_message[-1] > second.per_message[-1]
    assert first.tokenizer == sum(first.per_message) > second.tokenizer
    assert counter.estimate(base).per_message == _fresh(base)  # a prefix: nothing recounted
    assert looked_up == [retry[-1]]


def test_compaction_starts_a_new_branch_and_forgets_what_was_sent_beyond_it() -> None:
    counter = TokenCounter('openai:gpt-4o')
    history = [ModelRequest(parts=[UserPromptPart(content='task')])]
    for i in range(6):
        history = _grow(history, str(i), usage=100 + i)
        counter.estimate(history)
        counter.mark_sent(history)
    assert counter.estimate(_grow(history, 'x', usage=500)).anchor_verified
    summary = ModelRequest(parts=[UserPromptPart(content='summary of what came before')])
    compacted = [history[0], summary, *history[-3:]]
    estimate = counter.estimate(compacted)
    assert estimate.per_message == _fresh(compacted)
    assert estimate.anchor_index == 3
    assert not estimate.anchor_verified  # history[-3:] were sent, but after other messages
    counter.mark_sent(compacted)
    grown = _grow(compacted, 'y', usage=300)
    assert counter.estimate(grown).anchor_verified
    # the uncompacted branch is still known: a reload of it recounts nothing
    assert counter.estimate(_grow(history, 'x', usage=500)).anchor_verified


def test_equal_copies_share_counts_but_identity_decides_the_conversation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = TokenCounter('openai:gpt-4o')
    history = _grow([ModelRequest(parts=[UserPromptPart(content='task')])], '0')
    counter.estimate(history)
    counter.mark_sent(history)
    looked_up = _looked_up(counter, monkeypatch)
    copies = ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(history[1:]))
    same_start = [history[0], *copies]
    assert counter.estimate(same_start).per_message == _fresh(history)
    assert looked_up == []  # equal to the known branch: one comparison, no lookups


@pytest.mark.parametrize('release', [False, True])
def test_running_counts_match_a_fresh_count_through_any_sequence_of_changes(release: bool) -> None:
    """Appends, retries, compactions, forks, edits and reloads in random order (with `release`: runs ending
    between them, older histories let go of): every estimate equals a fresh count, and the anchor is trusted
    exactly when that very prefix was marked sent."""
    import random

    rng = random.Random(1234)
    counter = TokenCounter('openai:gpt-4o')
    start = ModelRequest(parts=[UserPromptPart(content='task')])
    histories: list[list[Any]] = [[start]]
    sent: list[list[weakref.ReferenceType[Any]]] = []  # held weakly: a released history may be freed
    for step in range(300):
        base = rng.choice(histories)
        action = rng.random()
        if action < 0.5:
            history = _grow(base, str(step), usage=rng.choice([0, 50 + step]))
        elif action < 0.65:
            history = [*base[:-1], ModelRequest(parts=[UserPromptPart(content=f'retry {step}')])]
        elif action < 0.8 and len(base) > 3:
            cut = rng.randrange(1, len(base) - 1)
            history = [base[0], ModelRequest(parts=[UserPromptPart(content=f'summary {step}')]), *base[cut:]]
        elif action < 0.9:
            history = base[: rng.randrange(1, len(base) + 1)]
        elif action < 0.95:  # the same length, one message in the middle edited (another list, as a hook has)
            edit = rng.randrange(len(base))
            edited = ModelRequest(parts=[UserPromptPart(content=f'edited {step}')])
            history = [*base[:edit], edited, *base[edit + 1 :]]
        else:
            history = list(base)
        estimate = counter.estimate(history)
        assert estimate.per_message == _fresh(history)
        assert estimate.tokenizer == sum(_fresh(history))
        if estimate.anchor_index is not None:
            prefix = history[: estimate.anchor_index]
            was_sent = any(
                len(s) == len(prefix) and all(r() is m for r, m in zip(s, prefix, strict=True)) for s in sent
            )
            # a branch may have been dropped (bounded memory): then the anchor is merely not trusted
            assert not estimate.anchor_verified or was_sent
        if rng.random() < 0.5:
            counter.mark_sent(history)
            sent.append([weakref.ref(m) for m in history])
        histories = [*histories[-5:], history]
        if release and rng.random() < 0.2:
            counter.release(keep=rng.randrange(2))


def test_a_released_history_the_app_holds_continues_without_a_recount(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = TokenCounter('openai:gpt-4o')
    history = [ModelRequest(parts=[UserPromptPart(content='task')])]
    for i in range(5):
        history = _grow(history, str(i), usage=100 + i)
    counter.mark_sent(history[:-2])  # the request its last response answered
    counter.estimate(history)
    counter.release()
    assert all(not b.messages for branches in counter._running._slots.values() for b in branches)
    looked_up = _looked_up(counter, monkeypatch)
    grown = _grow(history, 'next')
    estimate = counter.estimate(grown)
    assert looked_up == grown[-2:]  # only the new messages
    assert estimate.per_message == _fresh(grown)
    assert estimate.anchor_verified


def test_a_released_history_the_app_let_go_of_is_freed_and_a_reload_counted_afresh() -> None:
    import gc
    import weakref

    counter = TokenCounter('openai:gpt-4o')
    history = [ModelRequest(parts=[UserPromptPart(content='task')])]
    for i in range(5):
        history = _grow(history, str(i), usage=100 + i)
    counter.mark_sent(history[:-2])
    counter.estimate(history)
    assert counter.estimate(history).anchor_verified
    stored = ModelMessagesTypeAdapter.dump_json(history)
    counter.release()
    gone = weakref.ref(history[3])
    del history
    gc.collect()
    assert gone() is None  # the counter held none of its messages
    counter.release()  # the parked conversation, whose first message is gone, goes too
    assert not counter._running._slots
    reloaded = ModelMessagesTypeAdapter.validate_json(stored)
    estimate = counter.estimate(reloaded)
    assert estimate.per_message == _fresh(reloaded)
    assert not estimate.anchor_verified  # what was sent is no longer known


def test_running_counts_hold_a_bounded_number_of_messages() -> None:
    counter = TokenCounter('openai:gpt-4o')
    counter._running.max_messages = 50
    for i in range(10):
        history = [ModelRequest(parts=[UserPromptPart(content=f'conversation {i}')])]
        for j in range(10):
            history = _grow(history, f'{i}-{j}')
        counter.estimate(history)
    held = sum(len(b.messages) for branches in counter._running._slots.values() for b in branches)
    assert held <= 50 + 21  # the current conversation is always kept


def test_a_history_compacted_away_is_released_after_a_few_requests() -> None:
    import weakref

    counter = TokenCounter('openai:gpt-4o')
    history = [ModelRequest(parts=[UserPromptPart(content='task')])]
    for i in range(5):
        history = _grow(history, str(i))
    counter.estimate(history)
    evicted = weakref.ref(history[3])
    compacted = [history[0], ModelRequest(parts=[UserPromptPart(content='summary')]), *history[-1:]]
    history = compacted
    counter.estimate(history)
    for i in range(6):
        history = _grow(history, f'after {i}')
        counter.estimate(history)
        counter.mark_sent(history)
    del compacted
    gc.collect()
    assert evicted() is None


@pytest.mark.parametrize('tokenizer', ['tiktoken', 'offline'])
@pytest.mark.parametrize(
    'text', [CHINESE * 40, 'emoji 🧪🔬 and ascii ' * 300, 'x'], ids=['cjk', 'emoji', 'tiny']
)
def test_split_text_loses_nothing_and_every_piece_fits(
    text: str, tokenizer: str, request: pytest.FixtureRequest
) -> None:
    if tokenizer == 'offline':
        request.getfixturevalue('no_tiktoken')
    counter = TokenCounter('openai:gpt-4o')
    assert counter.offline == (tokenizer == 'offline')
    pieces = counter.split_text(text, 100)
    assert ''.join(pieces) == text
    assert all(counter.count_text(p) <= 100 for p in pieces)
    if counter.count_text(text) > 100:
        assert len(pieces) > 1


@pytest.mark.slow
def test_image_dimensions_kept_per_counter_are_bounded(counter: TokenCounter) -> None:
    """A long-lived counter sees an unbounded stream of distinct images: what it remembers of them is bounded,
    and every one is still priced by its own size."""
    import io

    from PIL import Image

    def png(width: int, height: int) -> bytes:
        out = io.BytesIO()
        Image.new('RGB', (width, height)).save(out, format='PNG')
        return out.getvalue()

    sizes = [(64 + n % 1000, 64 + n // 1000) for n in range(tokens_module._IMAGE_MEMO_SIZE + 500)]
    for width, height in sizes:
        part = UserPromptPart(content=[BinaryContent(data=png(width, height), media_type='image/png')])
        assert counter.count_part(part) == image_tokens(width, height, 'openai')
    assert len(counter._image_memo) <= tokens_module._IMAGE_MEMO_SIZE
