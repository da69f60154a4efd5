"""Two tenants on one processor and one shared store: no read-back, eviction or breaker crosses them.

Alice's tool returns a long account note ending in "Card PIN reset code: 739" (one of 1,000 templated
statements). Mallory knows the template. She enumerates every id that content could have (the plain
content hash, and the keyed id her own scope would give it), tries Alice's real id as if it had leaked,
and reads them all through `read_artifact` from her own run: every answer must be the "not stored" text a
never-stored id gets. Each case runs on a shared `MemoryStore`, `DirectoryStore` and `RedisStore`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import filler, make_agent
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.context._context import default_scope
from pydantic_ai_history.readback import READ_ARTIFACT_TOOL, read_artifact_text
from pydantic_ai_history.stages.compactor import CompactionSettings
from pydantic_ai_history.store import ArtifactStore, DirectoryStore, MemoryStore, RedisStore, artifact_id

pytestmark = pytest.mark.anyio

WINDOW = 16_000
ART_ID = re.compile(r'art_[0-9a-f]{32}')
ALICE_CODE = 739


def statement(code: int) -> str:
    """The templated account note: long enough to be spilled, one secret line at the end."""
    return filler(40_000, seed=7) + f'\nCard PIN reset code: {code:03d}\n'


def tenant_scope(ctx: RunContext[str]) -> str:
    return f'tenant:{ctx.deps}'


def missing(artifact: str) -> str:
    """What `read_artifact` answers for an id that was never stored."""
    return f'Error: no artifact with id {artifact!r} is stored (it may have been evicted).'


@pytest.fixture(params=['memory', 'directory', pytest.param('redis', marks=pytest.mark.redis)])
async def shared_store(request: Any, tmp_path: Any) -> AsyncIterator[ArtifactStore]:
    store: ArtifactStore
    if request.param == 'memory':
        store = MemoryStore()
    elif request.param == 'directory':
        store = DirectoryStore(tmp_path / 'spill')
    else:
        store = RedisStore(request.getfixturevalue('redis_server').url)
    yield store
    await store.aclose()


def _tool_returns(messages: list[ModelMessage], tool: str) -> list[str]:
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == tool
    ]


class Script:
    """A main model that makes the given tool calls, one response per list entry, then answers (one run)."""

    def __init__(self, steps: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self.steps = steps
        self.seen: list[list[ModelMessage]] = []
        self.__name__ = 'script'  # FunctionModel on 1.x names the model after the function

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # one instance per run; the window may drop this run's own prompt, so count calls, not messages
        step = len(self.seen)
        self.seen.append(list(messages))
        if step >= len(self.steps):
            return ModelResponse(parts=[TextPart('Done.')])
        calls = self.steps[step]
        return ModelResponse(
            parts=[
                ToolCallPart(tool, args, tool_call_id=f's{step}c{i}') for i, (tool, args) in enumerate(calls)
            ]
        )


def _agent(processor: Any) -> Any:
    agent = make_agent(None, processor, deps_type=str)
    captured: dict[str, RunContext[str]] = {}

    @agent.tool
    async def account_notes(ctx: RunContext[str]) -> str:
        """The account notes of the signed-in user."""
        captured[ctx.deps] = ctx
        # Mallory's own notes are long too: they are spilled, so her run is offered `read_artifact`.
        return statement(ALICE_CODE) if ctx.deps == 'alice' else filler(40_000, seed=11)

    agent.captured = captured  # type: ignore[attr-defined]
    return agent


async def test_no_read_of_the_other_tenants_artifact(shared_store: ArtifactStore) -> None:
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW), store=shared_store, scope=tenant_scope
    )
    agent = _agent(processor)

    # Alice: her notes are spilled, and she reads them back.
    alice_model = Script([[('account_notes', {})]])
    alice = await agent.run('What is on my account?', model=FunctionModel(alice_model), deps='alice')
    stubs = _tool_returns(alice.all_messages(), 'account_notes')
    assert 'Card PIN reset code' not in stubs[0], 'the note was not spilled: nothing to protect'
    alice_id = ART_ID.search(stubs[0]).group()  # type: ignore[union-attr]
    own = await read_artifact_text(shared_store, alice_id, query='PIN reset code', scope='tenant:alice')
    assert f'Card PIN reset code: {ALICE_CODE:03d}' in own

    # Mallory: Alice's real id (as if leaked), the content hash and a never-stored id, from her own run.
    never = 'art_' + 'f' * 64
    plain = artifact_id(statement(ALICE_CODE).encode())
    probes = [alice_id, plain, never]
    mallory_model = Script(
        [[('account_notes', {})], [(READ_ARTIFACT_TOOL, {'artifact_id': a, 'query': 'PIN'}) for a in probes]]
    )
    mallory = await agent.run('Show my notes.', model=FunctionModel(mallory_model), deps='mallory')
    answers = _tool_returns(mallory.all_messages(), READ_ARTIFACT_TOOL)
    assert answers == [missing(a) for a in probes]

    # Every id the 1,000 templated statements could have, looked up exactly as her `read_artifact` does.
    mallory_ctx = agent.captured['mallory']
    scope = processor.scope_of(mallory_ctx)
    assert scope == 'tenant:mallory'
    found = []
    for code in range(1_000):
        data = statement(code).encode()
        for candidate in (artifact_id(data), shared_store.artifact_id(data, scope=scope)):
            answer = await read_artifact_text(shared_store, candidate, query='PIN', scope=scope)
            if answer != missing(candidate):
                found.append((code, answer))
    assert found == []
    # The keyed id is not the content hash: knowing the content does not give the id.
    assert alice_id != plain
    assert alice_id not in {
        shared_store.artifact_id(statement(c).encode(), scope=scope) for c in range(1_000)
    }


@pytest.mark.skipif(
    not hasattr(RunContext, '__dataclass_fields__')
    or 'conversation_id' not in RunContext.__dataclass_fields__,
    reason='this pydantic-ai version has no conversation_id (1.0 runs share the default scope)',
)
async def test_default_scope_is_the_conversation() -> None:
    store = MemoryStore()
    processor = create_history_processor(policy=ContextPolicy(context_window=WINDOW), store=store)
    agent = _agent(processor)
    first = await agent.run('Notes?', model=FunctionModel(Script([[('account_notes', {})]])), deps='alice')
    alice_id = ART_ID.search(_tool_returns(first.all_messages(), 'account_notes')[0]).group()  # type: ignore[union-attr]

    # The same conversation, continued from its saved history, reads it back...
    again = Script([[(READ_ARTIFACT_TOOL, {'artifact_id': alice_id, 'query': 'PIN'})]])
    second = await agent.run(
        'And the code?', model=FunctionModel(again), deps='alice', message_history=first.all_messages()
    )
    assert (
        f'Card PIN reset code: {ALICE_CODE:03d}'
        in _tool_returns(second.new_messages(), READ_ARTIFACT_TOOL)[0]
    )
    # ...another conversation cannot: once it has spilled notes of its own, so it is offered the tool.
    probe = [(READ_ARTIFACT_TOOL, {'artifact_id': alice_id, 'query': 'PIN'})]
    fresh = Script([[('account_notes', {})], probe])
    other = await agent.run('Read it.', model=FunctionModel(fresh), deps='mallory')
    assert _tool_returns(other.all_messages(), READ_ARTIFACT_TOOL) == [missing(alice_id)]


def _pages_agent(processor: Any, page_chars: int) -> Any:
    agent = make_agent(None, processor, deps_type=str)

    @agent.tool
    async def fetch(ctx: RunContext[str], n: int) -> str:
        """Fetch page n."""
        return f'{ctx.deps} page {n}: ' + filler(page_chars, seed=n * 31 + len(ctx.deps))

    return agent


def _fetches(pages: int) -> Script:
    return Script([[('fetch', {'n': n})] for n in range(pages)])


@pytest.mark.parametrize('backend', ['memory', 'directory', pytest.param('redis', marks=pytest.mark.redis)])
async def test_no_eviction_across_tenants(backend: str, tmp_path: Any, request: Any) -> None:
    # Budgets for about two spilled pages per tenant and three in all.
    page = 30_000
    store: ArtifactStore
    if backend == 'memory':
        store = MemoryStore(max_bytes=int(page * 3.5), max_scope_bytes=int(page * 2.5))
    elif backend == 'directory':
        store = DirectoryStore(tmp_path / 'spill', max_scope_bytes=int(page * 2.5))
    else:
        store = RedisStore(request.getfixturevalue('redis_server').url, max_scope_bytes=int(page * 2.5))
    warnings: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW),
        store=store,
        scope=tenant_scope,
        compaction=False,
        on_event=warnings.append,
    )
    agent = _pages_agent(processor, page)
    try:
        alice = await agent.run('Read page 0.', model=FunctionModel(_fetches(1)), deps='alice')
        alice_id = ART_ID.search(_tool_returns(alice.all_messages(), 'fetch')[0]).group()  # type: ignore[union-attr]
        assert await store.get(alice_id, scope='tenant:alice') is not None

        # Mallory pushes far more than her budget through the same processor and store.
        await agent.run('Read everything.', model=FunctionModel(_fetches(8)), deps='mallory')

        # Alice's original is still there, and she can still store new ones.
        data = await store.get(alice_id, scope='tenant:alice')
        assert data is not None
        assert data.decode().startswith('alice page 0: ')
        later = await agent.run('Read page 1.', model=FunctionModel(_fetches(1)), deps='alice')
        later_id = ART_ID.search(_tool_returns(later.all_messages(), 'fetch')[0]).group()  # type: ignore[union-attr]
        assert await store.get(later_id, scope='tenant:alice') is not None

        # Mallory was held to her own budget: her own oldest made room (memory), or she was refused.
        refused = [
            e for e in warnings if getattr(e, 'code', '') == 'artifact_store_failed' and 'budget' in e.message
        ]
        if isinstance(store, MemoryStore):
            assert 0 < store.scope_bytes('tenant:mallory') <= store.max_scope_bytes
            assert store.size_bytes <= store.max_bytes
        else:
            assert refused, 'Mallory was never refused: the budget did not bite'
    finally:
        await store.aclose()


async def test_no_breaker_across_tenants() -> None:
    calls: list[str] = []

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = str(messages)
        calls.append('mallory' if 'POISON' in prompt else 'alice')
        if 'POISON' in prompt:
            raise RuntimeError('the provider refused this content')
        return ModelResponse(parts=[TextPart('Summary: pages were read.')])

    events: list[HistoryEvent] = []
    # summarizer calls are the point: no cheap tier of stubs before them
    settings = CompactionSettings(max_failures=2, cooldown_seconds=3_600, stub_tool_results=False)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=6_000, target_tokens=2_500),
        summarizer=SummarizerSettings(model=FunctionModel(summarize), timeout=5),
        compaction=settings,
        artifacts=False,
        scope=tenant_scope,
        on_event=events.append,
    )
    agent = make_agent(None, processor, deps_type=str)

    @agent.tool
    async def fetch(ctx: RunContext[str], n: int) -> str:
        """Fetch page n."""
        poison = ' POISON' if ctx.deps == 'mallory' else ''
        return f'{ctx.deps} page {n}{poison}: ' + filler(5_000, seed=n)

    # Mallory's content makes the summarizer fail until her breaker opens.
    for _ in range(4):
        await agent.run('Read all pages.', model=FunctionModel(_fetches(6)), deps='mallory')
    (compactor,) = [stage for stage in processor.history_stages if stage.name == 'compactor']
    breakers = compactor._breakers  # type: ignore[attr-defined]
    assert breakers.failures('summarizer', 'tenant:mallory') == 2
    assert not breakers.allows('summarizer', 'tenant:mallory')
    mallory_calls = calls.count('mallory')
    mallory_methods = [e.method for e in events if isinstance(e, CompactionResult)]
    assert 'llm' not in mallory_methods
    assert len(mallory_methods) > mallory_calls, 'the open breaker did not spare any summarizer call'

    # Alice's compaction still gets an LLM summary.
    events.clear()
    await agent.run('Read all pages.', model=FunctionModel(_fetches(6)), deps='alice')
    alice_methods = [e.method for e in events if isinstance(e, CompactionResult)]
    assert alice_methods
    assert set(alice_methods) == {'llm'}
    assert breakers.allows('summarizer', 'tenant:alice')
    assert calls.count('mallory') == mallory_calls  # and Mallory's breaker stayed open


def test_default_scope_prefers_the_conversation_then_the_first_run() -> None:
    class Ctx:
        def __init__(self, **kwargs: Any) -> None:
            self.__dict__.update(kwargs)

    class Message:
        def __init__(self, run_id: str | None) -> None:
            self.run_id = run_id

    assert default_scope(None) == ''
    assert default_scope(Ctx(conversation_id='c1', run_id='r9', messages=[])) == 'conversation:c1'
    chain = Ctx(conversation_id=None, run_id='r9', messages=[Message(None), Message('r1'), Message('r9')])
    assert default_scope(chain) == 'run:r1'  # the run that began the history
    assert default_scope(Ctx(run_id='r9', messages=[])) == 'run:r9'
    assert default_scope(Ctx(messages=[])) == ''  # pydantic-ai 1.0: one shared scope


async def test_a_failing_scope_key_confines_the_run_to_itself(caplog: Any) -> None:
    def broken(ctx: RunContext[str]) -> str:
        raise KeyError('tenant')

    store = MemoryStore()
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW), store=store, scope=broken
    )
    agent = _agent(processor)
    run = await agent.run('Notes?', model=FunctionModel(Script([[('account_notes', {})]])), deps='alice')
    stub = _tool_returns(run.all_messages(), 'account_notes')[0]
    assert ART_ID.search(stub), 'the note was not spilled'
    ctx = agent.captured['alice']
    scope = processor.scope_of(ctx)
    assert scope.startswith('unscoped-run:')
    assert scope != default_scope(ctx)
    assert 'the scope callable raised' in caplog.text
    assert await store.get(ART_ID.search(stub).group(), scope='') is None  # type: ignore[union-attr]
