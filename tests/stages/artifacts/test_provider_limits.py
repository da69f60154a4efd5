"""What the serving provider accepts passes unchanged while the history fits; the conservative limits are for
providers nobody documented; a small plain-text file never becomes a manifest."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image
from pydantic_ai.messages import BinaryContent, ModelRequest, UserPromptPart

from pydantic_ai_history import ContextPolicy, FileSettings, HistoryProcessor, assert_valid_history
from pydantic_ai_history.files._provider_limits import (
    CONSERVATIVE_LIMITS,
    NO_LIMIT,
    PROVIDER_FILE_LIMITS,
    provider_file_limits,
)
from pydantic_ai_history.stages.artifacts import _stage
from pydantic_ai_history.stages.artifacts._accepted import fits_as_is, strictest_file_model
from pydantic_ai_history.tokens import image_size

pytestmark = pytest.mark.anyio

MARKER = '[pydantic-ai-history: artifact'


def _png(width: int, height: int, noisy_fraction: float) -> bytes:
    """A PNG whose size is set by how much of it is noise (noise does not compress)."""
    rng = random.Random(1)
    image = Image.new('RGB', (width, height), (200, 200, 200))
    rows = int(height * noisy_fraction)
    if rows:
        image.paste(Image.frombytes('RGB', (width, rows), rng.randbytes(width * rows * 3)), (0, 0))
    buffer = io.BytesIO()
    image.save(buffer, 'PNG')
    return buffer.getvalue()


@pytest.fixture(scope='module')
def three_mb_png() -> bytes:
    data = _png(1024, 1536, 0.62)
    assert 2 * 1024 * 1024 < len(data) < 3_750_000  # over the conservative 2 MiB, under every provider's
    return data


def _history(item: BinaryContent) -> list[ModelRequest]:
    return [ModelRequest(parts=[UserPromptPart(content=['What is in this file?', item])])]


def _processor(model: str) -> HistoryProcessor:
    return HistoryProcessor(model=model, policy=ContextPolicy(context_window=200_000), compaction=False)


@pytest.mark.parametrize(
    'model',
    [
        'anthropic:claude-sonnet-4-5',
        'openai:gpt-4.1',
        'google-gla:gemini-2.5-pro',
        'bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0',
    ],
)
async def test_an_image_the_provider_accepts_passes_unchanged_while_the_history_fits(
    model: str, three_mb_png: bytes
) -> None:
    history = _history(BinaryContent(data=three_mb_png, media_type='image/png'))
    out = await _processor(model).process(history)
    assert out is history  # the same objects: nothing rewritten


async def test_an_unknown_provider_gets_the_conservative_limits(three_mb_png: bytes) -> None:
    history = _history(BinaryContent(data=three_mb_png, media_type='image/png'))
    out = await _processor('mistral:pixtral-large-latest').process(history)
    assert_valid_history(out)
    _, image, note = out[0].parts[0].content  # type: ignore[misc]
    assert isinstance(image, BinaryContent)
    assert len(image.data) <= CONSERVATIVE_LIMITS.image_max_bytes
    assert note.startswith(MARKER)


async def test_an_image_over_the_providers_limit_is_fitted_to_that_limit() -> None:
    wide = _png(9_000, 120, 0.0)  # small in bytes, over Anthropic's and Bedrock's 8,000 px
    history = _history(BinaryContent(data=wide, media_type='image/png'))
    assert await _processor('openai:gpt-4.1').process(history) is history  # no pixel limit
    out = await _processor('anthropic:claude-sonnet-4-5').process(history)
    _, image, _ = out[0].parts[0].content  # type: ignore[misc]
    assert max(image_size(image.data) or (0, 0)) <= 8_000


def test_the_limits_table() -> None:
    assert provider_file_limits('anthropic:claude-sonnet-4-5').image_max_bytes == 3_932_160  # 5 MB base64
    assert provider_file_limits('bedrock:anthropic.claude-3-haiku').document_max_bytes == 4_500_000
    assert provider_file_limits('gateway/openai:gpt-4.1') is PROVIDER_FILE_LIMITS['openai']
    assert provider_file_limits('openai:gpt-4.1').image_max_dimension == NO_LIMIT
    assert provider_file_limits('groq:llama-4') is CONSERVATIVE_LIMITS
    assert provider_file_limits(None) is CONSERVATIVE_LIMITS
    assert provider_file_limits('function:my-test').image_max_bytes == NO_LIMIT  # a test model sends nothing
    # ... unless it stands in for a real model (the strict simulated provider's `gpt-4o`)
    assert provider_file_limits('function:gpt-4o') is PROVIDER_FILE_LIMITS['openai']
    # given limits win over the provider's
    given = FileSettings(image_max_bytes=1_000).for_model('openai:gpt-4.1')
    assert (given.image_max_bytes, given.image_max_dimension) == (1_000, NO_LIMIT)
    # documents: a 6 MB PDF is Anthropic's to take, not Bedrock's
    pdf = 6_000_000
    assert fits_as_is('application/pdf', pdf, FileSettings().for_model('anthropic:claude-sonnet-4-5'))
    assert not fits_as_is('application/pdf', pdf, FileSettings().for_model('bedrock:anthropic.claude'))


def test_a_fallback_over_two_providers_takes_the_stricter_limits() -> None:
    from pydantic_ai.models.fallback import FallbackModel
    from pydantic_ai.models.function import FunctionModel

    def model(name: str) -> FunctionModel:
        return FunctionModel(lambda messages, info: None, model_name=name)  # type: ignore[arg-type,return-value]

    chain = FallbackModel(model('openai:gpt-4.1'), model('bedrock:anthropic.claude-3-haiku'))
    assert strictest_file_model(chain) == 'bedrock:anthropic.claude-3-haiku'


async def test_a_tiny_text_file_stays_its_text_where_profiles_cannot_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1.x profiles have no file-input flags: the text is inlined as pydantic-ai frames text files, never a
    manifest, and nothing is stored."""
    monkeypatch.setattr(_stage, 'file_input_profile', lambda model: None)
    history = _history(BinaryContent(data=b'hello', media_type='text/plain', identifier='note.txt'))
    processor = _processor('anthropic:claude-sonnet-4-5')
    out = await processor.process(history)
    _, text = out[0].parts[0].content  # type: ignore[misc]
    assert text == (
        '-----BEGIN FILE id="note.txt" type="text/plain"-----\nhello\n-----END FILE id="note.txt"-----'
    )
    assert MARKER not in text
    assert_valid_history(out)


async def test_a_tiny_text_file_passes_unchanged_where_the_profile_says_the_model_reads_it() -> None:
    history = _history(BinaryContent(data=b'hello', media_type='text/plain'))
    out = await _processor('anthropic:claude-sonnet-4-5').process(history)
    if _stage.file_input_profile('anthropic:claude-sonnet-4-5') is None:
        pytest.skip('this pydantic-ai has no file-input flags in its profiles')
    assert out is history


async def test_pydantic_ais_test_models_take_every_file_as_it_is(
    monkeypatch: pytest.MonkeyPatch, three_mb_png: bytes
) -> None:
    """An app's tests with `TestModel` or a `FunctionModel` see exactly what the app sent (profile flags or
    not), while the history fits."""
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.test import TestModel

    monkeypatch.setattr(_stage, 'file_input_profile', lambda model: None)  # 1.x: no flags either
    history = _history(BinaryContent(data=b'hello', media_type='text/plain'))
    history[0].parts[0].content.append(BinaryContent(data=three_mb_png, media_type='image/png'))  # type: ignore[union-attr]
    for model in (TestModel(), FunctionModel(lambda messages, info: None)):  # type: ignore[arg-type,return-value]
        processor = HistoryProcessor(
            model=model, policy=ContextPolicy(context_window=200_000), compaction=False
        )
        assert await processor.process(history) is history
