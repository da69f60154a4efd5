"""A history as atomic units, and where it may safely be cut.

Every stage that drops or replaces messages works on units, never on single messages, so no tool call is
separated from its return. This is the only module that pairs calls with returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._compat import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
    UserPromptPart,
    answered_call_id,
)

__all__ = ('Unit', 'fit_suffix', 'head_length', 'split_units', 'system_parts', 'tool_call_ids')


@dataclass(frozen=True)
class Unit:
    """Messages `[start, end)` that must be kept or dropped together.

    A response carrying tool calls forms one unit with the request that carries their returns (retries
    included); every other message is a unit of its own. Native (builtin) tool calls and their returns
    live in the same response, so they are atomic already.
    """

    start: int
    end: int
    starts_with_request: bool
    """True when the unit opens with a `ModelRequest` that answers no tool call: a history may begin here."""

    def __len__(self) -> int:
        return self.end - self.start


def tool_call_ids(message: ModelResponse) -> list[str]:
    """Ids of the function tool calls in a response (native calls are answered inside the response)."""
    return [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]


def _answers_calls(message: ModelRequest) -> bool:
    return any(answered_call_id(p) is not None for p in message.parts)


def split_units(messages: Sequence[ModelMessage]) -> list[Unit]:
    """Split a history into atomic units, in order, covering every message exactly once."""
    units: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        if isinstance(message, ModelResponse):
            end = i + 1
            if tool_call_ids(message) and end < n and isinstance(messages[end], ModelRequest):
                end += 1
            units.append(Unit(i, end, starts_with_request=False))
            i = end
        else:
            units.append(Unit(i, i + 1, starts_with_request=not _answers_calls(message)))
            i += 1
    return units


def head_length(
    messages: Sequence[ModelMessage], units: Sequence[Unit], *, keep_first_user_message: bool
) -> int:
    """How many leading messages are kept verbatim: the system prompt and, by default, the first user turn.

    Returns a unit boundary. The head never reaches into the last unit (the current request), so a short
    history is not all head.
    """
    if not units:
        return 0
    wanted = 0
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest):
            continue
        has_system = any(isinstance(p, SystemPromptPart) for p in message.parts)
        has_user = any(isinstance(p, UserPromptPart) for p in message.parts)
        if has_system and index == 0:
            wanted = 1
        if has_user and keep_first_user_message:
            wanted = index + 1
            break
        if not has_system:
            break
    if wanted == 0:
        return 0
    for unit in units[:-1]:
        if unit.end >= wanted:
            return unit.end
    return 0


def fit_suffix(costs: Sequence[int], budget: int, *, at_least: int = 1) -> int:
    """Index of the first unit of the longest run of trailing units whose costs fit `budget`.

    Walks from the newest unit back and stops at the first one that does not fit: it never skips a large
    unit to keep older ones (that "greedy fit" makes an incoherent history). The last `at_least` units are
    kept whatever they cost.
    """
    n = len(costs)
    start = max(n - at_least, 0)
    used = sum(costs[start:])
    while start > 0 and used + costs[start - 1] <= budget:
        start -= 1
        used += costs[start]
    return start


def system_parts(messages: Sequence[ModelMessage]) -> list[SystemPromptPart]:
    """The system prompt parts of `messages`, in order: what a stage that drops messages must carry on."""
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, SystemPromptPart)
    ]
