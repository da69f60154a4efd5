"""The summarizer's view of what it replaces: bounded, because the store keeps everything.

The full transcript is stored first, so the summarizer needs what the summary must carry, not every byte:
user and assistant messages whole, large tool results and arguments as their beginning plus the passages most
relevant to the task and focus (BM25), cut further until the view fits its budget (down to a floor).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from pydantic_ai.messages import ModelMessage

from ...messages.units import split_units
from ...tokens import TokenCounter
from .._transcript import TranscriptUnit, render_units

_FLOOR_TOKENS = 100
"""No tool result is cut below this many tokens to fit the view's budget."""
_HEAD_SHARE = 0.35
"""The share of a cut result that is its beginning; the rest is its most relevant passages."""


def summarizer_view(
    messages: Sequence[ModelMessage],
    counter: TokenCounter,
    *,
    record_tokens: int | None,
    view_tokens: int | None,
    query: str,
) -> list[TranscriptUnit]:
    """The per-result cap is halved until the whole is within `view_tokens` or at the floor."""
    units = split_units(messages)
    cap = record_tokens
    while True:
        cut = partial(_cut, counter, query) if cap is not None else None
        rendered = render_units(messages, units, counter, tool_result_max_tokens=cap, cut=cut)
        if view_tokens is None or cap is None or cap <= _FLOOR_TOKENS:
            return rendered
        if sum(unit.tokens for unit in rendered) <= view_tokens:
            return rendered
        cap = max(cap // 2, _FLOOR_TOKENS)


def _cut(counter: TokenCounter, query: str, body: str, cap: int) -> str:
    total = counter.count_text(body)
    chars_per_token = len(body) / max(total, 1)
    head_chars = int(cap * _HEAD_SHARE * chars_per_token)
    note = f'\n[... {total:,} tokens in all (stored whole); the passages most relevant to the task follow]\n'
    room = int((cap * (1 - _HEAD_SHARE) - counter.count_text(note)) * chars_per_token)
    head = body[:head_chars]
    from ...readback._retrieval import extract_passages  # loaded by the first cut view, not with the package

    passages = extract_passages(body[head_chars:], query, max(room, 0)).text if room > 50 else ''
    text = f'{head}{note}{passages}'
    if counter.count_text(text) > cap * 1.2:  # dense text the estimate missed: a plain cut instead
        return counter.truncate_text(body, cap, head_fraction=0.5)
    return text
