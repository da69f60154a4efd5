"""The compactor through a real `Agent` against a strict simulated provider, on every supported major.

A 150+ request tool loop over real tool outputs, and an app that reloads its full uncompacted history every
turn: no request over the trigger or the window, one summarizer call per compaction (and per distinct
evicted prefix), every processor output valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import UsageLimits

from _compaction import StubSummarizer, agent_with
from pydantic_ai_history import (
    BackgroundSummaryDiscarded,
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    RequestProcessed,
    StageFailed,
    SummarizerSettings,
    assert_valid_history,
)
from pydantic_ai_history._compat import result_usage
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]

TRIGGER, TARGET, WINDOW = 16_000, 6_000, 20_000
ESTIMATE_SLACK = 16
"""How far this provider's count of a request may sit above the processor's estimate (4 tokens seen)."""
SYSTEM = 'You are a data analyst. Work through the dataset one page at a time with the fetch tool.'


def pages(fixtures_dir: Path, lines_per_page: int = 40) -> list[str]:
    """Real tool outputs (CSV rows, JSON records) cut into pages."""
    lines: list[str] = []
    for name in ('airports.csv', 'seattle-weather.csv', 'cars.json', 'stocks.csv'):
        lines.extend((fixtures_dir / 'tool_outputs' / 'vega_datasets' / name).read_text().splitlines())
    return ['\n'.join(lines[i : i + lines_per_page]) for i in range(0, len(lines), lines_per_page)]


class CheckedProcessor(HistoryProcessor):
    """The processor under test, asserting that every history it hands the model is valid."""

    outputs = 0
    events: list[HistoryEvent]

    async def process(
        self, messages: Any, *, ctx: Any = None, model: Any = None, **kwargs: Any
    ) -> list[ModelMessage]:
        out = await super().process(messages, ctx=ctx, model=model, **kwargs)
        assert_valid_history(out)
        self.outputs += 1
        return out

    def compactions(self) -> list[CompactionResult]:
        return [e for e in self.events if isinstance(e, CompactionResult)]


# pydantic-ai 1.0 reads the `ctx` annotation from the instance's class (see processor.py), and resolves it
# in this module: it needs `RunContext` here.
CheckedProcessor.__annotations__ = dict(HistoryProcessor.__annotations__)
assert RunContext


def build_processor(
    summarizer: StubSummarizer, *, stubs: bool = True, background_start: float | None = None
) -> CheckedProcessor:
    """The processor under test; its summaries made at the trigger unless `background_start` says when to
    start them ahead."""
    events: list[HistoryEvent] = []
    processor = CheckedProcessor(
        artifacts=False,
        compaction=CompactionSettings(stub_tool_results=stubs, background_start=background_start),
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        on_history_event=events.append,
    )
    processor.events = events
    return processor


@pytest.mark.parametrize('background', [False, True], ids=['at-the-trigger', 'background'])
async def test_long_tool_loop_stays_under_the_trigger(fixtures_dir: Path, background: bool) -> None:
    """Summaries made at the trigger keep every request under it; made in the background (the default), a
    request may pass it while the summary is written, never the budget."""
    data = pages(fixtures_dir)
    steps = 155

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(provider.requests)
        if step >= steps:
            return ModelResponse(parts=[TextPart('All pages analysed.')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'page': step}, tool_call_id=f'call_{step}')])

    provider = StrictProvider(respond, context_window=WINDOW)
    summarizer = StubSummarizer()
    default_start = CompactionSettings().background_start
    processor = build_processor(summarizer, background_start=default_start if background else None)
    agent = agent_with(provider.model(), processor, system_prompt=SYSTEM)

    @agent.tool_plain
    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        return data[page % len(data)]

    result = await agent.run(
        'Analyse every page of the dataset.', usage_limits=UsageLimits(request_limit=None)
    )

    assert result.output == 'All pages analysed.'
    assert len(provider.requests) >= 150
    # The trigger is read on the processor's estimate, which sits a few tokens from this provider's own count
    # (its framing of a tool call and return differs by 4 tokens); the window is the hard limit.
    processed = [e for e in processor.events if isinstance(e, RequestProcessed)]
    limit = processor.limits_for(provider.model()).budget if background else TRIGGER
    assert max(e.tokens_after for e in processed) <= limit
    assert provider.peak_input_tokens <= limit + ESTIMATE_SLACK < WINDOW, [
        r.input_tokens for r in provider.requests
    ]
    compactions = processor.compactions()
    assert len(compactions) >= 5
    # old tool outputs are stubbed into the store first; the summarizer runs when that is not enough
    assert {c.method for c in compactions} == {'stubs', 'llm'}
    assert all(c.reason == 'trigger' for c in compactions)
    assert all(c.summarizer_calls == (c.method == 'llm') for c in compactions)
    # every summarizer call is told, by the compaction that used it or by a background summary thrown away
    # (whether one is, and why, depends on how far the run got while it was written: the run's end, a cut
    # that no longer fits); none is made at the trigger
    discarded = [e for e in processor.events if isinstance(e, BackgroundSummaryDiscarded)]
    assert background or not discarded
    assert summarizer.calls == sum(c.summarizer_calls for c in compactions) + sum(
        d.summarizer_calls for d in discarded
    )
    assert all(c.tokens_after <= TARGET for c in compactions)
    # the request right after each compaction is what the provider counted: at or below the target too
    assert len(processed) == len(provider.requests) == processor.outputs
    assert not [e for e in processor.events if isinstance(e, StageFailed)]
    after_compaction = [provider.requests[i].input_tokens for i in _compacted_requests(processor.events)]
    assert len(after_compaction) == len(compactions)
    assert max(after_compaction) <= TARGET
    final = result.all_messages()
    assert isinstance(final[0], ModelRequest)
    assert any(getattr(p, 'content', None) == SYSTEM for p in final[0].parts), 'the system prompt survived'
    assert 'Analyse every page of the dataset.' in [
        p.content for p in final[0].parts if isinstance(p, UserPromptPart)
    ], 'the first user message survived'
    assert sum(1 for m in final if marker_kind(m) == 'summary') == 1
    # the summarizer's usage is part of the run's usage
    assert (
        result_usage(result).input_tokens
        >= sum(r.input_tokens for r in provider.requests) + summarizer.input_tokens * summarizer.calls
    )


def _compacted_requests(events: list[HistoryEvent]) -> list[int]:
    """The index of each request a compaction happened in (its `CompactionResult` precedes its
    `RequestProcessed`)."""
    found: list[int] = []
    request, compacted = 0, False
    for event in events:
        if isinstance(event, CompactionResult):
            compacted = True
        elif isinstance(event, RequestProcessed):
            if compacted:
                found.append(request)
            request, compacted = request + 1, False
    return found


def turn_messages(all_messages: list[ModelMessage], prompt: str) -> list[ModelMessage]:
    """This turn's messages as an app would store them (`new_messages()`), found by the turn's prompt.

    Found by content because 1.0's `new_messages()` is an index into a history the processor shortened.
    """
    for index in range(len(all_messages) - 1, -1, -1):
        message = all_messages[index]
        if isinstance(message, ModelRequest) and any(
            isinstance(p, UserPromptPart) and p.content == prompt for p in message.parts
        ):
            return all_messages[index:]
    raise AssertionError(f'turn prompt {prompt!r} not found')


async def test_reloaded_uncompacted_history_is_summarized_once_per_prefix(fixtures_dir: Path) -> None:
    data = pages(fixtures_dir, lines_per_page=80)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, UserPromptPart) for p in last.parts):  # a new turn: look one page up
            turn = len(provider.requests)
            return ModelResponse(parts=[ToolCallPart('fetch', {'page': turn}, tool_call_id=f'call_{turn}')])
        return ModelResponse(parts=[TextPart(f'Page noted ({len(provider.requests)}).')])

    provider = StrictProvider(respond, context_window=WINDOW)
    summarizer = StubSummarizer()
    processor = build_processor(summarizer, stubs=False)  # the summaries' reuse is the point
    agent = agent_with(provider.model(), processor, system_prompt=SYSTEM)

    @agent.tool_plain
    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        return data[page % len(data)]

    stored: list[ModelMessage] = []  # the app's store: every turn's own messages, never compacted
    turns = 40
    for turn in range(turns):
        prompt = f'Turn {turn}: fetch the next page and note what it holds.'
        result = await agent.run(
            prompt, message_history=stored or None, usage_limits=UsageLimits(request_limit=None)
        )
        new = turn_messages(result.all_messages(), prompt)
        assert not any(marker_kind(m) for m in new)
        stored = [*stored, *new]

    assert sum(processor.counter_for(provider.model()).count_message(m) for m in stored) > 3 * TRIGGER
    assert provider.peak_input_tokens <= TRIGGER + ESTIMATE_SLACK
    assert all(r.input_tokens <= WINDOW for r in provider.requests)
    compactions = processor.compactions()
    llm = [c for c in compactions if c.method == 'llm']
    reused = [c for c in compactions if c.method == 'cache']
    # one summarizer call per distinct evicted prefix; every other over-trigger turn reused a recorded prefix
    assert summarizer.calls == len(llm) == sum(c.summarizer_calls for c in compactions)
    assert 2 <= summarizer.calls <= turns // 4
    assert len(reused) >= turns // 2
    assert not [e for e in processor.events if isinstance(e, StageFailed)]
