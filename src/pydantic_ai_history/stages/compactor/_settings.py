"""Settings of the compactor, and the trigger and target they resolve to for one model."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ...pinning import PinPredicate

if TYPE_CHECKING:
    from ...events import CompactionResult

__all__ = ('CompactionLimits', 'CompactionSettings')

DEFAULT_MAX_TOKENS = 120_000
DEFAULT_TARGET_TOKENS = 40_000
DEFAULT_SUMMARIZER_INPUT_TOKENS = 180_000
TRIGGER_FRACTION_OF_WINDOW = 0.8
TARGET_FRACTION_OF_TRIGGER = 1 / 3


@dataclass(frozen=True)
class CompactionLimits:
    """The resolved token limits for one model: compact above `trigger`, down to `target`."""

    trigger: int
    target: int


@dataclass(frozen=True)
class CompactionSettings:
    """Settings of the compactor. Every default is overridable.

    Args:
        max_tokens: the trigger: compact when the history's anchored estimate exceeds it. Default 120,000,
            or 80% of the model's context window when that is known and smaller.
        target_tokens: the whole history after compaction (preserved head + summary + verbatim tail).
            Default a third of the trigger, at most 40,000: the target follows the trigger alone, whether
            the trigger was set or came from the window (`max_tokens=50_000` gives 16,666 with or without a
            known window). A `target_tokens` that is not below the resolved trigger (possible when the window
            lowers the trigger under it) gets that default too: compacting to just under the trigger would
            compact again on every request.
        summarizer_model: a `Model` or a model name; default the run's own model.
        summarizer_settings: `ModelSettings` for the summarizer's request.
        summarizer_instructions: replaces the default instructions of the summarizer (the section list and
            the rules); the prompt still carries the original task, previous summary and transcript.
        summarizer_timeout: seconds before a summarizer call counts as failed (default 60).
        summarizer_input_tokens: the summarizer's input cap (default 180,000, or its own context window when
            known and smaller); a longer transcript is summarized in chunks cut at unit boundaries.
        summary_max_tokens: the cap on a summary (default 2,000); a longer summarizer answer is a failure.
        tool_result_max_tokens: each tool result is cut to this many tokens (head + tail) in the transcript
            the summarizer sees (default 2,000).
        task_max_tokens: the original task (first user message) is cut to this in the prompt (default 4,000).
        max_failures: consecutive summarizer failures before the cool-down (default 3).
        cooldown_seconds: how long the summarizer is not called after `max_failures` failures (default 300);
            the deterministic fallback is used meanwhile.
        fallback: the deterministic stand-in for a failed summary: 'digest' (user messages, tool calls and
            outcomes, errors, last assistant text; the head/tail cut if the digest fails) or 'truncate'
            (the head 25% / tail 75% cut of the transcript, at unit boundaries).
        keep_first_user_message: keep the first user turn verbatim (the original task).
        pin: a predicate (e.g. `pinning.pin_tool_errors`); units with a message it accepts, or with a `pin()`
            marker, are never summarized: they are kept ahead of older unpinned ones (their cost is reserved
            before the tail is chosen), and those before the cut are carried verbatim in the summary's
            pinned section (`PINNED_HEADING`) through every later compaction. Default None: markers only.
        cache_ttl: seconds summaries and prefix records live in the cache; None keeps them until evicted.
        on_compaction: called with every `CompactionResult` (also emitted as an event).
        clock: monotonic seconds, for the cool-down (injectable for tests).
    """

    max_tokens: int | None = None
    target_tokens: int | None = None
    summarizer_model: Any = None
    summarizer_settings: Any = None
    summarizer_instructions: str | None = None
    summarizer_timeout: float = 60.0
    summarizer_input_tokens: int | None = None
    summary_max_tokens: int = 2_000
    tool_result_max_tokens: int = 2_000
    task_max_tokens: int = 4_000
    max_failures: int = 3
    cooldown_seconds: float = 300.0
    fallback: Literal['digest', 'truncate'] = 'digest'
    keep_first_user_message: bool = True
    pin: PinPredicate | None = None
    cache_ttl: float | None = None
    on_compaction: Callable[[CompactionResult], None] | None = None
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        if (
            self.max_tokens is not None
            and self.target_tokens is not None
            and self.target_tokens >= self.max_tokens
        ):
            raise ValueError('target_tokens must be below max_tokens')
        if self.summary_max_tokens <= 0 or self.tool_result_max_tokens <= 0:
            raise ValueError('summary_max_tokens and tool_result_max_tokens must be positive')

    def resolve(self, context_window: int | None) -> CompactionLimits:
        """The trigger and target for a model with `context_window` (None when unknown).

        Trigger: `max_tokens`, else 120,000 capped at 80% of a known window. Target: `target_tokens` when it
        is below the trigger, else `min(40,000, trigger / 3)`; the window only matters through the trigger.
        """
        trigger = self.max_tokens
        if trigger is None:
            trigger = DEFAULT_MAX_TOKENS
            if context_window is not None:
                trigger = min(trigger, int(context_window * TRIGGER_FRACTION_OF_WINDOW))
        trigger = max(trigger, 1)
        target = self.target_tokens
        if target is None or target >= trigger:
            target = min(DEFAULT_TARGET_TOKENS, int(trigger * TARGET_FRACTION_OF_TRIGGER))
        return CompactionLimits(trigger=trigger, target=max(min(target, trigger - 1), 1))

    def summarizer_input_cap(self, summarizer_window: int | None) -> int:
        """The summarizer's input cap: the setting, else 180,000 or its own window when smaller."""
        if self.summarizer_input_tokens is not None:
            return self.summarizer_input_tokens
        cap = DEFAULT_SUMMARIZER_INPUT_TOKENS
        if summarizer_window is not None:
            cap = min(cap, summarizer_window - self.summary_max_tokens)
        return max(cap, 1_000)
