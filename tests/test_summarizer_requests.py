"""Every summarizer request bounds its answer: it sends a `max_tokens` (the user's wins), an answer cut there
is a failure, and on a local server `timeout='auto'` is a deadline computed from that `max_tokens`."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _compaction import (
    SetupCompactor,
    StubSummarizer,
    agent_with,
    compaction_setup,
    context,
    tool_loop,
)
from _history import call, result, system_user
from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.context._llm import (
    AUTO_TIMEOUT_BASE_SECONDS,
    LOCAL_ANSWER_TOKENS_PER_SECOND,
    LOCAL_PROMPT_CHARS_PER_SECOND,
    THINKING_ALLOWANCE_TOKENS,
    AnswerCutError,
    answer_max_tokens,
    run_text,
    summarizer_timeout,
    with_max_tokens,
)
from pydantic_ai_history.stages.artifacts._strategies import summarize_text

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings('ignore::DeprecationWarning')]

HAS_FINISH_REASON = 'finish_reason' in {f.name for f in dataclasses.fields(ModelResponse)}
SUMMARY_CAP = 2_000
"""`CompactionSettings.summary_max_tokens`'s default."""


def _compactor(stub: StubSummarizer, **kwargs: Any) -> SetupCompactor:
    return SetupCompactor(
        compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model(), **kwargs)
    )


def test_the_request_budget_is_the_cap_and_a_half_plus_256() -> None:
    assert answer_max_tokens(2_000) == 3_256
    assert answer_max_tokens(1_000) == 1_756


async def test_a_compaction_summary_request_carries_its_max_tokens() -> None:
    stub = StubSummarizer()
    ctx, events = context()
    await _compactor(stub)(tool_loop(40), ctx)
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['llm']
    assert stub.settings == [{'max_tokens': answer_max_tokens(SUMMARY_CAP)}]


async def test_each_chunk_merge_carries_it_too() -> None:
    stub = StubSummarizer()
    messages = [system_user('sys', 'task')]
    for i in range(60):
        messages += [call('fetch', f'c{i}', {'i': i}), result('fetch', f'c{i}', 'alpha beta gamma ' * 400)]
    ctx, _ = context()
    setup = compaction_setup(
        max_tokens=20_000,
        target_tokens=8_000,
        summarizer_model=stub.model(),
        summarizer_input_tokens=8_000,
        summarizer_view_tokens=None,
        tool_result_max_tokens=None,
        stub_tool_results=False,
    )
    await SetupCompactor(setup)(messages, ctx)
    assert stub.calls >= 2, 'the transcript was summarized in chunks'
    assert {s['max_tokens'] for s in stub.settings} == {answer_max_tokens(SUMMARY_CAP)}


async def test_the_users_max_tokens_and_settings_win() -> None:
    stub = StubSummarizer()
    ctx, _ = context()
    given = {'max_tokens': 5_000, 'temperature': 0.2}
    await _compactor(stub, summarizer_settings=given)(tool_loop(40), ctx)
    assert stub.settings == [given]
    # the model's own settings: pydantic-ai merges them under the request's, so none is added over them
    own = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('x')]), settings={'max_tokens': 700})
    assert with_max_tokens({'temperature': 0.1}, own, 3_256) == {'temperature': 0.1}
    assert with_max_tokens({'temperature': 0.1}, 'openai:gpt-4o', 3_256) == {
        'temperature': 0.1,
        'max_tokens': 3_256,
    }
    assert with_max_tokens(None, 'openai:gpt-4o', None) is None


async def test_an_agent_run_sends_it_through_the_processor() -> None:
    """In a run (2.x: the processor's operations; 1.x: in place) the request still carries it."""
    seen: list[Any] = []

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.model_settings)
        return ModelResponse(parts=[TextPart('## Current state\nfetched pages')])

    steps = iter(range(10))

    def loop(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = next(steps, None)
        if step is not None:
            return ModelResponse(parts=[call('fetch', f'c{step}', {'i': step}).parts[0]])
        return ModelResponse(parts=[TextPart('done')])

    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=6_000),
        summarizer=SummarizerSettings(model=FunctionModel(summarize)),
        on_event=events.append,
    )
    agent = agent_with(FunctionModel(loop), processor)

    @agent.tool_plain
    def fetch(i: int) -> str:
        """Fetch a page."""
        return f'page {i}: ' + 'the quick brown fox jumps over the lazy dog ' * 60

    assert (await agent.run('go')).output == 'done'
    assert any(isinstance(e, CompactionResult) and e.method == 'llm' for e in events)
    assert seen
    assert all(s is not None and s.get('max_tokens') == answer_max_tokens(SUMMARY_CAP) for s in seen)


class _Thinker:
    """A model whose profile says it thinks by default (2.x profiles are mappings, 1.x ones objects)."""

    settings = None

    def __init__(self, *, as_mapping: bool) -> None:
        flags = {'thinking_always_enabled': True}
        self.profile: Any = flags if as_mapping else SimpleNamespace(**flags)


def _sent_max_tokens(settings: Any, model: object, answer: int) -> object:
    sent = with_max_tokens(settings, model, answer)
    return sent.get('max_tokens') if sent is not None else None


@pytest.mark.parametrize('as_mapping', [True, False])
def test_a_model_that_thinks_gets_its_thinking_on_top(as_mapping: bool) -> None:
    """Thinking counts in `max_tokens` (OpenAI's reasoning models, Anthropic's `budget_tokens`): a summary's
    budget alone would leave a model that thinks no room to answer, or be refused (Anthropic)."""
    thinker, answer = _Thinker(as_mapping=as_mapping), 3_256
    assert with_max_tokens(None, thinker, answer) == {'max_tokens': answer + THINKING_ALLOWANCE_TOKENS}
    assert with_max_tokens({'openai_reasoning_effort': 'none'}, thinker, answer) == {
        'openai_reasoning_effort': 'none',
        'max_tokens': answer,
    }
    plain = 'openai:gpt-4o'
    anthropic = {'anthropic_thinking': {'type': 'enabled', 'budget_tokens': 4_000}}
    assert with_max_tokens(anthropic, plain, answer) == {**anthropic, 'max_tokens': answer + 4_000}
    assert _sent_max_tokens({'thinking': 'xhigh'}, plain, answer) == answer + 32_768
    assert _sent_max_tokens({'thinking': True}, plain, answer) == answer + THINKING_ALLOWANCE_TOKENS
    dynamic = {'google_thinking_config': {'thinking_budget': -1}}
    assert _sent_max_tokens(dynamic, plain, answer) == answer + THINKING_ALLOWANCE_TOKENS
    assert with_max_tokens({'thinking': False}, thinker, answer) == {'thinking': False, 'max_tokens': answer}


@dataclasses.dataclass
class _RecordingOperations:
    requests: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    async def request_text(self, purpose: str, prompt: str, **kwargs: Any) -> str:
        self.requests.append({'purpose': purpose, **kwargs})
        return 'a short summary'


async def test_an_artifact_summary_request_carries_its_max_tokens() -> None:
    operations = _RecordingOperations()
    await summarize_text(
        'a long tool output ' * 100,
        focus=None,
        model='openai:gpt-4o',
        max_tokens=600,
        timeout='auto',
        operations=operations,  # type: ignore[arg-type]
    )
    assert operations.requests[0]['purpose'] == 'artifact_summary'
    assert operations.requests[0]['max_tokens'] == answer_max_tokens(600)


@pytest.mark.skipif(not HAS_FINISH_REASON, reason='pydantic-ai 1.0 has no ModelResponse.finish_reason')
async def test_an_answer_cut_at_max_tokens_is_a_failure_and_the_digest_stands_in() -> None:
    def cut(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('## Goal and constraints\nmigrate the')], finish_reason='length')

    with pytest.raises(AnswerCutError, match=r'max_tokens=3256'):
        await run_text(FunctionModel(cut), 'summarize', instructions='be brief', timeout=5, max_tokens=3_256)

    ctx, events = context()
    setup = compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=FunctionModel(cut))
    await SetupCompactor(setup)(tool_loop(40), ctx)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'digest'
    assert 'AnswerCutError' in (event.error or '')


class _LocalModel(FunctionModel):
    @property
    def base_url(self) -> str:
        return 'http://127.0.0.1:8080/v1'


def test_a_local_server_gets_a_deadline_from_max_tokens() -> None:
    local = _LocalModel(lambda m, i: ModelResponse(parts=[TextPart('x')]), model_name='qwen')
    expected = (
        AUTO_TIMEOUT_BASE_SECONDS
        + 30_000 / LOCAL_PROMPT_CHARS_PER_SECOND
        + 3_256 / LOCAL_ANSWER_TOKENS_PER_SECOND
    )
    assert summarizer_timeout('auto', local, 30_000, 3_256) == expected
    assert 1_800 < expected < 2_400, 'about half an hour for a 2,000-token summary of 30,000 characters'
    assert summarizer_timeout('auto', local, 30_000) is None, 'no max_tokens: no basis for a deadline'
    assert summarizer_timeout(10, local, 30_000, 3_256) == 10
    assert summarizer_timeout(None, local, 30_000, 3_256) is None


async def test_a_local_deadline_that_runs_out_names_its_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio

    import pydantic_ai_history.context._llm as llm

    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await anyio.sleep(5)
        return ModelResponse(parts=[TextPart('late')])

    # the real deadline is minutes: faster speeds show the message's shape in a fraction of a second
    monkeypatch.setattr(llm, 'AUTO_TIMEOUT_BASE_SECONDS', 0.0)
    monkeypatch.setattr(llm, 'LOCAL_ANSWER_TOKENS_PER_SECOND', 10_000.0)
    with pytest.raises(
        TimeoutError,
        match=r"'auto' on a local server: 10 characters at 100 characters/s and up to 2,000 tokens",
    ):
        await run_text(
            _LocalModel(slow, model_name='qwen'),
            'summarize',
            instructions='x',
            timeout='auto',
            max_tokens=2_000,
        )
