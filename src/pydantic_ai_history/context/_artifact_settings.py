"""The artifact stage's own settings. Its hard limit is the context policy's (`ContextPolicy`) and its
summaries use `SummarizerSettings`: one home each."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..budget._policy import ContextLimits
from ..budget._room import hard_limit
from ..files import FileSettings
from ._summarizer_settings import ModelRef

__all__ = ('ArtifactSettings', 'Reducer')

Reducer = Callable[[Any], Any]
"""A per-tool reducer: takes the tool's return content, returns smaller content (str or JSON-able)."""


@dataclass(frozen=True, kw_only=True)
class ArtifactSettings:
    """How the artifact planner budgets, plans and reduces large tool returns and attached files.

    Remote `ImageUrl`/`DocumentUrl` attachments are never fetched: they are left for the provider to read.
    """

    artifact_budget_tokens: int | None = None
    """Tokens for all artifacts together. Default: `budget_fraction` of the hard limit, which is the policy's
    budget capped at its compaction trigger (so this stage and the compactor agree on "too long")."""
    budget_fraction: float = 0.5
    """The share of the hard limit the artifacts may use together, in (0, 1]."""
    large_artifact_chars: int = 10_000
    """Only artifacts above this many characters are ever reduced."""
    max_artifact_tokens: int | None = 500
    """The most one large artifact keeps beside the note naming its stored original, decided once on arrival
    (every token kept is re-read by every later request). None: what the artifact budget has left."""
    skip_below_chars: int = 5_000
    """No planning when the artifacts being planned total less than this."""
    llm_planning: bool | None = None
    """None (default): on only when `planner_model` is set (an extra LLM call nobody expects from a history
    processor). When on, a plan is still skipped when it is not worth its cost."""
    planner_model: ModelRef | None = None
    """The model that plans (setting it turns LLM planning on). Default: the summarizer's model."""
    planner_timeout: float = 30.0
    """Seconds before the LLM plan is abandoned for the heuristic plan."""
    expensive_price_per_mtok: float = 10.0
    """A serving model above this price (USD per million input tokens) makes an LLM plan worth its cost."""
    margin: float = 0.3
    """Artifacts "fit" when they use at most `1 - margin` of the budget, in [0, 1)."""
    default_reduction: Literal['extract', 'summarize'] = 'extract'
    """What the heuristic planner does with a large artifact that does not fit: `extract` (deterministic and
    free) or `summarize` (an LLM call, cached)."""
    artifact_summary_max_tokens: int = 1_000
    """The cap on one artifact summary (less when the budget is short)."""
    min_extract_tokens: int = 300
    """With less budget left than this, an artifact is excluded (a stub) rather than extracted."""
    min_preview_tokens: int = 300
    """The artifact the current request answers always keeps at least this much."""
    chunk_chars: int = 2_000
    """Chunk size for `extract`."""
    stub_preview_chars: int = 200
    """Length of the one-line preview in an `exclude` stub."""
    planner_preview_chars: int = 400
    """How much of each artifact the LLM planner sees."""
    reducers: Mapping[str, Reducer] = field(default_factory=dict)
    """Per-tool reducers by tool name, run before planning (see `browser_snapshot_reducer`,
    `console_output_reducer`)."""
    exempt_tools: frozenset[str] = frozenset({'read_artifact'})
    """Tools whose returns are never planned by their size (reducing `read_artifact` would send the model in
    circles); when the newest request does not fit, they share its room like the rest."""
    file_settings: FileSettings = field(default_factory=FileSettings)
    """Limits for converting attached files."""
    convert_attachments: bool = True
    """Convert attached documents to markdown and fit images for the serving model."""

    def __post_init__(self) -> None:
        if isinstance(self.file_settings, dict):  # an agent spec gives nested settings as a mapping
            object.__setattr__(self, 'file_settings', FileSettings(**self.file_settings))
        if not 0 < self.budget_fraction <= 1:
            raise ValueError(
                f'ArtifactSettings.budget_fraction must be in (0, 1], got {self.budget_fraction!r}'
            )
        if not 0 <= self.margin < 1:
            raise ValueError(f'ArtifactSettings.margin must be in [0, 1), got {self.margin!r}')
        positive = (
            'large_artifact_chars',
            'artifact_summary_max_tokens',
            'chunk_chars',
            'planner_timeout',
            'planner_preview_chars',
            'max_artifact_tokens',
            'artifact_budget_tokens',
        )
        for name in positive:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f'ArtifactSettings.{name} must be positive, got {value!r}')

    @property
    def uses_llm_planning(self) -> bool:
        return self.llm_planning if self.llm_planning is not None else self.planner_model is not None

    def view_cap(self, tokens: int) -> int:
        """What one large artifact of `tokens` may keep of `tokens` (`max_artifact_tokens`)."""
        return tokens if self.max_artifact_tokens is None else min(tokens, self.max_artifact_tokens)

    def hard_limit(self, limits: ContextLimits) -> int:
        """The history's hard limit for this stage: the policy's budget, at most its compaction trigger."""
        return hard_limit(limits)

    def resolve_budget(self, limits: ContextLimits) -> int:
        """Tokens for all artifacts together."""
        if self.artifact_budget_tokens is not None:
            return self.artifact_budget_tokens
        return max(int(self.hard_limit(limits) * self.budget_fraction), 1)
