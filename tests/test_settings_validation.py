"""Settings that cannot work fail as soon as the window is known, naming the field and the numbers; a value
the processor must clamp says so once; wrong types and unknown providers fail at construction."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.models.test import TestModel

from pydantic_ai_history import (
    CompactionResult,
    CompactionSettings,
    CompactionTool,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    NearLimitNotice,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.budget._policy import ContextPolicyError
from pydantic_ai_history.stages.artifacts import ArtifactSettings
from pydantic_ai_history.testing import StrictProvider

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings('ignore::DeprecationWarning')]

# A 16K model every version knows by name (2.x also from the strict provider's profile): its output cap
# (4,096) is kept free, so the budget is 12,289.
WINDOW, NAME, BUDGET = 16_385, 'gpt-3.5-turbo', 12_289
PAGE = 'the quick brown fox jumps over the lazy dog while the cat sleeps ' * 60  # ~780 tokens


def _attach(processor: HistoryProcessor) -> dict[str, Any]:
    return {'capabilities': [processor]} if HAS_CAPABILITIES else {'history_processors': [processor]}


def _loop(calls: int) -> Any:
    issued = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if issued['n'] < calls:
            issued['n'] += 1
            return ModelResponse(
                parts=[ToolCallPart('fetch', {'i': issued['n']}, tool_call_id=f'c{issued["n"]}')]
            )
        return ModelResponse(parts=[TextPart('done')])

    return respond


def _agent(provider: StrictProvider, processor: HistoryProcessor) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(provider.model(), **_attach(processor))

    @agent.tool_plain
    def fetch(i: int) -> str:
        """Fetch a page."""
        return f'page {i}: {PAGE}'

    return agent


def _summarizer() -> SummarizerSettings:
    return SummarizerSettings(model=TestModel(custom_output_text='Summary: pages fetched so far.'))


# ---- impossible: raise with the field and the numbers ----------------------------------------------------


def test_a_reserve_larger_than_the_window_fails_at_construction_when_the_model_is_given() -> None:
    model = StrictProvider(_loop(0), context_window=WINDOW, model_name=NAME).model()
    with pytest.raises(ContextPolicyError, match=r'reserve_tokens=20,000 .*16,385-token window'):
        create_history_processor(model=model, policy=ContextPolicy(reserve_tokens=20_000))


async def test_a_reserve_larger_than_the_window_fails_at_the_first_request_otherwise() -> None:
    provider = StrictProvider(_loop(3), context_window=WINDOW, model_name=NAME)
    processor = create_history_processor(policy=ContextPolicy(reserve_tokens=20_000))
    with pytest.raises(ContextPolicyError, match=r'ContextPolicy\.reserve_tokens=20,000'):
        await _agent(provider, processor).run('go')
    assert provider.requests == []  # nothing was sent


def test_a_budget_above_the_window_fails_naming_it() -> None:
    model = StrictProvider(_loop(0), context_window=WINDOW, model_name=NAME).model()
    with pytest.raises(
        ContextPolicyError, match=r'budget_tokens=20,000 is above the usable window of 16,385'
    ):
        HistoryProcessor(model=model, policy=ContextPolicy(budget_tokens=20_000))
    with pytest.raises(ContextPolicyError, match=r'budget_tokens=15,000 and reserve_tokens=4,000'):
        HistoryProcessor(model=model, policy=ContextPolicy(budget_tokens=15_000, reserve_tokens=4_000))


# ---- clamped: warn once, naming the field and the value used ----------------------------------------------


async def test_a_trigger_above_the_budget_is_clamped_with_one_warning_and_compaction_fires(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[HistoryEvent] = []
    provider = StrictProvider(_loop(24), context_window=WINDOW, model_name=NAME)
    processor = create_history_processor(
        policy=ContextPolicy(max_tokens=50_000), summarizer=_summarizer(), on_event=events.append
    )
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history'):
        result = await _agent(provider, processor).run('go')
    assert result.output == 'done'
    clamps = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'setting_clamped']
    assert len(clamps) == 1
    assert f'max_tokens=50,000 is above the budget of {BUDGET:,}' in clamps[0].message
    assert f'using max_tokens={BUDGET:,}' in clamps[0].message
    assert len([r for r in caplog.records if 'setting_clamped' in r.getMessage()]) == 1
    assert processor.limits_for(provider.model()).trigger == BUDGET
    assert [e for e in events if isinstance(e, CompactionResult)]  # compaction ran, not only the window
    assert provider.rejected == []


def test_a_target_not_below_the_clamped_trigger_is_clamped_too() -> None:
    model = StrictProvider(_loop(0), context_window=WINDOW, model_name=NAME).model()
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        model=model,
        policy=ContextPolicy(max_tokens=50_000, target_tokens=30_000),
        on_history_event=events.append,
    )
    limits = processor.limits_for(model)
    assert (limits.trigger, limits.target) == (BUDGET, BUDGET // 3)
    messages = [e.message for e in events if isinstance(e, HistoryWarning) and e.code == 'setting_clamped']
    assert len(messages) == 2
    assert 'target_tokens=30,000 is not below the compaction trigger of 12,289' in messages[1]
    assert f'using target_tokens={BUDGET // 3:,}' in messages[1]
    processor.limits_for(model)  # once per model
    assert len([e for e in events if isinstance(e, HistoryWarning)]) == 2


def test_settings_that_fit_are_used_as_given_without_a_warning() -> None:
    model = StrictProvider(_loop(0), context_window=WINDOW, model_name=NAME).model()
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        model=model,
        policy=ContextPolicy(max_tokens=10_000, target_tokens=3_000),
        on_history_event=events.append,
    )
    limits = processor.limits_for(model)
    assert (limits.budget, limits.trigger, limits.target, limits.adjustments) == (BUDGET, 10_000, 3_000, ())
    assert events == []


# ---- types and names at construction ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ('build', 'message'),
    [
        (
            lambda: ContextPolicy(max_tokens='10000'),
            r"ContextPolicy\.max_tokens must be a whole number .* str '10000'",
        ),
        (
            lambda: ContextPolicy(context_window=128_000.0),
            r'ContextPolicy\.context_window must be a whole number',
        ),
        (lambda: ContextPolicy(reserve_tokens=True), r'ContextPolicy\.reserve_tokens'),
        (lambda: ContextPolicy(utilization='0.5'), r'ContextPolicy\.utilization must be a number'),
        (lambda: ContextPolicy(strict='yes'), r'ContextPolicy\.strict must be True or False'),
        (
            lambda: HistoryProcessor(window='yes'),
            r"HistoryProcessor\.window must be True or False, got str 'yes'",
        ),
        (
            lambda: HistoryProcessor(store='artifacts/'),
            r'HistoryProcessor\.store must be an ArtifactStore, e\.g\. DirectoryStore',
        ),
        (lambda: HistoryProcessor(cache='redis://x'), r'HistoryProcessor\.cache must be a SummaryCache'),
        (
            lambda: HistoryProcessor(keep_first_user_message='no'),
            r'HistoryProcessor\.keep_first_user_message',
        ),
        (lambda: HistoryProcessor(pin='tool errors'), r'HistoryProcessor\.pin must be callable'),
        (
            lambda: HistoryProcessor(max_tracked_runs='10'),
            r'HistoryProcessor\.max_tracked_runs must be a whole',
        ),
        (
            lambda: HistoryProcessor(model=42),
            r'HistoryProcessor\.model must be a pydantic-ai Model or a model name',
        ),
        (
            lambda: SummarizerSettings(timeout='soon'),
            r"SummarizerSettings\.timeout must be seconds .* 'auto' or None",
        ),
        (
            lambda: SummarizerSettings(max_input_tokens='5000'),
            r'SummarizerSettings\.max_input_tokens must be',
        ),
        (lambda: create_history_processor(policy={'max_tokens': '10000'}), r'ContextPolicy\.max_tokens'),
        (lambda: create_history_processor(store='artifacts/'), r'HistoryProcessor\.store'),
    ],
)
def test_a_wrong_type_fails_at_construction_naming_the_field(build: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        build()


@pytest.mark.parametrize(
    'build',
    [
        lambda: SummarizerSettings(model='nosuchprovider:foo'),
        lambda: create_history_processor(summarizer=SummarizerSettings(model='nosuchprovider:foo')),
        lambda: HistoryProcessor(model='nosuchprovider:foo'),
        lambda: HistoryProcessor(artifacts=ArtifactSettings(planner_model='nosuchprovider:foo')),
    ],
)
def test_an_unknown_provider_fails_at_construction(build: Any) -> None:
    with pytest.raises(
        ValueError, match=r"model='nosuchprovider:foo': pydantic-ai knows no provider 'nosuchprovider'"
    ):
        build()


def test_known_providers_are_accepted_without_a_network_or_their_sdk() -> None:
    for name in ('openai:gpt-4.1-mini', 'anthropic:claude-haiku-4-5', 'ollama:llama3.1:8b', 'test'):
        assert SummarizerSettings(model=name).model == name
    assert SummarizerSettings(timeout=None).timeout is None
    assert SummarizerSettings(timeout=30).timeout == 30


def test_on_event_is_accepted_as_the_factory_spells_it() -> None:
    seen: list[HistoryEvent] = []
    processor = HistoryProcessor(on_event=seen.append)
    assert processor.on_history_event == seen.append
    with pytest.raises(TypeError, match='not both'):
        HistoryProcessor(on_event=seen.append, on_history_event=seen.append)


@pytest.mark.parametrize(
    ('build', 'field'),
    [
        (
            lambda: create_history_processor(compaction=CompactionSettings(background_start=1.0)),
            'background_start',
        ),
        (
            lambda: create_history_processor(compaction=CompactionSettings(background_start=0)),
            'background_start',
        ),
        (lambda: create_history_processor(compaction_tool=CompactionTool(min_tokens=-1)), 'min_tokens'),
        (lambda: create_history_processor(compaction_tool=CompactionTool(name='compact context')), 'name'),
        (lambda: create_history_processor(compaction_tool=True, compaction=False), 'compaction_tool'),
        (lambda: create_history_processor(near_limit_notice=NearLimitNotice(start=0)), 'start'),
        (lambda: create_history_processor(near_limit_notice=NearLimitNotice(every=0)), 'every'),
        (lambda: create_history_processor(near_limit_notice='yes'), 'near_limit_notice'),
        (lambda: create_history_processor().compaction_toolset(), 'compaction_tool'),
    ],
)
def test_the_new_features_fail_at_construction_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        build()


def test_the_new_features_are_off_by_default() -> None:
    processor = create_history_processor()
    assert processor.compaction_tool is False
    assert processor.near_limit_notice is False


def test_the_next_summary_is_made_in_the_background_by_default() -> None:
    """No request waits for a summary by default (issue 37): the start is a fraction of the trigger, and
    `None` turns it off."""
    start = CompactionSettings().background_start
    assert start is not None
    assert 0 < start < 1
    assert CompactionSettings(background_start=None).background_start is None
