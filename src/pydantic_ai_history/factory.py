"""`create_history_processor()`: the processor with its defaults (a memory cache and store)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from typing_extensions import Never

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

_MOVED: Mapping[str, str] = {
    # 0.1.0 keyword: its home since
    'context_window': 'policy=ContextPolicy(context_window=...)',
    'context_utilization': 'policy=ContextPolicy(utilization=...)',
    'max_tokens': 'policy=ContextPolicy(max_tokens=...)',
    'target_tokens': 'policy=ContextPolicy(target_tokens=...)',
    'reserve_tokens': 'policy=ContextPolicy(reserve_tokens=...)',
    'summarizer_model': 'summarizer=SummarizerSettings(model=...)',
    'summarizer_settings': 'summarizer=SummarizerSettings(model_settings=...)',
    'summarizer_instructions': 'summarizer=SummarizerSettings(instructions=...)',
    'summarizer_timeout': 'summarizer=SummarizerSettings(timeout=...)',
    'planner_model': 'artifacts=ArtifactSettings(planner_model=...)',
    'llm_planning': 'artifacts=ArtifactSettings(llm_planning=...)',
    'on_compaction': 'compaction=CompactionSettings(on_compaction=...)',
}
"""Where each keyword of 0.1.0's factory lives now: passing one fails with a `TypeError` that says so."""


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
    **removed: Never,
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

    The 0.1.0 keywords (`max_tokens=`, `summarizer_model=`, ...) are gone: passing one raises a `TypeError`
    that names its home.
    """
    if removed:
        raise TypeError(_unexpected(removed))
    return HistoryProcessor(
        id=id,
        model=model,
        policy=policy if policy is not None else ContextPolicy(),
        summarizer=summarizer if summarizer is not None else SummarizerSettings(),
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


def _unexpected(keywords: Mapping[str, object]) -> str:
    """What is wrong with keywords the factory does not take: where a 0.1.0 keyword went, or a typo."""
    moved = [f'{name}= is now {_MOVED[name]}' for name in sorted(keywords) if name in _MOVED]
    unknown = sorted(set(keywords) - set(_MOVED))
    problems = [f'the 0.1.0 keywords were removed: {"; ".join(moved)}'] if moved else []
    if unknown:
        problems.append(f'unexpected keyword argument(s): {", ".join(unknown)}')
    return f'create_history_processor(): {". ".join(problems)}'
