"""The history processor (`HistoryProcessor`, built by `create_history_processor()`): the built-in stages
under one budget and one guard; a capability, or on early 1.x a history processor."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec

from .context._context import HistoryStage
from .pipeline._capability import DEFAULT_ID, SERIALIZATION_NAME, EventHandler, HistoryCapability
from .pipeline._settings_checks import FIELD_TYPES, coerce_switch, exempting_readback
from .pipeline._stage_capability import history_processor_annotations
from .pipeline._stats import HistoryStats, RunStats
from .stages.artifacts import ArtifactPlanner, ArtifactSettings
from .stages.compactor import CompactionSettings, Compactor
from .stages.window import SlidingWindow

__all__ = (
    'DEFAULT_ID',
    'SERIALIZATION_NAME',
    'EventHandler',
    'HistoryProcessor',
    'HistoryStats',
    'RunStats',
    'create_history_processor',
)

_P = ParamSpec('_P')


@dataclass(kw_only=True, eq=False)
class HistoryProcessor(HistoryCapability):
    """Keeps an agent's history inside its context window: artifacts, compaction, then the sliding window.

    Build it with `create_history_processor(...)` or directly; the settings every stage shares are
    `HistoryCapability`'s (policy, summarizer, store, cache, scope, ...), documented there.
    """

    artifacts: ArtifactSettings | bool = True
    """The artifact planner's settings, or False to switch it off."""
    compaction: CompactionSettings | bool = True
    """The compactor's settings, or False to switch it off."""
    window: bool = True
    """The sliding window (the last line of defence that makes a history fit the budget); False switches it
    off."""
    stages: Sequence[HistoryStage] | None = None
    """Replaces the built-in stages (`artifacts`, `compaction`, `window` are then ignored): the stages to run
    in order, built-in or custom (see the README's "A custom stage")."""

    _field_types = (*FIELD_TYPES, ('window', bool, 'True or False'))

    def __post_init__(self) -> None:
        self.artifacts = coerce_switch(ArtifactSettings, self.artifacts, 'artifacts')
        self.compaction = coerce_switch(CompactionSettings, self.compaction, 'compaction')
        stages = self.stages
        if stages is not None and (
            not isinstance(stages, Sequence) or isinstance(stages, str) or not all(map(callable, stages))
        ):
            raise TypeError(f'HistoryProcessor.stages must be a list of stages or None, got {stages!r}')
        super().__post_init__()

    def _pipeline(self) -> list[HistoryStage]:
        if self.stages is not None:
            return list(self.stages)
        stages: list[HistoryStage] = []
        if self.artifacts is not False:
            stages.append(
                ArtifactPlanner(exempting_readback(self._artifact_settings(), self.readback_tool_name))
            )
        if self.compaction is not False:
            compaction = self.compaction if self.compaction is not True else CompactionSettings()
            stages.append(Compactor(compaction))
        if self.window:
            stages.append(SlidingWindow())
        return stages

    def _artifact_settings(self) -> ArtifactSettings:
        return self.artifacts if isinstance(self.artifacts, ArtifactSettings) else ArtifactSettings()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return SERIALIZATION_NAME


def _accepting_on_event(init: Callable[..., None]) -> Callable[..., None]:
    """`HistoryProcessor(on_event=...)` as `create_history_processor(on_event=...)` spells it: the field is
    `on_history_event` (pydantic-ai's capabilities have an `on_event` hook of their own, for stream
    events)."""

    @functools.wraps(init)
    def __init__(
        self: HistoryProcessor, *args: Any, on_event: EventHandler | None = None, **kwargs: Any
    ) -> None:
        if on_event is not None:
            if kwargs.get('on_history_event') is not None:
                raise TypeError('HistoryProcessor takes on_event= or on_history_event= (one field), not both')
            kwargs['on_history_event'] = on_event
        init(self, *args, **kwargs)

    return __init__


setattr(HistoryProcessor, '__init__', _accepting_on_event(HistoryProcessor.__init__))  # noqa: B010
history_processor_annotations(HistoryProcessor)


def _taking_the_fields_of(
    _: Callable[_P, HistoryProcessor],
) -> Callable[[Callable[..., HistoryProcessor]], Callable[_P, HistoryProcessor]]:
    """Type checkers read the factory's keywords from `HistoryProcessor`'s fields: one list, no mirror."""
    return lambda factory: factory


@_taking_the_fields_of(HistoryProcessor)
def create_history_processor(**settings: Any) -> HistoryProcessor:
    """The history processor: artifact planner, then compactor, then sliding window.

    A capability (`Agent(capabilities=[processor])`) and a history processor (`history_processors=` on early
    1.x). Every keyword is a field of `HistoryProcessor` or `HistoryCapability`, documented there: `policy`
    (window, budget, trigger, target), `summarizer` (every LLM call), `artifacts` / `compaction` (each stage's
    knobs, or False to switch it off), `window=False`. `on_event=` is accepted for `on_history_event=`.
    """
    return HistoryProcessor(**settings)
