"""The artifact planner: large tool outputs and attached files turned into something the model can afford.

Each large artifact gets a strategy (include in full, summarize, extract the relevant passages, or exclude
with a stub); the full original goes to the spill store first, for `read_artifact`.
"""

from __future__ import annotations

from ._extract import ARTIFACT_MARKER
from ._models import Artifact, ArtifactDecision, ArtifactKind, ArtifactPlan, ProcessingStrategy
from ._planner import PlanningChoice, heuristic_plan, llm_plan, should_use_llm_planning
from ._reducers import INTERACTIVE_ROLES, browser_snapshot_reducer, console_output_reducer
from ._settings import ArtifactSettings, Reducer
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
