"""A history as atomic units, and where it may safely be cut.

Stages drop or replace units, never single messages, so no tool call is separated from its return; this is
the only module that pairs them. Pairing follows pydantic-ai's pre-send repair, by call id rather than by
adjacency, so returns split over several requests (deferred tools, approvals) still pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
    UserPromptPart,
)

from .._compat import answered_call_id, is_request_scoped


@dataclass(frozen=True)
class Unit:
    """Messages `[start, end)` that must be kept or dropped together: a response carrying tool calls with
    every request that answers them and whatever lies between (overlapping units merged); every other
    message alone."""

    start: int
    end: int
    starts_with_request: bool
    """True when the unit opens with a `ModelRequest` that answers no tool call: a history may begin here."""

    def __len__(self) -> int:
        return self.end - self.start


def tool_call_ids(message: ModelResponse) -> list[str]:
    """Ids of the function tool calls in a response (native calls are answered inside the response)."""
    return [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]


@dataclass
class ToolPairing:
    """pydantic-ai's ordered matching of tool results to tool calls, fed one message at a time (so a grown
    history costs only its new messages)."""

    length: int = 0
    """How many messages were fed."""
    last_response: int | None = None
    """Index of the newest `ModelResponse`: its open calls are the live frontier, still answerable."""
    reach: dict[int, int] = field(default_factory=dict)
    """Response index -> index of the last request holding a result for one of its calls."""
    orphans: list[tuple[int, str]] = field(default_factory=list)
    """(request index, call id) of results whose id no earlier response called: pydantic-ai drops them."""
    repeated_returns: list[tuple[int, str]] = field(default_factory=list)
    """(request index, call id) of results for a call that was already answered: pydantic-ai keeps them."""
    repeated_calls: list[tuple[int, str]] = field(default_factory=list)
    """(response index, call id) of an id called twice in one response (answered in order)."""
    shadowed: list[tuple[int, str]] = field(default_factory=list)
    """(response index, call id) of open calls whose id a later response called again: never answerable."""
    open_calls: dict[str, list[int]] = field(default_factory=dict)
    """Call id -> indices of the responses whose call with that id is not answered yet, oldest first."""
    _latest_caller: dict[str, int] = field(default_factory=dict)

    def add(self, message: ModelMessage) -> None:
        """Feed the next message of the history."""
        index = self.length
        self.length += 1
        if isinstance(message, ModelResponse):
            self._open(message, index)
        else:
            self._answer(message, index)

    def extend(self, messages: Iterable[ModelMessage]) -> ToolPairing:
        for message in messages:
            self.add(message)
        return self

    def _open(self, response: ModelResponse, index: int) -> None:
        self.last_response = index
        seen_here: set[str] = set()
        for call_id in tool_call_ids(response):
            if call_id in seen_here:
                self.repeated_calls.append((index, call_id))
            seen_here.add(call_id)
            pending = self.open_calls.setdefault(call_id, [])
            if pending and pending[-1] != index:
                # a later result now answers this call, never the earlier ones (pydantic-ai's rule)
                self.shadowed.extend((earlier, call_id) for earlier in pending)
                pending.clear()
            pending.append(index)
            self._latest_caller[call_id] = index

    def _answer(self, request: ModelRequest, index: int) -> None:
        for part in request.parts:
            call_id = answered_call_id(part)
            if call_id is None:
                continue
            pending = self.open_calls.get(call_id)
            if pending:
                response = pending.pop(0)
                if not pending:
                    del self.open_calls[call_id]
            elif call_id in self._latest_caller:
                response = self._latest_caller[call_id]
                self.repeated_returns.append((index, call_id))
            else:
                self.orphans.append((index, call_id))
                continue
            self.reach[response] = index

    def dangling(self) -> list[tuple[int, str]]:
        """(response index, call id) of every call with no result, in order: shadowed and still open."""
        still_open = [(response, call_id) for call_id, rs in self.open_calls.items() for response in rs]
        return sorted([*self.shadowed, *still_open])


def pair_tool_calls(messages: Sequence[ModelMessage]) -> ToolPairing:
    """The pairing of every tool call and result of a history."""
    return ToolPairing().extend(messages)


def answers_calls(message: ModelMessage) -> bool:
    """Whether `message` is a request holding a tool result (it cannot open a history)."""
    return isinstance(message, ModelRequest) and any(answered_call_id(p) is not None for p in message.parts)


def split_units(messages: Sequence[ModelMessage]) -> list[Unit]:
    """Split a history into atomic units, in order, covering every message exactly once."""
    reach = pair_tool_calls(messages).reach
    units: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        last = reach.get(i, i)
        k = i + 1
        while k <= last:  # a response inside the span may be answered later still: the unit grows
            last = max(last, reach.get(k, k))
            k += 1
        first = messages[i]
        starts_with_request = isinstance(first, ModelRequest) and not answers_calls(first)
        units.append(Unit(i, last + 1, starts_with_request=starts_with_request))
        i = last + 1
    return units


def _first_user_turn(messages: Sequence[ModelMessage]) -> int | None:
    """Index of the request with the first user prompt, when it opens the conversation: system-prompt-only
    requests or a malformed start may come before it, but any other request (our summary, say) means the
    first user turn is gone."""
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest):
            continue
        if any(isinstance(p, UserPromptPart) for p in message.parts):
            return index
        if not any(isinstance(p, SystemPromptPart) for p in message.parts) and not answers_calls(message):
            return None
    return None


def head_length(
    messages: Sequence[ModelMessage], units: Sequence[Unit], *, keep_first_user_message: bool
) -> int:
    """How many leading messages are kept verbatim: the system prompt and, by default, the first user turn.
    A unit boundary, never into the last unit, so a short history is not all head."""
    if not units:
        return 0
    wanted = 0
    first = messages[0]
    if isinstance(first, ModelRequest) and any(isinstance(p, SystemPromptPart) for p in first.parts):
        wanted = 1
    if keep_first_user_message:
        user = _first_user_turn(messages)
        if user is not None:
            wanted = user + 1
    return next((unit.end for unit in units[:-1] if unit.end >= wanted), 0) if wanted else 0


def fit_suffix(costs: Sequence[int], budget: int, *, at_least: int = 1) -> int:
    """Index of the first unit of the longest run of trailing units whose costs fit `budget` (the last
    `at_least` kept whatever they cost). It never skips a large unit to keep older ones: that makes an
    incoherent history."""
    n = len(costs)
    start = max(n - at_least, 0)
    used = sum(costs[start:])
    while start > 0 and used + costs[start - 1] <= budget:
        start -= 1
        used += costs[start]
    return start


def system_parts(messages: Sequence[ModelMessage]) -> list[SystemPromptPart]:
    """The system prompt parts of `messages`, in order: what a stage that drops messages must carry on. A
    request-scoped one (a nudge for the request it was part of, such as a near-limit notice) is not carried:
    the model no longer sees it anyway."""
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, SystemPromptPart) and not is_request_scoped(p)
    ]
