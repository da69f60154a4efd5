"""Every setting of the artifact stage, with its documented default."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...files import FileSettings

__all__ = ('ArtifactSettings', 'Reducer')

Reducer = Callable[[Any], Any]
"""A per-tool reducer: takes the tool's return content, returns smaller content (str or JSON-able)."""


@dataclass(frozen=True)
class ArtifactSettings:
    """Settings of the artifact planner.

    Budget:
        budget_tokens: tokens for all artifacts together; default `budget_fraction` of the hard limit.
        budget_fraction: 0.5 of the hard limit, which is `context_window - reserve_tokens`, capped at
            `max_history_tokens`.
        reserve_tokens: 1,024, room for the answer (as the sliding window).
        max_history_tokens: 120,000, the compactor's trigger; also used when the window is unknown.
        large_artifact_chars: 10,000; only artifacts above it are ever reduced.
        skip_below_chars: 5,000; no planning when the artifacts being planned total less.

    Planning:
        llm_planning: `None` (default) means on only when `planner_model` is set. LLM planning is off by
            default because it costs one extra LLM call on the requests it runs for, which nobody expects
            from a history processor; the deterministic heuristic planner is used instead. When on,
            `should_use_llm_planning` still skips the call when a plan is not worth it.
        planner_model: the model that plans; default the run's model (when `llm_planning=True`).
        planner_timeout: 30 s, then the heuristic plan is used.
        expensive_price_per_mtok: 10.0; a primary model above it (USD per million input tokens) makes a plan
            worth its cost.
        margin: 0.3; artifacts "fit" when they use at most 70% of the budget.
        default_reduction: what the heuristic planner does with a large artifact that does not fit:
            `extract` (default, deterministic and free) or `summarize`.

    Strategies:
        summarizer_model: the model that writes summaries; default the run's model.
        summarizer_settings: `ModelSettings` for each summary request; default None (the model's own).
        summarizer_timeout: 60 s, then the `extract` fallback.
        summary_max_tokens: 1,000 per summary (less when the budget is short).
        summarizer_max_input_tokens: 100,000; larger artifacts are first cut to their most relevant chunks.
        min_extract_tokens: 300; with less budget left, an artifact is excluded instead of extracted.
        min_preview_tokens: 300; the artifact the current request answers always keeps at least this much.
        chunk_chars: 2,000; chunk size for `extract`.
        stub_preview_chars: 200; length of the one-line preview in an `exclude` stub.
        planner_preview_chars: 400; how much of each artifact the LLM planner sees.

    Sources:
        reducers: per-tool reducers by tool name, run before planning (see `browser_snapshot_reducer`,
            `console_output_reducer`).
        exempt_tools: tools whose returns are never planned: `read_artifact` (reducing the read-back tool's
            own output would send the model in circles).
        file_settings: limits for converting attached files (`files.FileSettings`).
        convert_attachments: True; convert attached documents to markdown and fit images.

    Remote `ImageUrl`/`DocumentUrl` attachments are never fetched: they are left for the provider to read.
    """

    budget_tokens: int | None = None
    budget_fraction: float = 0.5
    reserve_tokens: int = 1_024
    max_history_tokens: int = 120_000
    large_artifact_chars: int = 10_000
    skip_below_chars: int = 5_000
    llm_planning: bool | None = None
    planner_model: Any = None
    planner_timeout: float = 30.0
    expensive_price_per_mtok: float = 10.0
    margin: float = 0.3
    default_reduction: Literal['extract', 'summarize'] = 'extract'
    summarizer_model: Any = None
    summarizer_settings: Any = None
    summarizer_timeout: float = 60.0
    summary_max_tokens: int = 1_000
    summarizer_max_input_tokens: int = 100_000
    min_extract_tokens: int = 300
    min_preview_tokens: int = 300
    chunk_chars: int = 2_000
    stub_preview_chars: int = 200
    planner_preview_chars: int = 400
    reducers: Mapping[str, Reducer] = field(default_factory=dict)
    exempt_tools: frozenset[str] = frozenset({'read_artifact'})
    file_settings: FileSettings = field(default_factory=FileSettings)
    convert_attachments: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.budget_fraction <= 1:
            raise ValueError('budget_fraction must be in (0, 1]')
        if not 0 <= self.margin < 1:
            raise ValueError('margin must be in [0, 1)')

    @property
    def uses_llm_planning(self) -> bool:
        return self.llm_planning if self.llm_planning is not None else self.planner_model is not None

    def hard_limit(self, context_window: int | None) -> int:
        """The history's hard limit: `context_window - reserve_tokens`, at most `max_history_tokens`."""
        if context_window is None:
            return self.max_history_tokens
        return max(min(context_window - self.reserve_tokens, self.max_history_tokens), 1)

    def resolve_budget(self, context_window: int | None) -> int:
        """Tokens for all artifacts together."""
        if self.budget_tokens is not None:
            return self.budget_tokens
        return max(int(self.hard_limit(context_window) * self.budget_fraction), 1)
