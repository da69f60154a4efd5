"""`create_history_processor()`: the stages composed with their defaults."""

from __future__ import annotations

from typing import Any

from .cache import SummaryCache
from .processor import EventHandler, HistoryProcessor
from .stages.window import SlidingWindow, WindowSettings
from .store import ArtifactStore
from .tokens import TokenizerProfile

__all__ = ('create_history_processor',)


def create_history_processor(
    *,
    model: Any = None,
    context_window: int | None = None,
    window: WindowSettings | bool = True,
    token_profile: TokenizerProfile | None = None,
    cache: SummaryCache | None = None,
    store: ArtifactStore | None = None,
    on_event: EventHandler | None = None,
) -> HistoryProcessor:
    """Build the processor: artifact planner, then compactor, then sliding window; each can be switched off.

    Args:
        model: the serving model (name or `Model`) when it differs from the run's; used for token counting
            and the context window. Default: the run's model, read from `RunContext` on every request.
        context_window: overrides the model's context window.
        window: `WindowSettings`, or False to switch the sliding window off.
        token_profile: overrides how tokens are counted (encoding, correction, image formula).
        cache: shared cache for summaries and conversions (default: an in-memory LRU).
        store: where the full originals of reduced artifacts are kept (default: in memory).
        on_event: receives every `HistoryEvent`.
    """
    stages: list[Any] = []
    if window:
        stages.append(SlidingWindow(window if isinstance(window, WindowSettings) else WindowSettings()))
    return HistoryProcessor(
        stages,
        model=model,
        context_window=context_window,
        token_profile=token_profile,
        cache=cache,
        store=store,
        on_event=on_event,
    )
