"""History invariants as data: every violation with its message index and a readable reason.

The invariants are the ones providers enforce (tool pairing, a history that opens with a request) plus
the ones this package promises (system prompt kept, current request unchanged, signed thinking intact,
budget met). Users can run `assert_valid_history` in their own tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ._compat import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ThinkingPart,
    answered_call_id,
)
from .units import system_parts, tool_call_ids

__all__ = ('HistoryValidationError', 'Violation', 'assert_valid_history', 'validate_history')

ViolationCode = Literal[
    'empty',
    'not_ending_with_request',
    'starts_with_response',
    'starts_with_tool_return',
    'dangling_tool_call',
    'orphan_tool_return',
    'duplicate_tool_call_id',
    'empty_message',
    'system_prompt_lost',
    'current_request_changed',
    'signed_thinking_altered',
    'over_budget',
]


@dataclass(frozen=True)
class Violation:
    """One broken invariant. `index` is the message index (-1 for the history as a whole)."""

    code: ViolationCode
    index: int
    reason: str
    severity: Literal['error', 'warning'] = 'error'

    def __str__(self) -> str:
        where = f'message {self.index}' if self.index >= 0 else 'history'
        return f'{self.severity} [{self.code}] at {where}: {self.reason}'


class HistoryValidationError(AssertionError):
    """Raised by `assert_valid_history`; carries every violation found."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)
        super().__init__('invalid history:\n' + '\n'.join(f'  - {v}' for v in self.violations))


def validate_history(
    messages: Sequence[ModelMessage],
    *,
    original: Sequence[ModelMessage] | None = None,
    budget: int | None = None,
    count_tokens: Callable[[Sequence[ModelMessage]], int] | None = None,
) -> list[Violation]:
    """Check a history against the invariants; return every violation found (empty when valid).

    With `original` (the history before processing) it also checks that the current request is unchanged,
    system prompt parts survive and signed thinking parts are kept exactly or dropped with their response.
    With `budget` and `count_tokens` it checks the history fits.
    """
    found: list[Violation] = []
    if not messages:
        return [
            Violation('empty', -1, 'the history is empty; pydantic-ai rejects an empty processed history')
        ]
    if not isinstance(messages[-1], ModelRequest):
        found.append(
            Violation(
                'not_ending_with_request',
                len(messages) - 1,
                'the last message must be the current ModelRequest',
            )
        )
    first = messages[0]
    if isinstance(first, ModelResponse):
        found.append(Violation('starts_with_response', 0, 'the history opens with a model response'))
    elif any(answered_call_id(p) is not None for p in first.parts):
        found.append(
            Violation(
                'starts_with_tool_return', 0, 'the history opens with tool returns whose calls are gone'
            )
        )
    found.extend(_pairing_violations(messages))
    for index, message in enumerate(messages):
        if not message.parts:
            found.append(
                Violation('empty_message', index, f'{type(message).__name__} has no parts', 'warning')
            )
    if original is not None:
        found.extend(_preservation_violations(messages, original))
    if budget is not None and count_tokens is not None:
        used = count_tokens(messages)
        if used > budget:
            found.append(Violation('over_budget', -1, f'{used:,} tokens exceed the budget of {budget:,}'))
    return found


def _pairing_violations(messages: Sequence[ModelMessage]) -> list[Violation]:
    found: list[Violation] = []
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            calls = tool_call_ids(message)
            duplicates = {c for c in calls if calls.count(c) > 1}
            for call_id in sorted(duplicates):
                found.append(
                    Violation(
                        'duplicate_tool_call_id',
                        index,
                        f'tool_call_id {call_id!r} appears twice in one response',
                    )
                )
            following = messages[index + 1] if index + 1 < len(messages) else None
            answered = (
                {answered_call_id(p) for p in following.parts}
                if isinstance(following, ModelRequest)
                else set()
            )
            for call_id in calls:
                if call_id not in answered:
                    found.append(
                        Violation(
                            'dangling_tool_call',
                            index,
                            f'tool call {call_id!r} has no return in the next request',
                        )
                    )
        else:
            previous = messages[index - 1] if index > 0 else None
            called = set(tool_call_ids(previous)) if isinstance(previous, ModelResponse) else set()
            for part in message.parts:
                answered_id = answered_call_id(part)
                if answered_id is not None and answered_id not in called and index > 0:
                    found.append(
                        Violation(
                            'orphan_tool_return',
                            index,
                            f'tool return {answered_id!r} answers no call in the previous response',
                        )
                    )
    return found


def _preservation_violations(
    messages: Sequence[ModelMessage], original: Sequence[ModelMessage]
) -> list[Violation]:
    found: list[Violation] = []
    if original and messages and messages[-1] != original[-1]:
        found.append(
            Violation('current_request_changed', len(messages) - 1, 'the current request was altered')
        )
    kept_system = {p.content for p in system_parts(messages)}
    for part in system_parts(original):
        if part.content not in kept_system:
            found.append(
                Violation('system_prompt_lost', -1, f'system prompt {part.content[:60]!r} was dropped')
            )
    original_responses = [m for m in original if isinstance(m, ModelResponse)]
    for index, message in enumerate(messages):
        if not isinstance(message, ModelResponse):
            continue
        if any(isinstance(p, ThinkingPart) and p.signature for p in message.parts) and not any(
            message.parts == o.parts for o in original_responses
        ):
            found.append(
                Violation(
                    'signed_thinking_altered',
                    index,
                    'a response with signed thinking was changed, not kept whole',
                )
            )
    return found


def assert_valid_history(
    messages: Sequence[ModelMessage],
    *,
    original: Sequence[ModelMessage] | None = None,
    budget: int | None = None,
    count_tokens: Callable[[Sequence[ModelMessage]], int] | None = None,
    allow_warnings: bool = True,
) -> None:
    """Raise `HistoryValidationError` listing every violation; warnings pass unless `allow_warnings=False`."""
    violations = validate_history(messages, original=original, budget=budget, count_tokens=count_tokens)
    bad = violations if not allow_warnings else [v for v in violations if v.severity == 'error']
    if bad:
        raise HistoryValidationError(bad)
