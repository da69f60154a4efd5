"""Faults: the summarizer and planner fail, Redis dies mid-run, the spill store cannot write, the tokenizer is
gone. Every agent run completes against a strict provider, every request it sends is valid and within its
window, and nothing the user sent is lost: every planted user-prompt and tool-return marker is in the final
history, in the spill store, or in a summary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    Behaviour,
    RecordingStore,
    check_requests,
    fake_model,
    filler,
    full_processor,
    lost_markers,
    make_agent,
    strict,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from pydantic_ai_history import (
    CompactionResult,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    StageFailed,
    assert_valid_history,
)
from pydantic_ai_history.cache import FallbackCache, redis_cache
from pydantic_ai_history.store import ArtifactStore, DirectoryStore
from pydantic_ai_history.testing import StrictProvider
from pydantic_ai_history.tokens import TokenCounter

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

WINDOW = 16_000
TIMEOUT = 0.3
"""Short timeouts for the summarizer and planner, so a hanging model costs the suite little."""


async def run_turns(
    processor: HistoryProcessor,
    *,
    turns: int = 3,
    steps: int = 5,
    tool_chars: int = 30_000,
    on_step: Any = None,
    provider: StrictProvider | None = None,
) -> tuple[list[ModelMessage], set[str], StrictProvider]:
    """A multi-turn tool loop; every user prompt and tool return carries a unique marker.

    Returns the final history, the planted markers and the provider.
    """
    provider = provider if provider is not None else strict(steps, WINDOW)
    agent = make_agent(provider.model(), processor)
    planted: set[str] = set()
    state = {'turn': 0, 'calls': 0}

    @agent.tool_plain
    def fetch(n: int) -> str:
        """Fetch page n of the report."""
        state['calls'] += 1
        if on_step is not None:
            on_step(state['turn'], state['calls'])
        marker = f'MARK-tool{state["turn"]}-{state["calls"]}'
        planted.add(marker)
        return f'{marker} page {n}\n' + filler(tool_chars, seed=state['calls'] * 100)

    history: list[ModelMessage] = []
    for turn in range(turns):
        state['turn'] = turn
        marker = f'MARK-user{turn}-0'
        planted.add(marker)
        result = await agent.run(f'{marker} Summarize the report, part {turn}.', message_history=history)
        assert result.output == 'All done.'
        history = result.all_messages()
        # a stored history ends with the final answer; the next turn's request completes it
        assert_valid_history([*history, ModelRequest(parts=[UserPromptPart(content='next')])])
    check_requests(provider)
    return history, planted, provider


def summaries(events: list[HistoryEvent]) -> list[str]:
    return [e.summary for e in events if isinstance(e, CompactionResult)]


def _processor(summarizer: Any, events: list[HistoryEvent], store: Any, **extra: Any) -> Any:
    """The suite's processor: a small window, so compaction and spilling happen within a few turns."""
    return full_processor(
        context_window=WINDOW,
        max_tokens=8_000,
        target_tokens=3_000,
        # Most of the trigger for artifacts: they are reduced, and the history still grows past the trigger,
        # so both stages act within a few turns.
        artifact_budget=7_000,
        summarizer=summarizer,
        store=store,
        on_event=events.append,
        **extra,
    )


async def test_baseline_every_stage_acts() -> None:
    """Without faults the run compacts with the LLM and reduces large tool outputs: the fault tests below
    exercise the same paths."""
    events: list[HistoryEvent] = []
    store = RecordingStore()
    behaviour = Behaviour('echo')
    processor = _processor(fake_model(behaviour), events, store)
    history, planted, _ = await run_turns(processor)
    methods = {e.method for e in events if isinstance(e, CompactionResult)}
    assert 'llm' in methods
    assert behaviour.calls >= 1
    assert store.puts, 'no large tool output was spilled'
    assert not [e for e in events if isinstance(e, StageFailed)]
    assert lost_markers(planted, history, store=store, summaries=summaries(events)) == set()


@pytest.mark.parametrize('mode', ['raise', 'hang', 'empty', 'huge', 'garbage'])
async def test_summarizer_faults(mode: str) -> None:
    events: list[HistoryEvent] = []
    store = RecordingStore()
    behaviour = Behaviour(mode)
    processor = _processor(fake_model(behaviour), events, store, summarizer_timeout=TIMEOUT)
    history, planted, _ = await run_turns(processor)
    results = [e for e in events if isinstance(e, CompactionResult)]
    assert results, 'the run never compacted: the fault was not exercised'
    assert behaviour.calls >= 1
    if mode != 'garbage':  # garbage text is still a non-empty summary of acceptable length
        # stub events ask no summarizer; every summary stood in for a failed one
        methods = [r.method for r in results]
        assert set(methods) <= {'digest', 'truncate', 'cache', 'stubs'}, methods
        assert {'digest', 'truncate'} & set(methods), methods
        assert any(r.error for r in results)
    assert not [e for e in events if isinstance(e, StageFailed)]
    if mode != 'garbage':
        assert lost_markers(planted, history, store=store, summaries=summaries(events)) == set()


async def test_garbage_summary_loses_nothing() -> None:
    events: list[HistoryEvent] = []
    store = RecordingStore()
    processor = _processor(fake_model(Behaviour('garbage')), events, store)
    history, planted, _ = await run_turns(processor)
    assert lost_markers(planted, history, store=store, summaries=summaries(events)) == set()


@pytest.mark.parametrize('mode', ['raise', 'hang', 'garbage'])
async def test_planner_and_artifact_summarizer_faults(mode: str) -> None:
    events: list[HistoryEvent] = []
    store = RecordingStore()
    planner, summarizer = Behaviour(mode), Behaviour(mode)
    processor = _processor(
        fake_model(Behaviour('echo')),
        events,
        store,
        planner=fake_model(planner, 'planner'),
        planner_timeout=TIMEOUT,
        artifact_summarizer=fake_model(summarizer),
        summarizer_timeout=TIMEOUT,
        default_reduction='summarize',
    )
    history, planted, _ = await run_turns(processor, tool_chars=30_000)
    codes = {e.code for e in events if isinstance(e, HistoryWarning)}
    assert planner.calls >= 1
    assert 'artifact_planner_failed' in codes
    assert not [e for e in events if isinstance(e, StageFailed)]
    assert lost_markers(planted, history, store=store, summaries=summaries(events)) == set()


@pytest.mark.redis
async def test_redis_killed_mid_run(redis_server: Any) -> None:
    events: list[HistoryEvent] = []
    store = RecordingStore()
    cache = redis_cache(redis_server.url, socket_timeout=0.5)

    def kill(turn: int, call: int) -> None:
        if turn == 1 and call == 8:
            redis_server.stop()

    processor = _processor(fake_model(Behaviour('echo')), events, store, cache=cache)
    try:
        history, planted, _ = await run_turns(processor, on_step=kill)
    finally:
        await cache.aclose()
    assert redis_server.process is None, 'the server was not killed'
    assert isinstance(cache, FallbackCache)
    assert cache.primary.stats.hits + cache.primary.stats.misses > 0, 'Redis was never used before it died'
    assert cache.degraded
    assert cache.fallback.stats.hits + cache.fallback.stats.misses > 0, 'the fallback never served'
    assert not [e for e in events if isinstance(e, StageFailed)]
    assert lost_markers(planted, history, store=store, summaries=summaries(events)) == set()


def _file_root(tmp_path: Path) -> DirectoryStore:
    path = tmp_path / 'not-a-dir'
    path.write_text('occupied')
    return DirectoryStore(path)


def _below_file(tmp_path: Path) -> DirectoryStore:
    path = tmp_path / 'not-a-dir'
    path.write_text('occupied')
    return DirectoryStore(path / 'spill')


def _read_only(tmp_path: Path) -> DirectoryStore:
    if os.geteuid() == 0:
        pytest.skip('running as root: a read-only mode does not stop root from writing')
    path = tmp_path / 'ro'
    path.mkdir()
    path.chmod(0o555)
    return DirectoryStore(path)


@pytest.mark.parametrize('make_store', [_file_root, _below_file, _read_only])
async def test_spill_store_cannot_write(tmp_path: Path, make_store: Any) -> None:
    """The store raises StoreError on every put: reduced content stays inline, with a warning."""
    store: ArtifactStore = make_store(tmp_path)
    events: list[HistoryEvent] = []
    processor = _processor(fake_model(Behaviour('echo')), events, store)
    history, planted, _ = await run_turns(processor)
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert 'artifact_store_failed' in codes
    assert not [e for e in events if isinstance(e, StageFailed)]
    # nothing could be stored, so every marker is in the history or a summary
    assert lost_markers(planted, history, summaries=summaries(events)) == set()


async def test_tokenizer_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken cannot load its encoding: the package estimates instead and the run still fits its window
    (the strict provider keeps its own, already loaded, encoder)."""
    import tiktoken

    import pydantic_ai_history.tokens._encodings as encodings_module

    def unavailable(name: Any) -> Any:
        raise ConnectionError(f'cannot download {name}: no network')

    events: list[HistoryEvent] = []
    store = RecordingStore()
    processor = _processor(fake_model(Behaviour('echo')), events, store)
    provider = strict(5, WINDOW)
    provider.count([])  # the provider's own tokenizer is loaded before tiktoken's goes away
    monkeypatch.setattr(encodings_module, '_loaded', {})  # neither the packaged file nor tiktoken's
    monkeypatch.setattr(encodings_module, 'packaged_encoding', unavailable)
    monkeypatch.setattr(tiktoken, 'get_encoding', unavailable)
    counter = TokenCounter('gpt-4o')
    assert counter.offline
    assert counter.count_text('hello world, this is a test') > 0
    history, planted, _ = await run_turns(processor, provider=provider)
    assert all(c.offline for c in processor._counters.values())
    assert any(isinstance(e, CompactionResult) for e in events)
    assert lost_markers(planted, history, store=store, summaries=summaries(events)) == set()
