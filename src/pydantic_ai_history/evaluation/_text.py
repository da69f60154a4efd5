"""The text a model sees of a history, and the one normalisation the scores allow (whitespace and case)."""

from __future__ import annotations

from collections.abc import Sequence

from .._compat import ModelMessage
from ..stages._transcript import render_units
from ..tokens import TokenCounter
from ..units import split_units

__all__ = ('context_text', 'normalize')


def normalize(text: str) -> str:
    """`text` with runs of whitespace made one space and letters lower-cased: nothing else is forgiven."""
    return ' '.join(text.split()).lower()


def context_text(messages: Sequence[ModelMessage], counter: TokenCounter) -> str:
    """Everything a model reads of `messages`, rendered as the stored transcripts render it (system prompts,
    user text, tool calls and results, summaries and their reference lines)."""
    rendered = render_units(messages, split_units(messages), counter, tool_result_max_tokens=None)
    return '\n'.join(unit.text for unit in rendered)
