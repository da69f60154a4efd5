"""The artifact planner: large tool outputs and attached files turned into something the model can afford.

Each large artifact gets a strategy (include in full, summarize, extract the relevant passages, or exclude
with a stub); the full original goes to the spill store first, for `read_artifact`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ...context._artifact_models import (
        Artifact,
        ArtifactDecision,
        ArtifactKind,
        ArtifactPlan,
        ProcessingStrategy,
    )
    from ...context._artifact_settings import ArtifactSettings, Reducer
    from ...context._context import ARTIFACT_MARKER
    from ._planner import PlanningChoice, heuristic_plan, llm_plan, should_use_llm_planning
    from ._reducers import INTERACTIVE_ROLES, browser_snapshot_reducer, console_output_reducer
    from ._stage import ArtifactPlanner

__all__ = (
    'ARTIFACT_MARKER',
    'INTERACTIVE_ROLES',
    'Artifact',
    'ArtifactDecision',
    'ArtifactKind',
    'ArtifactPlan',
    'ArtifactPlanner',
    'ArtifactSettings',
    'PlanningChoice',
    'ProcessingStrategy',
    'Reducer',
    'browser_snapshot_reducer',
    'console_output_reducer',
    'heuristic_plan',
    'llm_plan',
    'should_use_llm_planning',
)

_EXPORTS = {
    'ARTIFACT_MARKER': '...context._context',
    'Artifact': '...context._artifact_models',
    'ArtifactDecision': '...context._artifact_models',
    'ArtifactKind': '...context._artifact_models',
    'ArtifactPlan': '...context._artifact_models',
    'ArtifactPlanner': '._stage',
    'ArtifactSettings': '...context._artifact_settings',
    'INTERACTIVE_ROLES': '._reducers',
    'PlanningChoice': '._planner',
    'ProcessingStrategy': '...context._artifact_models',
    'Reducer': '...context._artifact_settings',
    'browser_snapshot_reducer': '._reducers',
    'console_output_reducer': '._reducers',
    'heuristic_plan': '._planner',
    'llm_plan': '._planner',
    'should_use_llm_planning': '._planner',
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
