"""How many tokens the newest request may carry: one rule for the stages and the read-back tool.

The request gets the room older messages leave, never less than the artifact budget and never more than the
window can free (the budget less what it never drops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart

from ._policy import ContextLimits

if TYPE_CHECKING:
    from ..tokens import TokenCounter

NOTE_RESERVE = 128
"""Tokens kept for the window's note (it names its stored transcript) beside what the window never drops."""

_READ_HEADER_TOKENS = 48
"""What a read-back's own first line costs: `[art_...: characters a-b of n. Call again with offset=b ...]`."""
_MIN_READ_TOKENS = 200
"""A read returns at least this much: an empty page would only make the model ask again."""


def hard_limit(limits: ContextLimits) -> int:
    """The limit a history is planned against: the policy's budget, at most its compaction trigger."""
    return max(min(limits.budget, limits.trigger), 1)


def request_room(limits: ContextLimits, *, others: int, kept: int, floor: int) -> int:
    """Tokens the newest request may use: what `others` (the rest of the request: older messages,
    instructions, tools) leave of the hard limit, at least `floor` (the artifact budget), at most what the
    window can free while keeping `kept` tokens it never drops (`window_room`)."""
    return max(min(max(hard_limit(limits) - others, floor), window_room(limits, kept=kept)), 0)


def window_room(limits: ContextLimits, *, kept: int) -> int:
    """The most the newest request may use when the window drops everything it may: the budget less the
    `kept` tokens it never drops and its note. Over it, no cut at a unit boundary can make the request fit."""
    return max(limits.budget - kept - NOTE_RESERVE, 0)


def kept_tokens(
    messages: Sequence[ModelMessage],
    per_message: Sequence[int],
    overhead: int,
    *,
    keep_first_user_message: bool,
) -> int:
    """What the window never drops, the newest message aside: the overhead (instructions, tools), the
    preserved head and the other messages of the last unit (the response whose calls the request answers)."""
    from ..messages.units import head_length, split_units

    units = split_units(messages)
    if not units:
        return overhead
    head = head_length(messages, units, keep_first_user_message=keep_first_user_message)
    last = units[-1]
    return (
        overhead
        + sum(per_message[: min(head, last.start)])
        + sum(per_message[last.start : len(messages) - 1])
    )


def read_room_tokens(
    messages: Sequence[ModelMessage],
    *,
    counter: TokenCounter,
    limits: ContextLimits,
    floor: int,
    tool_name: str,
    keep_first_user_message: bool = True,
) -> int | None:
    """Tokens one read-back may return: the newest request's room shared by the reads the newest response
    calls (`messages` ends with it), less the framing of every return that request will carry. None when
    `messages` does not end with that response (1.0, durable activities): the stage that fits the newest
    request then cuts the pages instead.
    """
    if not messages or not isinstance(messages[-1], ModelResponse):
        return None
    estimate = counter.estimate(messages)
    kept = kept_tokens(
        messages, estimate.per_message, estimate.overhead, keep_first_user_message=keep_first_user_message
    )
    # the request that will carry the reads is not in `messages` yet: it is the newest, the rest are `others`;
    # `kept_tokens` left out the newest message, here the response, which the window keeps
    room = request_room(limits, others=estimate.total, kept=kept + estimate.per_message[-1], floor=floor)
    calls = [p for p in messages[-1].parts if isinstance(p, ToolCallPart)]
    reads = max(sum(1 for call in calls if call.tool_name == tool_name), 1)
    profile = counter.tokenizer_profile
    framing = sum(
        profile.message_overhead + profile.tool_call_overhead + counter.count_text(call.tool_name)
        for call in calls
    )
    return max((room - framing) // reads - _READ_HEADER_TOKENS, _MIN_READ_TOKENS)
