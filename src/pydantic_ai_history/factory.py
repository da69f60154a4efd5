"""`create_history_processor()`: the processor with its defaults; the 0.1.0 keywords mapped to their homes."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ._context import HistoryStage, ScopeKey
from ._marks import READ_ARTIFACT_TOOL
from ._policy import ContextPolicy
from ._summarizer_settings import ModelRef, SummarizerSettings
from .cache import MemoryCache, SummaryCache
from .compaction_tool import CompactionTool
from .notice import NearLimitNotice
from .pinning import PinPredicate
from .processor import DEFAULT_ID, EventHandler, HistoryProcessor
from .stages.artifacts import ArtifactSettings
from .stages.compactor import CompactionSettings
from .store import ArtifactStore, MemoryStore
from .tokens import TokenizerProfile

__all__ = ('create_history_processor',)

_LEGACY_HOMES: Mapping[str, tuple[str, str]] = {
    # 0.1.0 keyword: (new home, its field)
    'context_window': ('policy', 'context_window'),
    'context_utilization': ('policy', 'utilization'),
    'max_tokens': ('policy', 'max_tokens'),
    'target_tokens': ('policy', 'target_tokens'),
    'reserve_tokens': ('policy', 'reserve_tokens'),
    'summarizer_model': ('summarizer', 'model'),
    'summarizer_settings': ('summarizer', 'model_settings'),
    'summarizer_instructions': ('summarizer', 'instructions'),
    'summarizer_timeout': ('summarizer', 'timeout'),
    'planner_model': ('artifacts', 'planner_model'),
    'llm_planning': ('artifacts', 'llm_planning'),
    'on_compaction': ('compaction', 'on_compaction'),
}
"""Where each keyword of 0.1.0's factory lives now. They still work, with a `DeprecationWarning`."""


def create_history_processor(
    *,
    id: str | None = DEFAULT_ID,
    model: ModelRef | None = None,
    policy: ContextPolicy | None = None,
    summarizer: SummarizerSettings | None = None,
    artifacts: ArtifactSettings | bool = True,
    compaction: CompactionSettings | bool = True,
    window: bool = True,
    stages: Sequence[HistoryStage] | None = None,
    pin: PinPredicate | None = None,
    keep_first_user_message: bool = True,
    token_profile: TokenizerProfile | None = None,
    cache: SummaryCache | None = None,
    store: ArtifactStore | None = None,
    scope: ScopeKey | None = None,
    readback_tool_name: str = READ_ARTIFACT_TOOL,
    compaction_tool: CompactionTool | bool = False,
    near_limit_notice: NearLimitNotice | bool = False,
    on_event: EventHandler | None = None,
    **legacy: Any,
) -> HistoryProcessor:
    """The history processor: artifact planner, then compactor, then sliding window.

    The result is a pydantic-ai capability where pydantic-ai has them (`Agent(capabilities=[processor])`)
    and a history processor everywhere (`Agent(history_processors=[processor])` on early 1.x). Every argument
    is a field of `HistoryProcessor`, documented there; each setting has one home:

    - `policy`: window, utilization, reserve, budget, compaction trigger (`max_tokens`) and target;
    - `summarizer`: model, model settings, instructions, timeout and input cap of every LLM call;
    - `artifacts` / `compaction`: each stage's own knobs, or False to switch it off; `window=False` switches
      the sliding window off.

    `on_event` receives every `HistoryEvent` (the processor's `on_history_event` field).

    The 0.1.0 keywords (`max_tokens=`, `summarizer_model=`, ...) still work and warn with their new home.
    """
    policy, summarizer, artifacts, compaction = _legacy(legacy, policy, summarizer, artifacts, compaction)
    return HistoryProcessor(
        id=id,
        model=model,
        policy=policy,
        summarizer=summarizer,
        artifacts=artifacts,
        compaction=compaction,
        window=window,
        stages=stages,
        pin=pin,
        keep_first_user_message=keep_first_user_message,
        token_profile=token_profile,
        cache=cache if cache is not None else MemoryCache(),
        store=store if store is not None else MemoryStore(),
        scope=scope,
        readback_tool_name=readback_tool_name,
        compaction_tool=compaction_tool,
        near_limit_notice=near_limit_notice,
        on_history_event=on_event,
    )


def _legacy(
    keywords: Mapping[str, Any],
    policy: ContextPolicy | None,
    summarizer: SummarizerSettings | None,
    artifacts: ArtifactSettings | bool,
    compaction: CompactionSettings | bool,
) -> tuple[ContextPolicy, SummarizerSettings, ArtifactSettings | bool, CompactionSettings | bool]:
    """The settings with the 0.1.0 keywords moved to their homes (a keyword overrides the object's field)."""
    unknown = sorted(set(keywords) - set(_LEGACY_HOMES))
    if unknown:
        raise TypeError(
            f'create_history_processor() got unexpected keyword argument(s): {", ".join(unknown)}'
        )
    moved: dict[str, dict[str, Any]] = {}
    for name, value in keywords.items():
        if value is None:
            continue
        home, field_name = _LEGACY_HOMES[name]
        warnings.warn(
            f'create_history_processor({name}=...) is deprecated: use {_spelling(home)}({field_name}=...)',
            DeprecationWarning,
            stacklevel=3,
        )
        moved.setdefault(home, {})[field_name] = value
    policy = _with(policy if policy is not None else ContextPolicy(), moved.get('policy'))
    summarizer = _with(
        summarizer if summarizer is not None else SummarizerSettings(), moved.get('summarizer')
    )
    if artifacts is not False and 'artifacts' in moved:
        base = artifacts if isinstance(artifacts, ArtifactSettings) else ArtifactSettings()
        artifacts = _with(base, moved['artifacts'])
    if compaction is not False and 'compaction' in moved:
        base_compaction = compaction if isinstance(compaction, CompactionSettings) else CompactionSettings()
        compaction = _with(base_compaction, moved['compaction'])
    return policy, summarizer, artifacts, compaction


def _with(settings: Any, values: Mapping[str, Any] | None) -> Any:
    return dataclasses.replace(settings, **values) if values else settings


def _spelling(home: str) -> str:
    return {
        'policy': 'policy=ContextPolicy',
        'summarizer': 'summarizer=SummarizerSettings',
        'artifacts': 'artifacts=ArtifactSettings',
        'compaction': 'compaction=CompactionSettings',
    }[home]
