"""The public API: one processor for every pydantic-ai version, one home per setting, windows never fatal."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart

import pydantic_ai_history
from _history import reply, user
from pydantic_ai_history import (
    ArtifactSettings,
    CompactionSettings,
    ContextLimits,
    ContextPolicy,
    ContextWindowUnknownError,
    HistoryContext,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
    validate_history,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES, AbstractCapability
from pydantic_ai_history.budget.model_info import ModelInfo
from pydantic_ai_history.readback import READBACK_TOOLSET_ID
from pydantic_ai_history.testing import StrictProvider

pytestmark = pytest.mark.anyio

needs_capabilities = pytest.mark.skipif(not HAS_CAPABILITIES, reason='pydantic-ai 1.0 has no capabilities')


def _has_agent_spec() -> bool:
    return hasattr(Agent, 'from_spec')


def _reply(text: str = 'done') -> Any:
    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    return respond


def _attach(processor: HistoryProcessor) -> dict[str, Any]:
    return {'capabilities': [processor]} if HAS_CAPABILITIES else {'history_processors': [processor]}


# ---- one object, both majors -----------------------------------------------------------------------------


@needs_capabilities
def test_the_processor_is_itself_a_capability_with_a_stable_id() -> None:
    processor = create_history_processor()
    assert isinstance(processor, AbstractCapability)
    assert processor.id == 'pydantic_ai_history'
    assert processor.capability() is processor  # 0.1.0 code keeps working
    toolset = processor.get_toolset()
    assert toolset is not None
    ids: list[str | None] = []
    toolset.apply(lambda t: ids.append(t.id))
    assert READBACK_TOOLSET_ID in ids
    custom: list[str | None] = []
    other = create_history_processor(id='support_history').get_toolset()
    assert other is not None
    other.apply(lambda t: custom.append(t.id))
    assert 'support_history_readback' in custom


async def test_one_object_runs_as_a_capability_or_a_history_processor() -> None:
    """`capabilities=[processor]` where pydantic-ai has capabilities, `history_processors=` on 1.0."""
    events: list[HistoryEvent] = []
    processor = create_history_processor(policy=ContextPolicy(context_window=50_000), on_event=events.append)
    provider = StrictProvider(_reply(), context_window=50_000)
    agent: Agent[None, str] = Agent(provider.model(), **_attach(processor))
    result = await agent.run('hello')
    assert result.output == 'done'
    assert processor.stats().overall.requests == 1
    assert_valid_history(result.all_messages(), finished=True)
    assert validate_history(result.all_messages()) == []  # a finished run is valid as it is


@needs_capabilities
def test_a_second_processor_on_one_agent_fails_at_construction_saying_what_to_do() -> None:
    from pydantic_ai.exceptions import UserError

    if not hasattr(AbstractCapability, 'for_agent'):
        pytest.skip(
            'this pydantic-ai has no for_agent hook: two processors clash on read_artifact at run time'
        )
    first = create_history_processor()
    for second in (create_history_processor(), create_history_processor(id='other')):
        with pytest.raises(UserError, match='one history processor'):
            Agent('test', capabilities=[first, second])


@needs_capabilities
def test_the_constructor_is_keyword_only_and_every_field_is_documented() -> None:
    with pytest.raises(TypeError):
        HistoryProcessor([])  # type: ignore[misc]
    for kind in (HistoryProcessor, ContextPolicy, SummarizerSettings, ContextLimits):
        # a field is documented where it is declared: the class or the base it comes from
        source = ''.join(
            inspect.getsource(k) for k in kind.__mro__ if k.__module__.startswith('pydantic_ai_history')
        )
        for field in dataclasses.fields(kind):
            if field.name in ('id', 'description', 'defer_loading') and kind is not HistoryProcessor:
                continue
            if field.name in ('description', 'defer_loading'):
                continue  # pydantic-ai's own, documented there
            assert f'    {field.name}:' in source, f'{kind.__name__}.{field.name}'
            after = source.split(f'    {field.name}:', 1)[1].split('\n', 2)
            assert after[1].strip().startswith('"""'), f'{kind.__name__}.{field.name} has no docstring'


@pytest.mark.skipif(not _has_agent_spec(), reason='this pydantic-ai has no agent specs')
def test_an_agent_spec_builds_the_processor_from_a_dict_and_from_yaml(tmp_path: Path) -> None:
    spec = {
        'model': 'test',
        'capabilities': [
            {
                'PydanticAIHistory': {
                    'policy': {'max_tokens': 50_000, 'target_tokens': 10_000},
                    'window': False,
                }
            }
        ],
    }
    agent = Agent.from_spec(spec, custom_capability_types=[HistoryProcessor])
    [processor] = [c for c in _capabilities(agent) if isinstance(c, HistoryProcessor)]
    assert processor.policy == ContextPolicy(max_tokens=50_000, target_tokens=10_000)
    assert processor.id == 'pydantic_ai_history'
    assert [stage.name for stage in processor.history_stages] == ['artifacts', 'compactor']
    assert agent.run_sync('hi').output

    path = tmp_path / 'agent.yaml'
    path.write_text(
        'model: test\n'
        'capabilities:\n'
        '  - PydanticAIHistory:\n'
        '      id: support_history\n'
        '      policy: {context_window: 64000, utilization: 0.5}\n'
        '      summarizer: {timeout: 20}\n'
    )
    agent = Agent.from_file(path, custom_capability_types=[HistoryProcessor])
    [processor] = [c for c in _capabilities(agent) if isinstance(c, HistoryProcessor)]
    assert (processor.id, processor.summarizer.timeout) == ('support_history', 20)
    assert processor.limits_for('test').context_window == 32_000


def _capabilities(agent: Any) -> list[Any]:
    found: list[Any] = []
    agent._root_capability.apply(found.append)
    return found


# ---- one home per setting ----------------------------------------------------------------------------------


def test_the_factory_takes_the_processors_fields_and_nothing_else() -> None:
    """The 0.1.0 keywords are gone: a TypeError names each one and what to write instead; `on_event=` is the
    one alias; any other unknown keyword is Python's own TypeError."""
    moved = r'write policy=ContextPolicy\(max_tokens=50000, target_tokens=9000\)'
    with pytest.raises(TypeError, match=moved):
        create_history_processor(max_tokens=50_000, target_tokens=9_000)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"summarizer=SummarizerSettings\(model='openai:gpt-4o-mini'\)"):
        create_history_processor(summarizer_model='openai:gpt-4o-mini')  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_setting'"):
        create_history_processor(no_such_setting=1)  # type: ignore[call-arg]
    events: list[object] = []
    processor = create_history_processor(on_event=events.append, window=False)  # type: ignore[call-arg]
    assert processor.on_history_event == events.append
    assert [s.name for s in processor.history_stages] == ['artifacts', 'compactor']


def test_settings_reject_bad_values_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r'ContextPolicy\.utilization'):
        ContextPolicy(utilization=0)
    with pytest.raises(ValueError, match=r'ContextPolicy\.target_tokens .* below max_tokens'):
        ContextPolicy(max_tokens=10_000, target_tokens=10_000)
    with pytest.raises(ValueError, match=r'ContextPolicy\.budget_tokens'):
        ContextPolicy(budget_tokens=0)
    with pytest.raises(ValueError, match=r'SummarizerSettings\.timeout'):
        SummarizerSettings(timeout=0)
    with pytest.raises(TypeError):
        ContextPolicy(50_000)  # type: ignore[misc]
    with pytest.raises(TypeError):
        CompactionSettings(2_000)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ArtifactSettings(None)  # type: ignore[misc]


def test_no_setting_is_declared_in_two_settings_classes() -> None:
    classes = (ContextPolicy, SummarizerSettings, ArtifactSettings, CompactionSettings)
    seen: dict[str, str] = {}
    shared = {'id', 'model', 'policy', 'summarizer', 'artifacts', 'compaction', 'window', 'stages'}
    for kind in classes:
        for field in dataclasses.fields(kind):
            assert field.name not in seen, f'{field.name} is in {seen.get(field.name)} and {kind.__name__}'
            seen[field.name] = kind.__name__
    processor_fields = {f.name for f in dataclasses.fields(HistoryProcessor)} - shared
    assert not processor_fields & set(seen), processor_fields & set(seen)
    assert not hasattr(pydantic_ai_history, 'WindowSettings')


class _Spy:
    """Records the context each stage position receives."""

    def __init__(self, name: str, stage: Any, seen: dict[str, HistoryContext]) -> None:
        self.name, self._stage, self._seen = name, stage, seen

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        self._seen[self.name] = context
        result: list[ModelMessage] = await self._stage(messages, context)
        return result


def _sixteen_k_model() -> Any:
    provider = StrictProvider(_reply(), context_window=16_000)
    return provider.model()


@pytest.mark.parametrize(
    ('model', 'window', 'expected'),
    [
        # gpt-4o: 128,000 window, 16,384 max output -> budget 111,616; trigger 80% of the budget
        ('openai:gpt-4o', None, (128_000, 111_616, 89_292, 29_764)),
        # a 16K FunctionModel (the window given by hand where the profile cannot carry it)
        ('16k', 16_000, (16_000, 14_976, 11_980, 3_993)),
        # a model nobody knows: the documented 128,000 fallback, with the generic 1,024 reserve
        ('acme:unknown-model-7', None, (128_000, 126_976, 101_580, 33_860)),
    ],
)
async def test_every_stage_sees_the_same_trigger_target_and_budget(
    model: str, window: int | None, expected: tuple[int, int, int, int]
) -> None:
    seen: dict[str, HistoryContext] = {}
    base = create_history_processor(policy=ContextPolicy(context_window=window))
    spies = [_Spy(stage.name, stage, seen) for stage in base.history_stages]
    processor = create_history_processor(policy=ContextPolicy(context_window=window), stages=spies)
    serving = _sixteen_k_model() if model == '16k' else model
    await processor.process([user('task'), reply('ok'), user('next')], model=serving)
    assert set(seen) == {'artifacts', 'compactor', 'window'}
    limits = {name: context.limits for name, context in seen.items()}
    assert limits['artifacts'] == limits['compactor'] == limits['window']
    got = limits['window']
    assert (got.context_window, got.budget, got.trigger, got.target) == expected
    artifacts = base.history_stages[0]
    assert artifacts.settings.hard_limit(got) == min(got.budget, got.trigger)  # type: ignore[attr-defined]


# ---- windows never fatal -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'name', ['ollama:llama3.2', 'ollama:qwen2.5:14b', 'bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0']
)
async def test_local_and_bedrock_model_ids_run_without_an_exception(name: str) -> None:
    events: list[HistoryEvent] = []
    processor = create_history_processor(model=name, on_event=events.append)
    provider = StrictProvider(_reply('fine'), context_window=1_000_000)
    agent: Agent[None, str] = Agent(provider.model(), **_attach(processor))
    assert (await agent.run('hello')).output == 'fine'
    assert (await agent.run('again')).output == 'fine'
    fallbacks = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'context_window_fallback']
    limits = processor.limits_for(name)
    if name.startswith('bedrock:'):
        assert limits.window_source != 'fallback'
        assert limits.model_window == 200_000
        assert not fallbacks
    else:
        assert limits.window_source == 'fallback'
        assert len(fallbacks) == 1, 'one warning per model, not per request'
        assert 'ContextPolicy(context_window=' in fallbacks[0].message


def test_strict_raises_for_an_unknown_window_at_construction() -> None:
    with pytest.raises(ContextWindowUnknownError):
        create_history_processor(model='ollama:llama3.2', policy=ContextPolicy(strict=True))
    create_history_processor(model='openai:gpt-4o', policy=ContextPolicy(strict=True))  # known: fine


async def test_strict_without_a_model_raises_at_the_first_request() -> None:
    processor = create_history_processor(policy=ContextPolicy(strict=True))
    with pytest.raises(ContextWindowUnknownError):
        await processor.process([user('hi')], model='ollama:llama3.2')


def test_the_reserve_is_the_models_output_cap_where_known() -> None:
    policy = ContextPolicy()
    gpt5 = policy.resolve(ModelInfo('openai:gpt-5', 400_000, 'genai-prices', max_output_tokens=128_000))
    assert gpt5.budget == 272_000
    assert gpt5.trigger == 120_000
    # a window set by hand is the input room the user means: the generic reserve applies
    manual = ContextPolicy(context_window=400_000).resolve(
        ModelInfo('openai:gpt-5', 400_000, 'genai-prices', max_output_tokens=128_000)
    )
    assert manual.budget == 398_976
    assert ContextPolicy(reserve_tokens=4_000).resolve(ModelInfo('x', 100_000, 'table')).budget == 96_000


def test_utilization_is_applied_once() -> None:
    """0.1.0 multiplied the processor's and the window's utilization: 0.5 and 0.5 gave a quarter."""
    limits = ContextPolicy(utilization=0.5, context_window=100_000).resolve(ModelInfo('x', None, 'unknown'))
    assert (limits.context_window, limits.budget) == (50_000, 50_000)


# ---- validating a finished run -----------------------------------------------------------------------------


def test_a_finished_run_is_valid_as_it_is() -> None:
    """`result.all_messages()` of a healthy run ends with the answer: valid without `finished=True`, which
    is still accepted; `finished=False` asks for a request at the end."""
    finished = [user('hi'), reply('hello')]
    assert validate_history(finished) == []
    assert validate_history(finished, finished=True) == []
    assert [v.code for v in validate_history(finished, finished=False)] == ['not_ending_with_request']
