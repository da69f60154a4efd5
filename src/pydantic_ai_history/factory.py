"""`create_history_processor()`: the three stages composed with their defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ._context import ScopeKey
from .cache import SummaryCache
from .events import CompactionResult
from .pinning import PinPredicate
from .processor import EventHandler, HistoryProcessor
from .stages.artifacts import ArtifactPlanner, ArtifactSettings
from .stages.compactor import CompactionSettings, Compactor
from .stages.window import SlidingWindow, WindowSettings
from .store import ArtifactStore
from .tokens import TokenizerProfile

__all__ = ('create_history_processor',)


def create_history_processor(
    *,
    model: Any = None,
    context_window: int | None = None,
    context_utilization: float = 1.0,
    max_tokens: int | None = None,
    target_tokens: int | None = None,
    reserve_tokens: int | None = None,
    summarizer_model: Any = None,
    summarizer_settings: Any = None,
    summarizer_instructions: str | None = None,
    summarizer_timeout: float | None = None,
    planner_model: Any = None,
    llm_planning: bool | None = None,
    pin: PinPredicate | None = None,
    artifacts: ArtifactSettings | bool = True,
    compaction: CompactionSettings | bool = True,
    window: WindowSettings | bool = True,
    token_profile: TokenizerProfile | None = None,
    cache: SummaryCache | None = None,
    store: ArtifactStore | None = None,
    scope: ScopeKey | None = None,
    on_event: EventHandler | None = None,
    on_compaction: Callable[[CompactionResult], None] | None = None,
) -> HistoryProcessor:
    """Build the processor: artifact planner, then compactor, then sliding window.

    Each stage can be switched off (`artifacts=False`, ...) or configured in full with its settings object;
    the keyword shortcuts below override the matching field of those settings.

    Args:
        model: the serving model (name or `Model`) when it is not the run's; decides token counting and the
            context window. Default: the run's model, read from `RunContext` on every request.
        context_window: overrides the model's context window (needed where pydantic-ai does not know it).
        context_utilization: the fraction of the window every stage may use (e.g. 0.33 for cheap requests on
            an expensive model): the compaction trigger and target, the artifact budget and the window's
            budget all follow the reduced window. Default 1.0.
        max_tokens: the compaction trigger, default 120,000 (80% of a smaller known window).
        target_tokens: the size after compaction, default 40,000 (a third of a window-lowered trigger).
        reserve_tokens: room kept for the answer below the window, default 1,024.
        summarizer_model: the model that writes summaries (compactions and artifacts); default the run's.
        summarizer_settings: `ModelSettings` for the summarizer.
        summarizer_instructions: replaces the compaction summary instructions.
        summarizer_timeout: seconds before a summary falls back to the deterministic digest, default 60.
        planner_model: the model that plans large artifacts; setting it turns LLM planning on.
        llm_planning: force LLM artifact planning on (with the run's model) or off.
        pin: a predicate; units it accepts are kept by the compactor and the window (e.g. `pin_tool_errors`).
        artifacts: `ArtifactSettings`, or False to switch the artifact planner off.
        compaction: `CompactionSettings`, or False to switch the compactor off.
        window: `WindowSettings`, or False to switch the sliding window off.
        token_profile: overrides how tokens are counted (encoding, correction, image formula).
        cache: the shared cache for summaries and conversions (default: an in-memory LRU).
        store: where the full originals of reduced artifacts are kept (default: in memory, bounded).
        scope: `ctx -> str`, the tenant or conversation whose artifacts a run may store and read back, e.g.
            `lambda ctx: ctx.deps.tenant_id`. Default: pydantic-ai's conversation id (1.0: one shared scope).
            Summarizer failures are also counted per scope.
        on_event: receives every `HistoryEvent`.
        on_compaction: receives every `CompactionResult`.
    """
    compaction_settings = compaction if isinstance(compaction, CompactionSettings) else CompactionSettings()
    # the artifact stage plans against the compactor's trigger: from the keyword or the settings object
    trigger = max_tokens if max_tokens is not None else compaction_settings.max_tokens
    stages: list[Any] = []
    if artifacts:
        stages.append(
            ArtifactPlanner(
                _override(
                    artifacts if isinstance(artifacts, ArtifactSettings) else ArtifactSettings(),
                    planner_model=planner_model,
                    llm_planning=llm_planning,
                    summarizer_model=summarizer_model,
                    summarizer_settings=summarizer_settings,
                    summarizer_timeout=summarizer_timeout,
                    max_history_tokens=trigger,
                    reserve_tokens=reserve_tokens,
                )
            )
        )
    if compaction:
        stages.append(
            Compactor(
                _override(
                    compaction_settings,
                    max_tokens=max_tokens,
                    target_tokens=target_tokens,
                    summarizer_model=summarizer_model,
                    summarizer_settings=summarizer_settings,
                    summarizer_instructions=summarizer_instructions,
                    summarizer_timeout=summarizer_timeout,
                    on_compaction=on_compaction,
                    pin=pin,
                )
            )
        )
    if window:
        stages.append(
            SlidingWindow(
                _override(
                    window if isinstance(window, WindowSettings) else WindowSettings(),
                    reserve_tokens=reserve_tokens,
                    pin=pin,
                )
            )
        )
    return HistoryProcessor(
        stages,
        model=model,
        context_window=context_window,
        context_utilization=context_utilization,
        token_profile=token_profile,
        cache=cache,
        store=store,
        on_event=on_event,
        scope=scope,
    )


def _override(settings: Any, **values: Any) -> Any:
    """`settings` with the given fields replaced, skipping those left at None."""
    chosen = {name: value for name, value in values.items() if value is not None}
    return dataclasses.replace(settings, **chosen) if chosen else settings
