"""What the processor counts: running totals per run and overall (`processor.stats()`)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from ..events import (
    ArtifactProcessed,
    BackgroundSummaryDiscarded,
    CompactionResult,
    HistoryEvent,
    HistoryWarning,
    RequestProcessed,
    StageFailed,
    WindowApplied,
)


@dataclass
class RunStats:
    """Running totals for one agent run (or, in `HistoryStats.overall`, for all runs)."""

    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    peak_tokens_out: int = 0
    window_applications: int = 0
    compactions: int = 0
    summarizer_calls: int = 0
    compaction_methods: Counter[str] = field(default_factory=Counter)
    artifacts_by_strategy: Counter[str] = field(default_factory=Counter)
    artifact_cache_hits: int = 0
    """Artifacts whose conversion or summary came from the shared cache."""
    warnings: int = 0
    stage_failures: int = 0
    prefix_rewrites: int = 0
    """Requests that changed messages an earlier request had sent (a compaction event, the read-back tool
    appearing): each makes the provider write its prompt cache again from there."""
    prefix_rewrite_tokens: int = 0
    """Estimated tokens written to the provider's prompt cache again because of those requests."""
    background_summaries_used: int = 0
    """Compaction events whose summary was made in the background, ahead of the trigger."""
    background_summaries_discarded: int = 0
    """Summaries made (or started) in the background and thrown away; their calls count in
    `summarizer_calls`."""
    last_utilization: float | None = None
    """Tokens sent over the context window for the latest request (None when the window is unknown)."""
    peak_utilization: float | None = None

    @property
    def reduction_percent(self) -> float:
        """How much smaller the processed histories were than their inputs, over all requests."""
        return 100.0 * (1 - self.tokens_out / self.tokens_in) if self.tokens_in else 0.0

    def copy(self) -> RunStats:
        """A snapshot that later requests do not change."""
        return dataclasses.replace(
            self,
            compaction_methods=Counter(self.compaction_methods),
            artifacts_by_strategy=Counter(self.artifacts_by_strategy),
        )


@dataclass
class HistoryStats:
    """`processor.stats()`: the totals overall and per run (`runs`, by run id, at most `max_tracked_runs`;
    requests without a `RunContext` count only in `overall`), and the shared cache's hit counts."""

    overall: RunStats
    runs: dict[str, RunStats]
    cache_hits: int
    cache_misses: int

    @property
    def cache_hit_rate(self) -> float:
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else 0.0


def record_event(stats: RunStats, event: HistoryEvent) -> None:
    """Count `event` in `stats`."""
    if isinstance(event, RequestProcessed):
        stats.requests += 1
        stats.tokens_in += event.tokens_before
        stats.tokens_out += event.tokens_after
        stats.peak_tokens_out = max(stats.peak_tokens_out, event.tokens_after)
        utilization = event.utilization
        stats.last_utilization = utilization
        if utilization is not None:
            stats.peak_utilization = max(stats.peak_utilization or 0.0, utilization)
        if event.rewritten_messages:
            stats.prefix_rewrites += 1
            stats.prefix_rewrite_tokens += event.rewritten_tokens
    elif isinstance(event, WindowApplied):
        stats.window_applications += 1
    elif isinstance(event, CompactionResult):
        stats.compactions += 1
        stats.summarizer_calls += event.summarizer_calls
        stats.compaction_methods[event.method] += 1
        stats.background_summaries_used += event.background
    elif isinstance(event, BackgroundSummaryDiscarded):
        stats.summarizer_calls += event.summarizer_calls  # paid for, used by no event
        stats.background_summaries_discarded += 1
    elif isinstance(event, ArtifactProcessed):
        stats.artifacts_by_strategy[event.strategy] += 1
        if event.cache_hit:
            stats.artifact_cache_hits += 1
    elif isinstance(event, HistoryWarning):
        stats.warnings += 1
    elif isinstance(event, StageFailed):
        stats.stage_failures += 1
