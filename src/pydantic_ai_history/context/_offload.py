"""Which content is large enough that working on it must leave the event loop (`HistoryContext.off_loop`):
tokenizing takes about a second per 2 million tokens. Sizes come from a bounded walk, never by serializing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic_ai.messages import BinaryContent, ModelMessage

OFF_LOOP_CHARS = 64 * 1024
"""Content (characters of text, bytes of files) above this is worked on in a thread: the tokenizer alone
spends some 15 ms on it, which is what a loop may lose at once."""

LONG_HISTORY = 1_000
"""Messages read on the event loop at once (about 1.5 ms to check, 5-10 ms to bound by bytes); a longer
stretch never read before (a chat reloaded with thousands of messages: each run's first request) is read in a
thread."""

_MAX_VISITS = 10_000
"""Nodes a size walk reads before it calls the content large (a dict of 100,000 keys needs no full count)."""


def content_chars(value: Any, limit: int = OFF_LOOP_CHARS) -> int:
    """About how many characters (or bytes) `value` holds, counted until it passes `limit`."""
    total = 0
    stack = [value]
    visits = 0
    while stack and total <= limit:
        item = stack.pop()
        visits += 1
        if visits > _MAX_VISITS:
            return limit + 1
        if isinstance(item, (str, bytes, bytearray)):
            total += len(item)
        elif isinstance(item, BinaryContent):
            total += len(item.data)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            url = getattr(item, 'url', None)  # a file URL (a data URL holds the file itself)
            total += len(url) if isinstance(url, str) else 0
    return total


def is_large(value: Any) -> bool:
    """Whether working on `value` belongs off the event loop."""
    return content_chars(value) > OFF_LOOP_CHARS


def large_content(messages: Iterable[ModelMessage]) -> bool:
    """Whether any part of `messages` holds content over `OFF_LOOP_CHARS`, or all together do."""
    parts = [getattr(part, 'content', None) for message in messages for part in message.parts]
    return is_large(parts)
