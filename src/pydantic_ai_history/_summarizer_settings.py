"""`SummarizerSettings`: the one home of every LLM call the package makes (summaries, plans, chunk merges)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, Union

if TYPE_CHECKING:
    from pydantic_ai.models import AbstractModel
    from pydantic_ai.settings import ModelSettings

__all__ = ('DEFAULT_SUMMARIZER_INPUT_TOKENS', 'ModelRef', 'SummarizerSettings')

ModelRef: TypeAlias = Union['AbstractModel', str]
"""A pydantic-ai model (`Model`, or a wrapper such as `FallbackModel`), or a name such as
`'openai:gpt-4.1-mini'`."""

DEFAULT_SUMMARIZER_INPUT_TOKENS = 180_000
"""The summarizer's input cap when neither `max_input_tokens` nor a smaller summarizer window decides it."""


@dataclass(frozen=True, kw_only=True)
class SummarizerSettings:
    """The model and limits of every LLM call the package makes: compaction summaries, artifact summaries,
    artifact plans and chunk merges. Each call falls back to a deterministic result when it fails."""

    model: ModelRef | None = None
    """The model that writes summaries and plans. Default: the run's own model."""
    model_settings: ModelSettings | None = None
    """`ModelSettings` for every such request (e.g. a low temperature). Default: the model's own."""
    instructions: str | None = None
    """Replaces the compaction summary's instructions (the section list and the rules); the prompt still
    carries the original task, the previous summary and the transcript."""
    timeout: float = 60.0
    """Seconds before a call counts as failed and the deterministic fallback is used."""
    max_input_tokens: int | None = None
    """The cap on one request's input. Default 180,000, or the summarizer's own window less the summary when
    that is smaller; a longer transcript or artifact is summarized in chunks cut at unit boundaries."""

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f'SummarizerSettings.timeout must be positive, got {self.timeout!r}')
        if self.max_input_tokens is not None and self.max_input_tokens < 1_000:
            raise ValueError(
                f'SummarizerSettings.max_input_tokens must be at least 1,000, got {self.max_input_tokens!r}'
            )

    def input_cap(self, summarizer_window: int | None, *, answer_tokens: int) -> int:
        """The input cap for a summarizer with `summarizer_window` (None when unknown) that may answer with up
        to `answer_tokens`."""
        if self.max_input_tokens is not None:
            return self.max_input_tokens
        cap = DEFAULT_SUMMARIZER_INPUT_TOKENS
        if summarizer_window is not None:
            cap = min(cap, summarizer_window - answer_tokens)
        return max(cap, 1_000)
