"""The history processor (`HistoryProcessor`, built by `create_history_processor()`): the built-in stages
under one budget and one guard; a capability, or on early 1.x a history processor."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec

from .pipeline._capability import SERIALIZATION_NAME, EventHandler, HistoryCapability
from .pipeline._settings_checks import FIELD_TYPES, coerce_switch, exempting_readback
from .pipeline._stage_capability import StageCapability, history_processor_annotations

if TYPE_CHECKING:
    from .context._context import HistoryStage
    from .stages.artifacts import ArtifactSettings
    from .stages.compactor import CompactionSettings

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
    in order, built-in or custom (see docs/settings.md, "A custom stage"). A built-in stage here takes its own
    settings only; the shared ones are the processor's (a stage given one is refused, naming it)."""

    _field_types = (*FIELD_TYPES, ('window', bool, 'True or False'))

    def __post_init__(self) -> None:
        # the stages load with the first processor, not with the package
        from .stages.artifacts import ArtifactSettings
        from .stages.compactor import CompactionSettings

        self.artifacts = coerce_switch(ArtifactSettings, self.artifacts, 'artifacts')
        self.compaction = coerce_switch(CompactionSettings, self.compaction, 'compaction')
        stages = self.stages
        if stages is not None and (
            not isinstance(stages, Sequence) or isinstance(stages, str) or not all(map(callable, stages))
        ):
            raise TypeError(f'HistoryProcessor.stages must be a list of stages or None, got {stages!r}')
        if stages is not None:
            _check_stages(stages)
        super().__post_init__()

    def _pipeline(self) -> list[HistoryStage]:
        if self.stages is not None:
            return list(self.stages)
        from .stages.artifacts import ArtifactPlanner
        from .stages.compactor import CompactionSettings, Compactor
        from .stages.window import SlidingWindow

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
        from .stages.artifacts import ArtifactSettings

        return self.artifacts if isinstance(self.artifacts, ArtifactSettings) else ArtifactSettings()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return SERIALIZATION_NAME


def _check_stages(stages: Sequence[HistoryStage]) -> None:
    """Each stage honours what it was given or is refused here: inside the processor a built-in stage reads
    the processor's shared settings (`HistoryCapability`'s fields), never its own, so a stage given one of
    them is refused, naming the field and its home; its own fields (`settings`, `name`) are honoured."""
    shared = [f.name for f in dataclasses.fields(HistoryCapability) if f.init]
    for stage in stages:
        kind = type(stage).__name__
        if isinstance(stage, HistoryCapability) and not isinstance(stage, StageCapability):
            raise TypeError(
                f'{kind} inside HistoryProcessor(stages=[...]) is not a stage: list the stages themselves '
                '(ArtifactPlanner(), Compactor(), SlidingWindow(), or a stage of your own)'
            )
        given = [name for name in shared if name in getattr(stage, '_given_fields', ())]
        if not given:
            continue
        keywords = ', '.join(f'{name}=...' for name in given)
        names = [f'`{name}`' for name in given]
        listed = ' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)
        which = f'{listed} is a setting' if len(names) == 1 else f'{listed} are settings'
        named = ' (the stage is named in events and logs by its `name`)' if 'id' in given else ''
        raise TypeError(
            f'{kind}({keywords}) inside HistoryProcessor(stages=[...]): {which} of the whole processor, '
            f'which a stage inside it does not read{named}; write HistoryProcessor({keywords}, '
            f'stages=[{kind}(...)])'
        )


_MOVED: dict[str, tuple[str, str]] = {
    'context_window': ('policy=ContextPolicy', 'context_window'),
    'context_utilization': ('policy=ContextPolicy', 'utilization'),
    'utilization': ('policy=ContextPolicy', 'utilization'),
    'max_tokens': ('policy=ContextPolicy', 'max_tokens'),
    'target_tokens': ('policy=ContextPolicy', 'target_tokens'),
    'reserve_tokens': ('policy=ContextPolicy', 'reserve_tokens'),
    'budget_tokens': ('policy=ContextPolicy', 'budget_tokens'),
    'item_tokens': ('policy=ContextPolicy', 'item_tokens'),
    'large_item_tokens': ('policy=ContextPolicy', 'large_item_tokens'),
    'summarizer_model': ('summarizer=SummarizerSettings', 'model'),
    'summarizer_settings': ('summarizer=SummarizerSettings', 'model_settings'),
    'summarizer_instructions': ('summarizer=SummarizerSettings', 'instructions'),
    'summarizer_timeout': ('summarizer=SummarizerSettings', 'timeout'),
    'planner_model': ('artifacts=ArtifactSettings', 'planner_model'),
    'llm_planning': ('artifacts=ArtifactSettings', 'llm_planning'),
    'on_compaction': ('compaction=CompactionSettings', 'on_compaction'),
}
"""Keywords of 0.1 (and of most examples written for it) -> the field and settings class that hold them now,
and their name there."""


def _moved_keywords(kwargs: dict[str, Any]) -> None:
    """A `TypeError` that says where each moved keyword lives now, instead of Python's bare one."""
    homes: dict[str, list[str]] = {}
    for name, value in kwargs.items():
        if name in _MOVED:
            home, field = _MOVED[name]
            homes.setdefault(home, []).append(f'{field}={value!r}')
    if homes:
        moved = ', '.join(f'{n}=' for n in kwargs if n in _MOVED)
        write = ', '.join(f'{home}({", ".join(fields)})' for home, fields in homes.items())
        raise TypeError(
            f'HistoryProcessor got {moved} which moved into the settings that hold them: write {write} '
            "(the CHANGELOG's migration notes list every moved keyword)"
        )


def _accepting_on_event(init: Callable[..., None]) -> Callable[..., None]:
    """`HistoryProcessor(on_event=...)` as `create_history_processor(on_event=...)` spells it: the field is
    `on_history_event` (pydantic-ai's capabilities have an `on_event` hook of their own, for stream
    events); a keyword that moved since 0.1 is refused naming its home."""

    @functools.wraps(init)
    def __init__(
        self: HistoryProcessor, *args: Any, on_event: EventHandler | None = None, **kwargs: Any
    ) -> None:
        _moved_keywords(kwargs)
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

    Example:
        ```python {needs="capabilities"}
        from pydantic_ai import Agent

        from pydantic_ai_history import ContextPolicy, create_history_processor

        processor = create_history_processor(policy=ContextPolicy(max_tokens=60_000))
        agent = Agent('openai:gpt-4o', capabilities=[processor])  # early 1.x: history_processors=[processor]
        ```
    """
    return HistoryProcessor(**settings)
