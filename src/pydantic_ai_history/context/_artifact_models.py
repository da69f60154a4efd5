"""The artifact model and the plan: pydantic models, so a planner LLM can return a plan as its output."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

ArtifactKind = Literal['tool_result', 'document', 'image', 'audio']


class ProcessingStrategy(str, Enum):
    """What to do with one artifact."""

    INCLUDE_FULL = 'include_full'
    """Keep it unchanged."""
    SUMMARIZE = 'summarize'
    """Replace it by an LLM summary written with the decision's focus (cached)."""
    EXTRACT = 'extract'
    """Keep only the passages most relevant to the extraction query (BM25 over structure-aware chunks)."""
    EXCLUDE = 'exclude'
    """Replace it by a stub saying what it was and how to read it back."""


class Artifact(BaseModel):
    """One large piece of content in the history: a tool result or an attached file."""

    id: str = Field(
        description='Content hash id (art_ + sha256 of the exact text or bytes the model would see).'
    )
    kind: ArtifactKind
    source: str = Field(description="Where it came from: tool 'name' or the file name.")
    chars: int = Field(description='Size in characters (bytes for binary files).')
    tokens: int = Field(description='Size in tokens as the model would be charged.')
    tool_name: str | None = None
    step: int = Field(description='Index of the message that holds it.')
    media_type: str = 'text/plain'
    metadata: dict[str, str] = Field(default_factory=dict)


class ArtifactDecision(BaseModel):
    """The planner's decision for one artifact."""

    artifact_id: str
    strategy: ProcessingStrategy
    priority: int = Field(
        default=0, description='Lower numbers are processed first and get the budget first.'
    )
    rationale: str = ''
    summarization_focus: str | None = Field(
        default=None, description='What a summary should keep (for `summarize`).'
    )
    extraction_query: str | None = Field(default=None, description='What to look for (for `extract`).')


class ArtifactPlan(BaseModel):
    """Decisions for the artifacts of one history, and the reasoning behind them."""

    decisions: list[ArtifactDecision]
    reasoning: str = ''

    def ordered(self) -> list[ArtifactDecision]:
        """Decisions by priority (stable: equal priorities keep their order)."""
        return sorted(self.decisions, key=lambda d: d.priority)
