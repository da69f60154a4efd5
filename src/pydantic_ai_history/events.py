"""Typed events: every decision the processor takes is one of these, sent to `on_event` and to logging."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = (
    'ArtifactProcessed',
    'CompactionResult',
    'ContentLost',
    'HistoryEvent',
    'HistoryWarning',
    'RequestProcessed',
    'StageFailed',
    'WarningKind',
    'WindowApplied',
)


WarningKind = Literal[
    'empty_history',
    'invalid_input',
    'context_window_fallback',
    'over_budget',
    'window_reference_omitted',
    'window_dropped',
    'compaction_over_target',
    'compaction_impossible',
    'compaction_deferred',
    'transcript_store_failed',
    'transcript_not_stored',
    'artifact_planner_failed',
    'artifact_summary_failed',
    'artifact_reducer_failed',
    'artifact_store_missing',
    'artifact_store_failed',
]
"""Every `HistoryWarning.code` (and `ContentLost.code`) the package emits:

- `empty_history`: the processor was given no messages; they are returned as they are.
- `invalid_input`: the input already breaks an invariant (listed in `details`); no stage may add to it.
- `context_window_fallback`: nothing knows the model's window; `ContextPolicy.fallback_context_window` is
  assumed. Set `ContextPolicy(context_window=...)`.
- `over_budget`: even the preserved head and the current request (or every cut with its note) exceed the
  budget; the request is sent as it is and the provider may refuse it.
- `window_reference_omitted`: the window's note could not name a stored transcript (no room or no store).
- `window_dropped` (`ContentLost`): the window dropped messages whose transcript could not be stored.
- `compaction_over_target`: the compacted history is still above the target (a large unfinished turn).
- `compaction_impossible`: nothing could be evicted (the head and the current turn are all there is).
- `compaction_deferred`: the transcript could not be stored and the history still fits: compaction waits.
- `transcript_store_failed`: storing an evicted transcript failed (the store's error is in `details`).
- `transcript_not_stored` (`ContentLost`): the compactor had to compact without storing the transcript.
- `artifact_planner_failed`: the LLM planner failed; the heuristic plan was used.
- `artifact_summary_failed`: an artifact summary failed; the artifact was extracted instead.
- `artifact_reducer_failed`: a per-tool reducer raised; the output was planned as it is.
- `artifact_store_missing`: there is no store, so a large artifact stays inline.
- `artifact_store_failed`: storing an original failed, so it stays inline.
"""


@dataclass(frozen=True, kw_only=True)
class HistoryEvent:
    """Base of all events. `run_id` is None on pydantic-ai versions without run ids."""

    run_id: str | None = None
    at: float = field(default_factory=time.time)

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, kw_only=True)
class RequestProcessed(HistoryEvent):
    """One model request went through the processor."""

    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    tokenizer_tokens_after: int
    context_window: int | None
    duration_ms: float
    anchored: bool

    @property
    def utilization(self) -> float | None:
        return self.tokens_after / self.context_window if self.context_window else None


@dataclass(frozen=True, kw_only=True)
class WindowApplied(HistoryEvent):
    """The sliding window dropped older units to fit its budget."""

    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    budget: int
    units_dropped: int
    pinned_kept: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class CompactionResult(HistoryEvent):
    """What one compaction did (also passed to `on_compaction`)."""

    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary: str
    reason: Literal['trigger', 'manual']
    method: Literal['llm', 'cache', 'digest', 'truncate']
    """`llm`: the summarizer wrote it; `cache`: an identical evicted span was summarized before;
    `digest`/`truncate`: the deterministic fallbacks after a summarizer failure or during its cool-down."""
    evicted_messages: int
    summarizer_calls: int
    duration_ms: float
    error: str | None = None
    pinned_units: int = 0
    """Pinned units among the evicted ones, carried verbatim in the summary's pinned section."""


@dataclass(frozen=True, kw_only=True)
class ArtifactProcessed(HistoryEvent):
    """A large tool return or attached file was handled by one strategy."""

    artifact_id: str
    source: str
    strategy: str
    tokens_before: int
    tokens_after: int
    cache_hit: bool
    rationale: str


@dataclass(frozen=True, kw_only=True)
class HistoryWarning(HistoryEvent):
    """Something the user should know: the current request alone is over budget, input was invalid, ..."""

    code: WarningKind
    """What happened (see `WarningKind` for each value and what to do)."""
    message: str
    """The same in words, with the numbers."""
    details: dict[str, Any] = field(default_factory=dict)
    """Machine-readable specifics (model, tokens, violations, the store's error)."""


@dataclass(frozen=True, kw_only=True)
class ContentLost(HistoryWarning):
    """Content left the history with no home: it is in neither the history nor the store (at most a summary
    or a note stands for it). Logged at error level; `code` says which stage: `window_dropped` (the window
    had to drop messages and their transcript could not be stored) or `transcript_not_stored` (the compactor
    had to compact a history that no longer fit the window, and its transcript could not be stored).
    """

    stage: str
    """The stage that removed it."""
    messages: int
    """How many messages were removed."""
    tool_calls: tuple[str, ...] = ()
    """The tool calls (`name#tool_call_id`) whose calls or results were among them."""
    user_prompts: int = 0
    """How many user prompts were among them."""


@dataclass(frozen=True, kw_only=True)
class StageFailed(HistoryEvent):
    """A stage raised or produced a worse history; its input was kept and the run went on."""

    stage: str
    error: str
