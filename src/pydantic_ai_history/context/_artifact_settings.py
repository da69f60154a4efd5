"""The artifact stage's own settings. Its hard limit is the context policy's (`ContextPolicy`) and its
summaries use `SummarizerSettings`: one home each."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..budget._policy import UNSET, ContextLimits, ItemSizes, Unset, deprecated_setting
from ..budget._room import hard_limit
from ..files import FileSettings
from ._summarizer_settings import ModelRef

_DEPRECATED = {
    'large_artifact_chars': 'ContextPolicy(large_item_tokens=...)',
    'max_artifact_tokens': 'ContextPolicy(item_tokens=...)',
    'min_extract_tokens': 'ContextPolicy(item_tokens=...) (it is 60% of that)',
    'min_preview_tokens': 'ContextPolicy(item_tokens=...) (it is 60% of that)',
    'skip_below_chars': 'ContextPolicy(large_item_tokens=...) (it is half of that)',
}
"""The old size settings and their home."""


@dataclass(frozen=True, kw_only=True)
class ArtifactSizes:
    """The sizes the artifact stage plans with on one request, all in tokens."""

    keep: int | None
    """What one large artifact keeps; None: what the artifact budget has left."""
    large: int
    """Over this an artifact is large."""
    least: int
    """With less budget left than this, an artifact is a stub rather than a view."""
    least_preview: int
    """The artifact the current request answers keeps at least this much."""
    skip_below: int
    """No planning when the artifacts total less than this."""

    def view_cap(self, tokens: int) -> int:
        """What one large artifact of `tokens` may keep of them."""
        return tokens if self.keep is None else min(tokens, self.keep)


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
    large_artifact_chars: int | None = None
    """Deprecated: `ContextPolicy(large_item_tokens=...)` (in tokens); a value given here is honoured, read as
    `large_item_tokens` at 4 characters a token."""
    max_artifact_tokens: int | Unset | None = UNSET
    """Deprecated: `ContextPolicy(item_tokens=...)`; a value given here (None included) is honoured."""
    min_extract_tokens: int | None = None
    """Deprecated: follows `ContextPolicy.item_tokens` (60% of it); a value given here is honoured."""
    min_preview_tokens: int | None = None
    """Deprecated: follows `ContextPolicy.item_tokens` (60% of it); a value given here is honoured."""
    skip_below_chars: int | None = None
    """Deprecated: follows `ContextPolicy.large_item_tokens` (half of it); a value given here is honoured,
    read at 4 characters a token."""

    def __post_init__(self) -> None:
        for name, home in _DEPRECATED.items():
            if getattr(self, name) is not (UNSET if name == 'max_artifact_tokens' else None):
                deprecated_setting(f'ArtifactSettings.{name}', home)
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
            'min_extract_tokens',
            'min_preview_tokens',
            'skip_below_chars',
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, (int, float)) and value <= 0:
                raise ValueError(f'ArtifactSettings.{name} must be positive, got {value!r}')

    @property
    def uses_llm_planning(self) -> bool:
        return self.llm_planning if self.llm_planning is not None else self.planner_model is not None

    def sizes(self, limits: ContextLimits | None = None) -> ArtifactSizes:
        """The policy's item sizes (`limits.sizes`; None: the defaults) for this stage, with the deprecated
        settings given here applied."""
        sizes = limits.sizes if limits is not None else ItemSizes()
        keep = sizes.keep if self.max_artifact_tokens is UNSET else self.max_artifact_tokens
        large = sizes.large if self.large_artifact_chars is None else max(self.large_artifact_chars // 4, 1)
        derived = ItemSizes(keep, large)
        return ArtifactSizes(
            keep=keep,
            large=large,
            least=self.min_extract_tokens or derived.least_view,
            least_preview=self.min_preview_tokens or derived.least_view,
            skip_below=self.skip_below_chars // 4 if self.skip_below_chars else derived.worth_planning,
        )

    def hard_limit(self, limits: ContextLimits) -> int:
        """The history's hard limit for this stage: the policy's budget, at most its compaction trigger."""
        return hard_limit(limits)

    def resolve_budget(self, limits: ContextLimits) -> int:
        """Tokens for all artifacts together."""
        if self.artifact_budget_tokens is not None:
            return self.artifact_budget_tokens
        return max(int(self.hard_limit(limits) * self.budget_fraction), 1)
