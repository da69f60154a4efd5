"""Limits come from the model that serves the request, under every pydantic-ai model wrapper.

A `FallbackModel` has no profile of its own (2.x raises `NotImplementedError` for it): the processor plans for
the smallest window among the models it may call, so every attempt fits the model that serves it. The
`ModelFallback` capability (2.x) moves an attempt to another model after the step was processed: the step is
planned the same way, for the smallest window among the step's model and the capability's, with no hook per
attempt (whose presence alone makes pydantic-ai copy every tool definition at every attempt).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentedModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.models.wrapper import WrapperModel

from pydantic_ai_history import (
    ContextPolicy,
    HistoryProcessor,
    SlidingWindow,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.budget.model_info import model_info, serving_candidates
from pydantic_ai_history.testing import StrictProvider

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings('ignore::DeprecationWarning')]

FILLER = 'the quick brown fox jumps over the lazy dog while the cat sleeps ' * 60  # ~780 tokens
# Windows the built-in table knows by name on every version (2.x also reads them from the profile).
LARGE, LARGE_NAME = 16_385, 'gpt-3.5-turbo'
SMALL, SMALL_NAME = 8_192, 'gpt-4'


def _attach(processor: HistoryProcessor) -> dict[str, Any]:
    return {'capabilities': [processor]} if HAS_CAPABILITIES else {'history_processors': [processor]}


class _Script:
    """A tool loop shared by every model of a run: `calls` calls of `fetch`, then the answer."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.issued = 0

    def respond(self, *, fail_from: int | None = None, fail_every: int | None = None) -> Any:
        """A responder that, from its own request `fail_from` on (or on every `fail_every`-th), fails like an
        overloaded provider instead."""
        seen = {'n': 0}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            seen['n'] += 1
            n = seen['n']
            if (fail_from is not None and n >= fail_from) or (fail_every and n % fail_every == 0):
                raise ModelHTTPError(status_code=503, model_name='primary', body='overloaded')
            if self.issued < self.calls:
                self.issued += 1
                return ModelResponse(
                    parts=[ToolCallPart('fetch', {'i': self.issued}, tool_call_id=f'c{self.issued}')]
                )
            return ModelResponse(parts=[TextPart(f'done after {self.calls} calls')])

        return respond


def _agent(model: Any, processor: HistoryProcessor, **kwargs: Any) -> Agent[None, str]:
    options = _attach(processor)
    if 'capabilities' in kwargs:
        options['capabilities'] = [*options.get('capabilities', []), *kwargs.pop('capabilities')]
    agent: Agent[None, str] = Agent(model, system_prompt='Be brief.', **options, **kwargs)

    @agent.tool_plain
    def fetch(i: int) -> str:
        """Fetch a page."""
        return f'page {i}: {FILLER}'

    return agent


def _function_model(name: str) -> FunctionModel:
    window = {LARGE_NAME: LARGE, SMALL_NAME: SMALL}[name]
    return StrictProvider(_Script(1).respond(), context_window=window, model_name=name).model()


# ---- limits under each wrapper ------------------------------------------------------------------------


def test_a_fallback_model_is_planned_for_its_smallest_window_without_raising() -> None:
    large, small = _function_model(LARGE_NAME), _function_model(SMALL_NAME)
    processor = HistoryProcessor()
    for fallback in (FallbackModel(large, small), FallbackModel(small, large)):
        limits = processor.limits_for(fallback)
        assert limits.model_window == SMALL
        assert limits.budget <= SMALL - 1_024
    assert serving_candidates(FallbackModel(large, FallbackModel(small, large))) == (large, small, large)


def test_every_wrapper_resolves_like_the_model_it_wraps() -> None:
    large, small = _function_model(LARGE_NAME), _function_model(SMALL_NAME)
    processor = HistoryProcessor()
    assert processor.limits_for(InstrumentedModel(large)).model_window == LARGE
    assert processor.limits_for(WrapperModel(large)).model_window == LARGE
    # a wrapper around a fallback has no profile either: read through to its models
    assert processor.limits_for(WrapperModel(FallbackModel(large, small))).model_window == SMALL
    assert processor.limits_for(InstrumentedModel(FallbackModel(small, large))).model_window == SMALL
    assert (model_info(FallbackModel(large, small)).name or '').endswith(SMALL_NAME)


def test_a_fallback_over_unknown_models_falls_back_once() -> None:
    processor = HistoryProcessor()
    limits = processor.limits_for(FallbackModel(TestModel(), TestModel()))
    assert limits.window_source == 'fallback'


async def test_a_fallback_model_keeps_every_attempt_within_the_window_of_the_model_serving_it() -> None:
    """The primary (16K) fails every third request; the secondary (8K) serves those: none over its window."""
    script = _Script(18)
    primary = StrictProvider(script.respond(fail_every=3), context_window=LARGE, model_name=LARGE_NAME)
    secondary = StrictProvider(script.respond(), context_window=SMALL, model_name=SMALL_NAME)
    processor = create_history_processor(compaction=False)
    agent = _agent(FallbackModel(primary.model(), secondary.model()), processor)
    result = await agent.run('fetch the pages')
    assert result.output == 'done after 18 calls'
    assert primary.rejected == []
    assert secondary.rejected == []
    served_by_secondary = [r for r in secondary.requests if r.rejected is None]
    assert len(served_by_secondary) >= 5
    assert max(r.input_tokens for r in served_by_secondary) <= SMALL
    assert max(r.input_tokens for r in secondary.requests) > SMALL // 2  # the small window was used, not idle
    assert_valid_history(result.all_messages(), finished=True)


def _model_fallback() -> Any:
    if not HAS_CAPABILITIES:
        pytest.skip('this pydantic-ai has no capabilities')
    try:
        from pydantic_ai.capabilities import ModelFallback
    except ImportError:
        pytest.skip('this pydantic-ai has no ModelFallback capability')
    return ModelFallback


@pytest.mark.parametrize('given', ['agent', 'run'])
async def test_model_fallback_plans_every_step_for_the_smallest_window_it_may_move_to(given: str) -> None:
    """The primary serves the first steps, then fails for good: the rest of the run is the secondary's. The
    `ModelFallback` given to the agent or to the run alone: every attempt fits the model that serves it."""
    model_fallback = _model_fallback()
    script = _Script(18)
    primary = StrictProvider(script.respond(fail_from=10), context_window=LARGE, model_name=LARGE_NAME)
    secondary = StrictProvider(script.respond(), context_window=SMALL, model_name=SMALL_NAME)
    processor = HistoryProcessor(stages=[SlidingWindow()])
    fallback = model_fallback(secondary.model())
    agent = _agent(primary.model(), processor, capabilities=[fallback] if given == 'agent' else [])
    run_options: dict[str, Any] = {'capabilities': [fallback]} if given == 'run' else {}
    result = await agent.run('fetch the pages', **run_options)
    assert result.output == 'done after 18 calls'
    assert primary.rejected == []
    assert secondary.rejected == []
    assert len(secondary.requests) >= 8
    # both models' requests were planned for the smaller window, and came close to it
    served = [r for r in primary.requests + secondary.requests if r.rejected is None]
    assert max(r.input_tokens for r in served) <= SMALL
    assert max(r.input_tokens for r in secondary.requests) > SMALL // 2
    assert_valid_history(result.all_messages(), finished=True)


async def test_a_model_fallback_to_a_model_of_unknown_window_is_planned_as_a_fallback_model_is() -> None:
    """The smallest *known* window, as for a `FallbackModel`: an unknown one neither shrinks the plan to the
    assumed window nor, with `strict=True`, refuses the run."""
    model_fallback = _model_fallback()
    script = _Script(18)
    primary = StrictProvider(script.respond(), context_window=LARGE, model_name=LARGE_NAME)
    unknown = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('-')]), model_name='mystery')
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(strict=True))
    agent = _agent(primary.model(), processor, capabilities=[model_fallback(unknown)])
    result = await agent.run('fetch the pages')
    assert result.output == 'done after 18 calls'
    assert primary.rejected == []
    assert max(r.input_tokens for r in primary.requests) > SMALL  # planned for the primary's known window


async def test_without_model_fallback_a_step_keeps_the_window_of_its_own_model() -> None:
    script = _Script(18)
    primary = StrictProvider(script.respond(), context_window=LARGE, model_name=LARGE_NAME)
    processor = HistoryProcessor(stages=[SlidingWindow()])
    result = await _agent(primary.model(), processor).run('fetch the pages')
    assert result.output == 'done after 18 calls'
    assert primary.rejected == []
    assert max(r.input_tokens for r in primary.requests) > SMALL  # its own, larger window was used


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='this pydantic-ai has no capabilities')
async def test_the_model_is_handed_the_tool_schemas_the_step_listed_not_copies() -> None:
    """A capability with a per-attempt hook (`prepare_model_request`) makes pydantic-ai deep-copy every tool
    definition's schema at every attempt; ours has none: the model gets the schemas the step listed."""
    from pydantic_ai.capabilities import AbstractCapability

    listed: list[list[int]] = []
    received: list[list[int]] = []

    class Listed(AbstractCapability[None]):
        async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
            tools = request_context.model_request_parameters.function_tools
            listed.append([id(t.parameters_json_schema) for t in tools])
            return request_context

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append([id(t.parameters_json_schema) for t in info.function_tools])
        if len(received) == 1:
            return ModelResponse(parts=[ToolCallPart('fetch', {'i': 1}, tool_call_id='c1')])
        return ModelResponse(parts=[TextPart('done')])

    processor = create_history_processor()
    agent: Agent[None, str] = Agent(FunctionModel(respond), capabilities=[processor, Listed()])

    @agent.tool_plain
    def fetch(i: int) -> str:
        """Fetch a page."""
        return f'page {i}'

    assert (await agent.run('fetch a page')).output == 'done'
    assert len(received) == 2
    assert all(received[i] for i in range(2))
    assert received == listed


# ---- test models: the unknown window is no warning -----------------------------------------------------


async def test_test_models_log_the_fallback_at_info_not_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger='pydantic_ai_history')
    for model in (TestModel(), FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('ok')]))):
        caplog.clear()
        processor = create_history_processor()
        agent: Agent[None, str] = Agent(model, **_attach(processor))
        await agent.run('hello')
        fallback = [r for r in caplog.records if 'context_window_fallback' in r.getMessage()]
        assert [r.levelno for r in fallback] == [logging.INFO]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_unknown_real_model_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    processor = create_history_processor()
    with caplog.at_level(logging.INFO, logger='pydantic_ai_history'):
        processor.limits_for('my-inhouse:model-x')
    fallback = [r for r in caplog.records if 'context_window_fallback' in r.getMessage()]
    assert [r.levelno for r in fallback] == [logging.WARNING]


def test_the_processor_plans_with_the_policy_window_under_any_wrapper() -> None:
    processor = HistoryProcessor(policy=ContextPolicy(context_window=5_000))
    large, small = _function_model(LARGE_NAME), _function_model(SMALL_NAME)
    assert processor.limits_for(FallbackModel(large, small)).model_window == 5_000
