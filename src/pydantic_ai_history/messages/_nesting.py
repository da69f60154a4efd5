"""How deeply a JSON text nests, found without parsing it: `json` (and any recursive walk of what it builds)
raises `RecursionError` on `'[' * 100_000`. Every place that parses text as JSON asks `json_too_deep` first
and treats a deeper text as plain text. The scan is linear and runs in C.
"""

from __future__ import annotations

import re
from itertools import accumulate

__all__ = ('MAX_PARSE_DEPTH', 'json_too_deep')

MAX_PARSE_DEPTH = 200
"""JSON nested deeper than this is never parsed: no real tool output or document nests this far, and the
limit keeps every recursive walk far from Python's recursion limit."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r'[^\[\]{}]+')
_STEP = {'[': 1, '{': 1, ']': -1, '}': -1}


def json_too_deep(text: str, limit: int = MAX_PARSE_DEPTH) -> bool:
    """Whether the brackets of `text` (outside its strings) nest deeper than `limit`."""
    if text.count('[') + text.count('{') <= limit:
        return False  # fewer openers than the limit: cannot nest deeper (the common case, two C scans)
    brackets = _NOT_BRACKET.sub('', _STRING.sub('', text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit
