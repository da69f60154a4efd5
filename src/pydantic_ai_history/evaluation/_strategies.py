"""The compaction strategies under evaluation (`STRATEGIES`), each on the same cut of the same session: ours
(LLM summary, fallback digest), the window alone, and the peers where installed. Every model call is metered.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart
from pydantic_ai.toolsets import AbstractToolset

from ..budget._policy import ContextPolicy
from ..cache import MemoryCache
from ..context._summarizer_settings import ModelRef, SummarizerSettings
from ..events import CompactionResult
from ..processor import HistoryProcessor, create_history_processor
from ..stages.compactor import CompactionSettings
from ..store import ArtifactStore, MemoryStore
from ..tokens import TokenCounter
from ._sessions import compaction_target, kept_head, tail_start

StrategyStatus = Literal['ok', 'failed', 'not installed']

COUNTING_MODEL = 'openai:gpt-4o'
"""Tokens are counted alike for every strategy (o200k), whatever model summarizes."""
SUMMARY_RESERVE = CompactionSettings().summary_max_tokens + 140
"""What the compactor's target allows the summary on top of the kept share (its cap, framing, reference)."""
TRAIL_SHARE = CompactionSettings().trail_share
"""The share of the target the summary's trail takes on top of that, so the kept share stays the same."""


@dataclass(frozen=True, kw_only=True)
class Cut:
    """Where a session is cut: the same for every strategy."""

    head: int
    """Leading messages kept verbatim (system prompt, first user turn), as our compactor kept them."""
    start: int
    """The first message of the verbatim tail; `messages[head:start]` is what is evicted."""


@dataclass(kw_only=True)
class Compacted:
    """What one strategy made of one session's cut."""

    strategy: str
    """The strategy's key (`summary`, `digest`, `window`, `harness`, `summarization`)."""
    status: StrategyStatus
    """`ok`, `failed` (the note says why) or `not installed` (a peer whose package does not import)."""
    messages: list[ModelMessage] = field(default_factory=list)
    """The compacted history (empty unless `ok`)."""
    store: ArtifactStore | None = None
    """Where the strategy keeps what it evicted, for `read_artifact`; None when it keeps nothing."""
    scope: str = ''
    """The store scope the strategy wrote in."""
    readback: AbstractToolset[Any] | None = None
    """The strategy's read-back toolset (`read_artifact` on `store`, offered while the history names it), for
    the model answering with the compacted history; None when it keeps nothing."""
    tokens_spent: int = 0
    """Input plus output tokens of the strategy's own model calls (the summarizer's)."""
    calls: int = 0
    """The strategy's model calls."""
    note: str = ''
    """Why it failed, or what differed (a peer that moved the cut)."""


def metered(model: ModelRef) -> Any:
    """`model` (a pydantic-ai model or its name) wrapped so `.tokens` and `.calls` count what it spent."""
    from pydantic_ai.models.wrapper import WrapperModel

    class _Metered(WrapperModel):
        tokens = 0
        calls = 0

        async def request(self, *args: Any, **kwargs: Any) -> ModelResponse:
            response = await super().request(*args, **kwargs)
            self.tokens += response.usage.total_tokens
            self.calls += 1
            return response

    return _Metered(cast(Any, model))


Strategy = Callable[[list[ModelMessage], Cut, Any], Awaitable[Compacted]]
"""A peer's strategy: `(session messages, cut, metered summarizer) -> Compacted`."""


async def compact_with_ours(
    key: str, messages: list[ModelMessage], total: int, target: int, summarizer: Any
) -> tuple[Compacted, CompactionResult | None]:
    """Our processor's compaction of `messages` (`total` tokens) to `target`, and its last compaction event.

    The window and trigger are set far above the history: only the manual compaction acts, cut by `target`.
    """
    total = total * 2 + target + 10_000
    store = MemoryStore()
    events: list[CompactionResult] = []
    processor = create_history_processor(
        policy=ContextPolicy(
            context_window=total * 2, max_tokens=total, target_tokens=target, reserve_tokens=0
        ),
        summarizer=SummarizerSettings(model=summarizer),
        artifacts=False,
        window=False,
        store=store,
        cache=MemoryCache(),
        scope=_eval_scope,
        on_history_event=lambda event: events.append(event) if isinstance(event, CompactionResult) else None,
    )
    result = await processor.compact(messages, model=COUNTING_MODEL)
    compacted = Compacted(
        strategy=key,
        status='ok',
        messages=result,
        store=store,
        scope=processor.scope_of(None),
        readback=processor.readback_toolset(),
    )
    return compacted, events[-1] if events else None


def recalling_processor(store: ArtifactStore, recall_chars: int) -> HistoryProcessor:
    """Ours as the answering model's capability on a compacted history whose originals `store` holds: no
    compaction (the trigger is far away), only recall (`CompactionSettings.recall_chars`) and read-back."""
    return create_history_processor(
        policy=ContextPolicy(context_window=10**9, max_tokens=10**8, target_tokens=10**7, reserve_tokens=0),
        summarizer=SummarizerSettings(model=_no_summarizer()),
        compaction=CompactionSettings(recall_chars=recall_chars),
        artifacts=False,
        window=False,
        store=store,
        scope=_eval_scope,
    )


def _eval_scope(ctx: Any) -> str:
    """The one scope of an evaluated session: where the compaction (which has no run) stored the transcript,
    so the answering runs read it back."""
    return ''


_NO_SUMMARY = 'the digest strategy writes no LLM summary'


def _no_summarizer() -> Any:
    from pydantic_ai.models.function import FunctionModel

    def unavailable(messages: list[ModelMessage], info: Any) -> ModelResponse:
        raise RuntimeError(_NO_SUMMARY)

    return FunctionModel(unavailable, model_name='no-summarizer')


async def digest_strategy(messages: list[ModelMessage], total: int, target: int) -> Compacted:
    """Our compactor with a summarizer that always fails: the deterministic digest. Its cut is the cut."""

    def expected_failure(record: logging.LogRecord) -> bool:  # one per call: concurrent runs remove their own
        return _NO_SUMMARY not in record.getMessage()  # the summarizer's failure is the point: no warning

    logger = logging.getLogger('pydantic_ai_history.compactor')
    logger.addFilter(expected_failure)
    try:
        compacted, _ = await compact_with_ours('digest', messages, total, target, _no_summarizer())
    finally:
        logger.removeFilter(expected_failure)
    return compacted


@dataclass(frozen=True, kw_only=True)
class SessionCut:
    """Where a session is cut, and the compaction that decided it."""

    total: int
    """The session's tokens, as the compactor estimates them."""
    target: int
    """The compactor's target that keeps about `keep_fraction` of the session verbatim."""
    digest: Compacted
    """Our compactor with the fallback digest (the `digest` strategy): its cut is every strategy's."""
    cut: Cut | None
    """The cut; None when nothing was compacted (the session is too short for the keep fraction)."""


async def session_cut(
    messages: list[ModelMessage], keep_fraction: float, counter: TokenCounter
) -> SessionCut:
    """Cut `messages` so about `keep_fraction` of their tokens stays verbatim: the cut the evaluation compacts
    every strategy at (and the one a probe's answer must lie before)."""
    total = counter.estimate(messages).total
    target = compaction_target(total, keep_fraction, SUMMARY_RESERVE, TRAIL_SHARE)
    digest = await digest_strategy(messages, total, target)
    start = tail_start(messages, digest.messages)
    cut = None if start is None else Cut(head=kept_head(messages, digest.messages), start=start)
    return SessionCut(total=total, target=target, digest=digest, cut=cut)


async def summary_strategy(
    messages: list[ModelMessage], cut: Cut, summarizer: Any, total: int, target: int
) -> Compacted:
    """Our compactor with the summarizer; the same target gives it the digest's cut (checked). Where the
    summarizer failed, the compactor's fallback wrote the summary, and the note says so."""
    compacted, event = await compact_with_ours('summary', messages, total, target, summarizer)
    start = tail_start(messages, compacted.messages)
    notes = [] if start == cut.start else [f'our compactor cut at message {start}, not {cut.start}']
    if event is not None and event.method != 'llm':
        notes.append(f'the summarizer failed ({event.error}): the {event.method} fallback wrote the summary')
    compacted.tokens_spent, compacted.calls, compacted.note = (
        summarizer.tokens,
        summarizer.calls,
        '; '.join(notes),
    )
    return compacted


async def window_strategy(messages: list[ModelMessage], cut: Cut, summarizer: Any) -> Compacted:
    """The sliding window alone: the head and the tail, the evicted part simply gone."""
    return Compacted(strategy='window', status='ok', messages=[*messages[: cut.head], *messages[cut.start :]])


async def summarization_strategy(messages: list[ModelMessage], cut: Cut, summarizer: Any) -> Compacted:
    """summarization-pydantic-ai's `SummarizationProcessor.execute_plan` on our cut (its own layout: the
    summary replaces everything before the cut, the first user turn included)."""
    try:
        from pydantic_ai_summarization import SummarizationProcessor  # type: ignore[import-not-found]
        from pydantic_ai_summarization.processor import CompressionPlan  # type: ignore[import-not-found]
    except ImportError:
        return _not_installed('summarization')

    processor = SummarizationProcessor(model=summarizer, trigger=('messages', 1), keep=('messages', 1))
    plan = CompressionPlan(
        cutoff_index=cut.start,
        messages_to_summarize=messages[: cut.start],
        preserved_messages=messages[cut.start :],
        system_parts=_system_parts(messages[: cut.start]),
    )
    outcome = await processor.execute_plan(plan)
    if not outcome.summarized:
        return Compacted(
            strategy='summarization', status='failed', note=f'not summarized ({outcome.skip_reason})'
        )
    return Compacted(
        strategy='summarization',
        status='ok',
        messages=list(outcome.messages),
        tokens_spent=summarizer.tokens,
        calls=summarizer.calls,
    )


async def harness_strategy(messages: list[ModelMessage], cut: Cut, summarizer: Any) -> Compacted:
    """pydantic-ai-harness's `SummarizingCompaction.compact`, told to keep the messages from our cut."""
    try:
        from pydantic_ai_harness.compaction import SummarizingCompaction  # type: ignore[import-not-found]
    except ImportError:
        return _not_installed('harness')
    from pydantic_ai import RunContext
    from pydantic_ai.usage import RunUsage

    # `compact()` is called directly: the trigger (`max_messages`) is never consulted, only the kept count
    compaction: Any = SummarizingCompaction(
        model=summarizer, max_messages=1, keep_messages=len(messages) - cut.start
    )
    ctx: Any = RunContext(deps=None, model=summarizer, usage=RunUsage())
    result = await compaction.compact(list(messages), ctx)  # harness 0.62: `compact(messages, ctx)`
    start = tail_start(messages, result)
    note = '' if start == cut.start else f'its safe cut moved the cut to message {start}'
    return Compacted(
        strategy='harness',
        status='ok',
        messages=list(result),
        tokens_spent=summarizer.tokens,
        calls=summarizer.calls,
        note=note,
    )


def _not_installed(key: str) -> Compacted:
    return Compacted(strategy=key, status='not installed', note=f'pip install {PEER_PACKAGES[key][1]}')


def _system_parts(messages: Sequence[ModelMessage]) -> list[SystemPromptPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, SystemPromptPart)
    ]


STRATEGIES: dict[str, str] = {
    'summary': 'ours: LLM summary + stored transcript',
    'digest': 'ours: fallback digest + stored transcript',
    'window': 'sliding window alone',
    'harness': 'pydantic-ai-harness SummarizingCompaction',
    'summarization': 'summarization-pydantic-ai SummarizationProcessor',
}
"""Every strategy's key and label, in report order."""

PEERS: dict[str, Strategy] = {'harness': harness_strategy, 'summarization': summarization_strategy}
"""The peers' strategies by key."""

PEER_PACKAGES: dict[str, tuple[str, str]] = {
    'harness': ('pydantic_ai_harness', 'pydantic-ai-harness'),
    'summarization': ('pydantic_ai_summarization', 'summarization-pydantic-ai'),
}
"""Each peer's module and the package that installs it, by key."""


def missing_peer(key: str) -> str | None:
    """The package to install for the peer `key` when its module cannot be found; None when it can, or when
    `key` is not a peer (found, not imported: the strategy imports it when it runs)."""
    if key not in PEER_PACKAGES:
        return None
    module, package = PEER_PACKAGES[key]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else package
