"""Provider-native compaction (`CompactionSettings(method='provider')`) through a real `Agent`.

The serving model behaves like OpenAI Responses: `compact_messages` answers with an encrypted `CompactionPart`
and real usage, rejects a window whose tool pairing is broken, and every request drops what comes before the
latest compaction item (pydantic-ai's own `_trim_before_compaction`), counting the item at the size the
provider gave it. Our trigger, target, cut, pins, kept first user message and transcript spill stay around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import RecordingStore
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _native import ResponsesLikeProvider, compacting_model, leading_compaction
from pydantic_ai_history import (
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history._compat import (
    COMPACTION_REQUEST_PART,
    HAS_CAPABILITIES,
    is_compaction_response,
    result_usage,
)
from pydantic_ai_history.store import MemoryStore
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]

NATIVE = COMPACTION_REQUEST_PART is not None
needs_native = pytest.mark.skipif(
    not NATIVE,
    reason='pydantic-ai 1.x has no provider-native compaction for the compactor (Model.compact_messages with '
    'a request-side CompactionPart is 2.x); method="provider" falls back there (tested below)',
)

WINDOW, TRIGGER, TARGET = 16_000, 8_000, 4_000
SYSTEM = 'You are a careful analyst. Fetch the pages one at a time.'
TASK = 'Read every page of the quarterly report and list the anomalies.'
_WORDS = 'revenue margin region latency ticket churn forecast backlog invoice audit '


def page(n: int, tokens: int = 900) -> str:
    return f'PAGE-{n:03d} ' + ' '.join(f'{w}{n}.{i}' for i, w in enumerate(_WORDS.split() * (tokens // 20)))


@dataclass
class Summarizer:
    calls: int = 0
    fail: bool = False

    def model(self) -> FunctionModel:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.calls += 1
            if self.fail:
                raise RuntimeError('summarizer down')
            return ModelResponse(parts=[TextPart('Summary: pages were read.')])

        return FunctionModel(respond, model_name='summarizer')


class Checked(HistoryProcessor):
    """Every history handed to the model is valid."""

    async def process(self, messages: Any, **kwargs: Any) -> list[ModelMessage]:
        out = await super().process(messages, **kwargs)
        assert_valid_history(out)
        return out


# pydantic-ai 1.0 reads the `ctx` annotation from the instance's class and resolves it in this module
Checked.__annotations__ = dict(HistoryProcessor.__annotations__)
assert RunContext


def processor(method: str, summarizer: Summarizer, events: list[HistoryEvent], **kw: Any) -> HistoryProcessor:
    return Checked(
        artifacts=False,
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        # the provider's compaction is the point: no cheap tier of stubs before it
        compaction=CompactionSettings(method=method, summary_max_tokens=400, stub_tool_results=False),  # type: ignore[arg-type]
        store=kw.pop('store', MemoryStore()),
        on_history_event=events.append,
        **kw,
    )


def agent(model: Any, history_processor: HistoryProcessor) -> Any:
    from pydantic_ai import Agent

    if HAS_CAPABILITIES:
        built: Any = Agent(model, capabilities=[history_processor], system_prompt=SYSTEM)
    else:
        built = Agent(
            model,
            history_processors=[history_processor],
            toolsets=[history_processor.readback_toolset()],
            system_prompt=SYSTEM,
        )

    @built.tool_plain
    def fetch(n: int) -> str:
        """Fetch page n of the report."""
        return page(n)

    return built


def compactions(events: list[HistoryEvent]) -> list[CompactionResult]:
    return [e for e in events if isinstance(e, CompactionResult)]


def warnings(events: list[HistoryEvent], code: str) -> list[HistoryWarning]:
    return [e for e in events if isinstance(e, HistoryWarning) and e.code == code]


def _task_after_item(messages: Sequence[ModelMessage]) -> bool:
    """The first user message is sent after the compaction item (the adapter drops what is before it)."""
    rest, items = leading_compaction(messages)
    return bool(items) and any(
        isinstance(p, UserPromptPart) and p.content == TASK
        for m in rest
        if isinstance(m, ModelRequest)
        for p in m.parts
    )


@needs_native
async def test_a_tool_loop_compacts_with_the_provider_and_stays_under_the_target() -> None:
    provider = ResponsesLikeProvider(steps=24)
    summarizer = Summarizer()
    events: list[HistoryEvent] = []
    store = RecordingStore()
    run_agent = agent(compacting_model(provider), processor('provider', summarizer, events, store=store))

    result = await run_agent.run(TASK)

    assert result.output == 'All pages read.'
    done = compactions(events)
    assert len(done) >= 3, 'the loop must compact several times (re-compaction is the point)'
    assert {c.method for c in done} == {'provider'}
    assert summarizer.calls == 0
    assert len(provider.compactions) == len(done)
    assert all(c.tokens_after <= TARGET for c in done)
    assert not warnings(events, 'compaction_over_target')
    # every request fit the window; from the first compaction on, one item and the task after it
    assert max(tokens for tokens, _ in provider.requests) <= WINDOW
    after = [m for _, m in provider.requests if leading_compaction(m)[1]]
    assert after
    assert all(len(leading_compaction(m)[1]) == 1 for m in after)
    assert all(_task_after_item(m) for m in after)
    history = result.all_messages()
    assert sum(is_compaction_response(m) for m in history) == 1
    assert_valid_history(history, finished=True)
    # nothing lost: every page is in the history or in a stored transcript
    assert 'read_artifact' in provider.tools[-1], 'the note names the transcript: read-back is offered'
    stored = store.text()
    kept = str(history)
    assert all(f'PAGE-{n:03d}' in stored or f'PAGE-{n:03d}' in kept for n in range(1, 25))
    # the compaction calls are the run's: their usage is in RunUsage
    assert result_usage(result).requests == len(provider.requests) + len(provider.compactions)


@needs_native
async def test_a_second_turn_replaces_the_compaction_item() -> None:
    provider = ResponsesLikeProvider(steps=10)
    events: list[HistoryEvent] = []
    run_agent = agent(compacting_model(provider), processor('provider', Summarizer(), events))

    first = await run_agent.run(TASK)
    after_first = len(compactions(events))
    assert after_first >= 1
    assert sum(is_compaction_response(m) for m in first.all_messages()) == 1
    second = await run_agent.run('Now list the pages again.', message_history=first.all_messages())

    assert len(compactions(events)) > after_first, 'the second turn must compact again'
    assert {c.method for c in compactions(events)} == {'provider'}
    assert len(provider.compactions) == len(compactions(events))
    history = second.all_messages()
    assert sum(is_compaction_response(m) for m in history) == 1
    for _, sent in provider.requests:
        assert len(leading_compaction(sent)[1]) <= 1
    # the first user message is still sent, after the item
    assert _task_after_item(provider.requests[-1][1])


@needs_native
async def test_a_failing_provider_falls_back_to_the_llm_summary_then_the_digest() -> None:
    provider = ResponsesLikeProvider(steps=10, fail=True)
    summarizer = Summarizer()
    events: list[HistoryEvent] = []
    run_agent = agent(compacting_model(provider), processor('provider', summarizer, events))

    await run_agent.run(TASK)

    assert provider.compactions, 'the provider was asked'
    assert {c.method for c in compactions(events)} == {'llm'}
    assert summarizer.calls >= 1
    assert warnings(events, 'provider_compaction_failed')
    assert max(tokens for tokens, _ in provider.requests) <= WINDOW

    provider = ResponsesLikeProvider(steps=10, fail=True)
    events = []
    run_agent = agent(compacting_model(provider), processor('provider', Summarizer(fail=True), events))
    await run_agent.run(TASK)
    assert {c.method for c in compactions(events)} == {'digest'}


@needs_native
async def test_an_item_too_large_for_the_target_is_not_used() -> None:
    provider = ResponsesLikeProvider(steps=8, item_tokens=TARGET)
    summarizer = Summarizer()
    events: list[HistoryEvent] = []
    run_agent = agent(compacting_model(provider), processor('provider', summarizer, events))

    await run_agent.run(TASK)

    assert provider.compactions
    assert {c.method for c in compactions(events)} == {'llm'}
    assert all(c.tokens_after <= TARGET for c in compactions(events))
    assert warnings(events, 'provider_compaction_failed')


@pytest.mark.parametrize('method', ['provider', 'auto'])
async def test_a_model_without_compaction_falls_back_to_the_llm_summary(method: str) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(strict.requests)
        if step >= 10:
            return ModelResponse(parts=[TextPart('All pages read.')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'n': step}, tool_call_id=f'call_{step}')])

    strict = StrictProvider(respond, context_window=WINDOW)
    summarizer = Summarizer()
    events: list[HistoryEvent] = []
    run_agent = agent(strict.model(), processor(method, summarizer, events))

    await run_agent.run(TASK)

    assert len(compactions(events)) >= 2
    assert {c.method for c in compactions(events)} == {'llm'}
    unsupported = warnings(events, 'provider_compaction_unsupported')
    # said once, however many compactions; never for 'auto'
    assert len(unsupported) == (1 if method == 'provider' else 0)
    assert not strict.rejected


def test_the_method_setting_is_checked() -> None:
    with pytest.raises(ValueError, match='method'):
        CompactionSettings(method='native')  # type: ignore[arg-type]
    assert CompactionSettings().method == 'llm'
    assert create_history_processor(compaction=CompactionSettings(method='auto')) is not None
