"""How deeply a JSON text nests, found without parsing it: `json` (and any recursive walk of what it builds)
raises `RecursionError` on `'[' * 100_000`. Every place that parses text as JSON asks `json_too_deep` first
and treats a deeper text as plain text. The scan is linear and runs in C. A value (a tool's return) nested as
deep is read through `cut_deep`, which `value_too_deep` tells (both iterative).
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

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


_CONTAINERS = (dict, list, tuple, set, frozenset)


def value_too_deep(value: object, limit: int = MAX_PARSE_DEPTH) -> bool:
    """Whether `value`'s dicts, lists, tuples and sets nest deeper than `limit` (found without recursion; a
    container met twice on one path, a cycle, counts as too deep)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, _CONTAINERS):
            continue
        if depth >= limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))
    return False


def cut_deep(value: object, limit: int = MAX_PARSE_DEPTH) -> object:
    """A copy of `value` (dicts and lists; tuples and sets become lists) whose containers deeper than `limit`
    are replaced by a note saying so: what a deep value is read as (built without recursion)."""
    note = f'[nested deeper than {limit} levels: not shown]'

    def shallow(item: object, depth: int) -> object:
        if not isinstance(item, _CONTAINERS):
            return item
        if depth >= limit:
            return note
        return {} if isinstance(item, dict) else []

    root = shallow(value, 0)
    stack: list[tuple[object, object, int]] = [(value, root, 0)]
    while stack:
        source, copy, depth = stack.pop()
        if isinstance(source, dict) and isinstance(copy, dict):
            for key, child in source.items():
                copy[key if isinstance(key, (str, int, float, bool)) or key is None else str(key)] = made = (
                    shallow(child, depth + 1)
                )
                if made is not child:
                    stack.append((child, made, depth + 1))
        elif isinstance(copy, list) and isinstance(source, _CONTAINERS):
            for child in source:
                copy.append(made := shallow(child, depth + 1))
                if made is not child:
                    stack.append((child, made, depth + 1))
    return root


def json_text(value: Any) -> str:
    """`value` as the compact JSON a model sees; never raises: what pydantic cannot serialise (a file URL
    whose media type cannot be guessed, on some versions) is written with `str`. A value nested deeper than
    `MAX_PARSE_DEPTH` is written down to that depth, its deeper part named, without recursion."""
    import pydantic_core

    if value_too_deep(value):
        value = cut_deep(value)
    try:
        return pydantic_core.to_json(value, fallback=str).decode()
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError):
        try:
            return str(value)
        except RecursionError:  # an object nested too deep to print (a model of models...)
            return f'[a {type(value).__name__} nested too deep to show]'
