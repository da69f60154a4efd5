"""The artifact stage's LLM calls and its repeated work: usage accounting, model settings, settled parts."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from _artifact_helpers import make_processor, marker, planner_model, tool_history, tool_returns
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, RunUsage

from _limits import artifact_limits
from pydantic_ai_history import SummarizerSettings, TokenCounter, assert_valid_history
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.context._context import HistoryContext
from pydantic_ai_history.events import StageFailed
from pydantic_ai_history.stages.artifacts import ArtifactPlanner, ArtifactSettings, _extract
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.anyio


def _summarize_all(ids: list[str], prompt: str) -> dict[str, Any]:
    return {
        'decisions': [
            {'artifact_id': i, 'strategy': 'summarize', 'priority': n, 'rationale': 'test'}
            for n, i in enumerate(ids)
        ],
        'reasoning': 'summarize everything',
    }


async def test_planner_and_summarizer_usage_is_added_to_the_run_usage_without_warnings(
    fixtures_dir: Path,
) -> None:
    """Both sub-calls' usage reaches the run's `RunUsage`; on 2.x `result.usage()` warned and, inside a
    `suppress(Exception)`, the usage could be lost without a trace."""
    seen_settings: list[Any] = []

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen_settings.append(info.model_settings)
        return ModelResponse(
            parts=[TextPart('Summary: airports of the United States, by code, name and city.')],
            usage=RequestUsage(input_tokens=7_000, output_tokens=60),
        )

    content = (fixtures_dir / 'tool_outputs' / 'vega_datasets' / 'airports.csv').read_text()
    settings = ArtifactSettings(planner_model=planner_model(_summarize_all))
    usage = RunUsage()
    ctx = HistoryContext(
        counter=TokenCounter('gpt-4o'),
        limits=artifact_limits(16_000),
        summarizer=SummarizerSettings(
            model=FunctionModel(summarize, model_name='summarizer'),
            model_settings={'temperature': 0.0, 'max_tokens': 321},
        ),
        model='gpt-4o',
        cache=MemoryCache(),
        store=MemoryStore(),
        usage=usage,
    )
    history = tool_history('Where is Willow Run airport?', 'fetch', content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out = await ArtifactPlanner(settings)(history, ctx)
    assert_valid_history(out)
    assert marker(tool_returns(out)[0])['strategy'] == 'summarize'
    assert not [w for w in caught if 'usage' in str(w.message)], [str(w.message) for w in caught]
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (2, 7_500, 140)
    assert seen_settings
    assert seen_settings[0] is not None
    assert seen_settings[0].get('max_tokens') == 321, 'summarizer_settings reach the summary request'


def _small_rounds(count: int, start: int = 0) -> list[ModelMessage]:
    """Tool rounds with small returns (never reduced: under `large_artifact_chars`) of about 450 tokens."""
    note = 'the quick brown fox jumps over the lazy dog'
    rows = [{'id': i, 'name': f'item {i}', 'note': note} for i in range(20)]
    messages: list[ModelMessage] = []
    for i in range(start, start + count):
        messages.append(
            ModelResponse(
                parts=[ToolCallPart('lookup', {'page': i}, tool_call_id=f'c{i}')],
                usage=RequestUsage(input_tokens=100, output_tokens=10),
            )
        )
        messages.append(
            ModelRequest(parts=[ToolReturnPart('lookup', {'page': i, 'rows': rows}, tool_call_id=f'c{i}')])
        )
    return messages


async def test_tool_returns_that_can_never_be_reduced_are_not_examined_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over the hard limit with nothing reducible, each request reads only its own new tool returns."""
    built: list[str] = []
    original = _extract.tool_return_text

    def counting(part: ToolReturnPart) -> Any:
        built.append(part.tool_call_id)
        return original(part)

    monkeypatch.setattr(_extract, 'tool_return_text', counting)
    processor, recorder = make_processor(context_window=16_000)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Look everything up.')]),
        *_small_rounds(40),
    ]
    counter = processor.counter_for('gpt-4o')
    assert counter.count_messages(history) > ArtifactSettings().hard_limit(artifact_limits(16_000)), (
        'over the hard limit'
    )

    out = await processor.process(history)
    assert out == history, 'nothing is reducible'
    assert built == ['c39'], 'only the newest request is read: the older ones were decided when they came'
    for step in range(3):
        built.clear()
        later = [*out, *_small_rounds(1, start=40 + step)]
        out = await processor.process(later)
        assert_valid_history(out, original=later)
        assert out == later
        assert built == [f'c{40 + step}'], 'only the new tool return is examined'
    assert not [e for e in recorder.events if isinstance(e, StageFailed)]


async def test_an_older_return_stays_as_sent_when_the_history_no_longer_fits(fixtures_dir: Path) -> None:
    """A return kept whole when it arrived is not planned again when, later, messages before it are gone and
    the history no longer fits: older messages change only at a compaction event (or in the window), and the
    artifact stage fits the newest request, here a pasted user message, into the room there is."""
    products = json.loads((fixtures_dir / 'tool_outputs' / 'tau-bench_retail_products.json').read_text())
    processor, _ = make_processor(ArtifactSettings(max_artifact_tokens=None), context_window=64_000)
    first = await processor.process(
        [
            ModelRequest(parts=[UserPromptPart('List the products')]),
            *_small_rounds(20),
            ModelResponse(parts=[ToolCallPart('products', {}, tool_call_id='p')]),
            ModelRequest(parts=[ToolReturnPart('products', products, tool_call_id='p')]),
        ]
    )
    assert tool_returns(first)[-1].content is products, 'fits in full at first'
    pasted = 'the quick brown fox jumps over the lazy dog while the cat sleeps ' * 3_200  # ~41K tokens
    later = [
        ModelRequest(parts=[UserPromptPart('List the products')]),
        *first[5:],  # two rounds dropped: every later message moved
        ModelResponse(parts=[TextPart('Here they are.')]),
        ModelRequest(parts=[UserPromptPart(f'Which of these is also in this list? {pasted}')]),
    ]
    assert processor.counter_for('gpt-4o').count_messages(later) > ArtifactSettings().hard_limit(
        artifact_limits(64_000)
    )
    out = await processor.process(later)
    assert_valid_history(out)  # the user's own message is shortened (stored): the one change of its kind
    assert all(new is old for new, old in zip(out[:-1], later[:-1], strict=True))
    assert out[-1] is not later[-1], 'the pasted message is fitted into the room it has'


async def test_an_image_url_without_a_file_extension_goes_through(fixtures_dir: Path) -> None:
    """`ImageUrl.media_type` raises for a URL it cannot guess from; detection is by type, never by probing."""
    image = ImageUrl('https://cdn.example.com/i/abc123')
    shown = ImageUrl('https://cdn.example.com/i/def456')
    log = (fixtures_dir / 'tool_outputs' / 'vega_datasets' / 'airports.csv').read_text()
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(['What is in this picture?', image])]),
        ModelResponse(parts=[ToolCallPart('screenshot', {}, tool_call_id='s1')]),
        ModelRequest(parts=[ToolReturnPart('screenshot', [log, shown], tool_call_id='s1')]),
    ]
    processor, recorder = make_processor(context_window=16_000)
    out = await processor.process(history)
    assert not [e for e in recorder.events if isinstance(e, StageFailed)], recorder.events
    assert_valid_history(out)
    assert out[0] is history[0], 'a remote image is left for the provider'
    [part] = tool_returns(out)
    assert marker(part).get('strategy') in {'extract', 'exclude'}
    assert part.content[-1] is shown, 'the file a tool returned is kept after the reduced text'


def test_the_tool_returns_a_planner_remembers_are_bounded() -> None:
    """A long-lived planner serves many conversations: each examined tool return is remembered with the
    candidate made of it, which holds the part: only the bound frees the parts of finished conversations."""
    from pydantic_ai_history.store import artifact_id

    planner = ArtifactPlanner()
    counter = TokenCounter('gpt-4o')
    for i in range(_extract.CANDIDATE_MEMO_SIZE + 100):
        request = ModelRequest(parts=[ToolReturnPart('lookup', f'row {i}', tool_call_id=f'c{i}')])
        [candidate] = _extract.find_candidates(
            [request],
            count_tokens=counter.count_part,
            exempt_tools=frozenset(),
            start=0,
            memo=planner._examined,
            make_id=artifact_id,
        )
        assert candidate.text == f'row {i}'
    assert len(planner._examined) == _extract.CANDIDATE_MEMO_SIZE
