"""Token counting fallbacks and the final head-and-tail token cut."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..tokens._estimate import estimate_tokens_offline

CountTokens = Callable[[str], int]

_HEAD_SHARE = 0.7
_MARKER_TOKENS = 16
_EXACT_CHARS_PER_TOKEN = 12
"""A text with more characters than this per allowed token is cut without being tokenized whole."""


@dataclass(frozen=True)
class TokenCut:
    text: str
    full_tokens: int
    shown_tokens: int
    cut: bool


def _longest(text: str, budget: int, count: CountTokens, *, suffix: bool) -> str:
    """The longest prefix (or suffix) of `text` within `budget` tokens, found by bisection on characters."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        part = text[len(text) - mid :] if suffix else text[:mid]
        if count(part) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[len(text) - lo :] if suffix else text[:lo]


def _snap(part: str, *, suffix: bool) -> str:
    """Cut at a line boundary when one is close, so the marker does not split a line."""
    window = max(len(part) // 5, 1)
    if suffix:
        i = part.find('\n', 0, window)
        return part[i + 1 :] if i >= 0 else part
    i = part.rfind('\n', len(part) - window)
    return part[:i] if i >= 0 else part


def cut_tokens(text: str, max_tokens: int, count: CountTokens | None = None) -> TokenCut:
    """Cut `text` to at most `max_tokens` by `count`: 70% head and 30% tail around an omission marker.

    Only what is shown is tokenized: a text longer than `_EXACT_CHARS_PER_TOKEN` characters per allowed
    token cannot fit, so its full count is estimated from its length at the rate measured on the head.
    """
    count = count or estimate_tokens_offline
    full: int | None = None
    if len(text) <= max_tokens * _EXACT_CHARS_PER_TOKEN:
        full = count(text)
        if full <= max_tokens:
            return TokenCut(text, full, full, cut=False)
    budget = max(max_tokens - _MARKER_TOKENS, 2)
    head_budget = max(int(budget * _HEAD_SHARE), 1)
    tail_budget = max(budget - head_budget, 1)
    # Bisection needs at most ~8 chars per token of search space; beyond that the cut is already short.
    head = _snap(_longest(text[: head_budget * 8], head_budget, count, suffix=False), suffix=False)
    tail = _snap(_longest(text[-tail_budget * 8 :], tail_budget, count, suffix=True), suffix=True)
    if len(head) + len(tail) > len(text):
        tail = tail[len(head) + len(tail) - len(text) :]
    shown = count(head) + count(tail)
    if full is None:
        sampled = len(head) + len(tail)
        rate = shown / sampled if sampled else 1 / 3
        full = max(math.ceil(len(text) * rate), shown + 1)
    marker = f'\n\n[... {max(full - shown, 0):,} tokens omitted ...]\n\n'
    return TokenCut(head.rstrip('\n') + marker + tail.lstrip('\n'), full, shown, cut=True)
