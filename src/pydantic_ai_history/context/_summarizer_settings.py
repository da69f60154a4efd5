"""`SummarizerSettings`: the one home of every LLM call the package makes (summaries, plans, chunk merges)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias, Union

if TYPE_CHECKING:
    from pydantic_ai.models import AbstractModel
    from pydantic_ai.settings import ModelSettings


ModelRef: TypeAlias = Union['AbstractModel', str]
"""A pydantic-ai model (`Model`, or a wrapper such as `FallbackModel`), or a name such as
`'openai:gpt-4.1-mini'`."""

DEFAULT_SUMMARIZER_INPUT_TOKENS = 180_000
"""The summarizer's input cap when neither `max_input_tokens` nor a smaller summarizer window decides it."""

Timeout: TypeAlias = Union[float, Literal['auto'], None]  # noqa: UP007 - a runtime alias on Python 3.10
"""Seconds, `'auto'` (scaled to the request: the model's measured speed, or a local server's slowest), or None
(no limit)."""

TextPurpose: TypeAlias = Literal['compaction_summary', 'chunk_merge', 'artifact_summary']
"""What a text request is for; also the name of the durable operation that makes it."""


def check_model_ref(value: object, field: str) -> None:
    """A model setting is a pydantic-ai model, a model name whose provider pydantic-ai knows, or None: checked
    at construction (`TypeError` / `ValueError` naming `field`), without building a model or any network."""
    if value is None:
        return
    if isinstance(value, str):
        from ..budget.model_info import unknown_provider

        if not value:
            raise ValueError(f'{field} must name a model, got an empty string')
        provider = unknown_provider(value)
        if provider is not None:
            raise ValueError(
                f'{field}={value!r}: pydantic-ai knows no provider {provider!r}. Use a name such as '
                "'openai:gpt-4.1-mini' or 'anthropic:claude-haiku-4-5', or pass a Model object."
            )
        return
    from pydantic_ai import models

    if not isinstance(value, getattr(models, 'AbstractModel', models.Model)):
        raise TypeError(
            f'{field} must be a pydantic-ai Model or a model name, got {type(value).__name__} {value!r}'
        )


def _check_type(value: object, field: str, types: tuple[type, ...], expected: str) -> None:
    if isinstance(value, bool) or not isinstance(value, types):
        raise TypeError(
            f'SummarizerSettings.{field} must be {expected}, got {type(value).__name__} {value!r}'
        )


@dataclass(frozen=True, kw_only=True)
class SummarizerSettings:
    """The model and limits of every LLM call the package makes: compaction summaries, artifact summaries,
    artifact plans and chunk merges. Each call falls back to a deterministic result when it fails."""

    model: ModelRef | None = None
    """The model that writes summaries and plans. Default: the run's own model."""
    model_settings: ModelSettings | None = None
    """`ModelSettings` for every such request (e.g. a low temperature). Default: the model's own. A text
    request (a summary, a chunk merge) also sends `max_tokens`, its answer's cap half as much again plus 256
    tokens, so a model that runs away stops, plus its thinking where it thinks (the budget set here, else
    16,384; 32,768 for `thinking='xhigh'`/`'max'`; a model whose profile thinks by default, such as OpenAI's
    reasoning models, too). A `max_tokens` given here or in the model's own settings wins. An answer cut at
    `max_tokens` is a failure (the fallback is used)."""
    instructions: str | None = None
    """Replaces the compaction summary's instructions (the section list and the rules); the prompt still
    carries the original task, the previous summary and the transcript."""
    timeout: Timeout = 'auto'
    """Seconds before a call fails and the fallback is used. `'auto'`: 60 s plus three times the request's
    time at the model's measured speed; on a local server (LM Studio, Ollama, llama.cpp), 60 s plus the prompt
    at 100 characters a second plus the request's `max_tokens` at 2 tokens a second (a large model on a CPU:
    about half an hour for a 2,000-token summary of a 30,000-character transcript). None: no limit."""
    max_input_tokens: int | None = None
    """The cap on one request's input. Default 180,000, or the summarizer's own window less the summary when
    that is smaller; a longer transcript or artifact is summarized in chunks cut at unit boundaries."""

    def __post_init__(self) -> None:
        check_model_ref(self.model, 'SummarizerSettings.model')
        timeout, cap = self.timeout, self.max_input_tokens
        if timeout is not None and timeout != 'auto':
            _check_type(timeout, 'timeout', (int, float), "seconds (a number), 'auto' or None")
            if not timeout > 0:
                raise ValueError(f'SummarizerSettings.timeout must be positive, got {timeout!r}')
        if cap is not None:
            _check_type(cap, 'max_input_tokens', (int,), 'a whole number of tokens (int)')
            if cap < 1_000:
                raise ValueError(f'SummarizerSettings.max_input_tokens must be at least 1,000, got {cap!r}')

    def input_cap(self, summarizer_window: int | None, *, answer_tokens: int) -> int:
        """The input cap for a summarizer with `summarizer_window` (None when unknown) that may answer with up
        to `answer_tokens`."""
        if self.max_input_tokens is not None:
            return self.max_input_tokens
        cap = DEFAULT_SUMMARIZER_INPUT_TOKENS
        if summarizer_window is not None:
            cap = min(cap, summarizer_window - answer_tokens)
        return max(cap, 1_000)
