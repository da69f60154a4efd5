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
    'WindowApplied',
)


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

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ContentLost(HistoryWarning):
    """Content left the history with no home: it is in neither the history nor the store (at most a summary
    or a note stands for it). Logged at error level; `code` says why (`window_dropped`,
    `transcript_not_stored`).
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
