"""History invariants as data: every violation with its message index and a readable reason.

The invariants are the ones providers enforce (tool pairing, a history that opens with a request) plus
the ones this package promises (system prompt kept, current request unchanged, signed thinking intact,
budget met). Users can run `assert_valid_history` in their own tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ThinkingPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._compat import is_compaction_response
from ._marks import own_metadata, sealed_kind
from .units import ToolPairing, answers_calls, system_parts, tool_call_ids

ViolationCode = Literal[
    'empty',
    'not_ending_with_request',
    'starts_with_response',
    'starts_with_tool_return',
    'dangling_tool_call',
    'orphan_tool_return',
    'duplicate_tool_call_id',
    'duplicate_tool_return',
    'empty_message',
    'system_prompt_lost',
    'current_request_changed',
    'signed_thinking_altered',
    'over_budget',
]

PAIRING_CODES: frozenset[ViolationCode] = frozenset(
    {'dangling_tool_call', 'orphan_tool_return', 'duplicate_tool_call_id', 'duplicate_tool_return'}
)
"""Codes about one tool call id; their `Violation.tool_call_id` says which."""


@dataclass(frozen=True)
class Violation:
    """One broken invariant. `index` is the message index (-1 for the history as a whole)."""

    code: ViolationCode
    index: int
    reason: str
    severity: Literal['error', 'warning'] = 'error'
    tool_call_id: str | None = None
    """The tool call id a pairing violation is about; None for the others."""

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
    finished: bool | None = None,
) -> list[Violation]:
    """Check a history against the invariants; return every violation found (empty when valid).

    Tool pairing is pydantic-ai's, by call id: an error is exactly what its pre-send repair would change;
    open calls of the newest response are only a warning (deferred results may still answer them). With
    `original` (the history before processing) it also checks the current request is unchanged, system
    prompts survive and signed thinking is kept exactly or dropped with its response; with `budget` and
    `count_tokens`, that it fits.

    How the history may end: with a request (the next one to send), or with a `ModelResponse` that calls no
    tool (a finished run: `result.all_messages()`). A history ending with a response whose tool calls are
    unanswered is `not_ending_with_request`. `finished=True` also accepts that (a run that ended with deferred
    tool calls; the calls stay `dangling_tool_call` warnings); `finished=False` requires a request at the end
    (what a processor's output must be). The default, None, is the rule above (0.1.0 reported any response at
    the end unless `finished=True`).
    """
    if not messages:
        return [
            Violation('empty', -1, 'the history is empty; pydantic-ai rejects an empty processed history')
        ]
    check = StructureCheck()
    check.extend(messages)
    found = _finished_end(messages, check.violations(messages), finished)
    if original is not None:
        found.extend(_preservation_violations(messages, original))
    if budget is not None and count_tokens is not None:
        used = count_tokens(messages)
        if used > budget:
            found.append(Violation('over_budget', -1, f'{used:,} tokens exceed the budget of {budget:,}'))
    return found


def _finished_end(
    messages: Sequence[ModelMessage], found: list[Violation], finished: bool | None
) -> list[Violation]:
    """`found` with the end of the history judged by `finished` (see `validate_history`)."""
    last = messages[-1]
    if not isinstance(last, ModelResponse) or finished is False:
        return found
    calls = tool_call_ids(last)
    if finished or not calls:
        return [v for v in found if v.code != 'not_ending_with_request']
    reason = (
        f'the history ends with a ModelResponse whose tool calls are unanswered ({", ".join(calls[:5])}): '
        'neither a finished run nor a request to send (finished=True accepts a run that ended with deferred '
        'tool calls)'
    )
    return [replace(v, reason=reason) if v.code == 'not_ending_with_request' else v for v in found]


class StructureCheck:
    """The structural checks of `validate_history` (ends, pairing, empty messages), fed incrementally, so a
    history grown by a few messages costs only those."""

    def __init__(self) -> None:
        self.pairing = ToolPairing()
        self._empty: list[int] = []
        self._opens_with_returns = False
        """Whether the first message fed holds tool results (checked once: it stays the first)."""

    @property
    def length(self) -> int:
        return self.pairing.length

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        """Feed `messages`, the continuation of what was fed before."""
        for message in messages:
            if not self.pairing.length:
                self._opens_with_returns = answers_calls(message)
            if not message.parts:
                self._empty.append(self.pairing.length)
            self.pairing.add(message)

    def violations(self, messages: Sequence[ModelMessage]) -> list[Violation]:
        """Every structural violation of `messages`, which must be exactly what was fed."""
        opens_with_returns = self._opens_with_returns
        found = _end_violations(messages, opens_with_returns)
        found.extend(_pairing_violations(self.pairing, starts_with_tool_return=opens_with_returns))
        if self._empty:
            found.extend(
                Violation('empty_message', i, f'{type(messages[i]).__name__} has no parts', 'warning')
                for i in self._empty
            )
        return found


def _end_violations(messages: Sequence[ModelMessage], opens_with_returns: bool) -> list[Violation]:
    found: list[Violation] = []
    if not isinstance(messages[-1], ModelRequest):
        reason = 'the last message must be the current ModelRequest'
        found.append(Violation('not_ending_with_request', len(messages) - 1, reason))
    if isinstance(messages[0], ModelResponse) and not is_compaction_response(messages[0]):
        # a provider's compaction response may open the history: its adapter sends nothing before it
        found.append(Violation('starts_with_response', 0, 'the history opens with a model response'))
    elif opens_with_returns:
        reason = 'the history opens with tool returns whose calls are gone'
        found.append(Violation('starts_with_tool_return', 0, reason))
    return found


def _pairing_violations(pairing: ToolPairing, *, starts_with_tool_return: bool) -> list[Violation]:
    if not (
        pairing.open_calls
        or pairing.shadowed
        or pairing.orphans
        or pairing.repeated_calls
        or pairing.repeated_returns
    ):
        return []  # every call answered once (most histories, on every request)
    live = pairing.last_response
    dangling = pairing.dangling()  # the live (newest) response's calls sort last
    rows: list[tuple[ViolationCode, list[tuple[int, str]], str, Literal['error', 'warning']]] = [
        (
            'duplicate_tool_call_id',
            pairing.repeated_calls,
            'tool_call_id {!r} appears twice in one response',
            'warning',
        ),
        (
            'dangling_tool_call',
            [d for d in dangling if d[0] != live],
            'tool call {!r} has no return in any later request',
            'error',
        ),
        (
            'dangling_tool_call',
            [d for d in dangling if d[0] == live],
            'tool call {!r} of the newest response has no return yet (a deferred result may come)',
            'warning',
        ),
        # an orphan in the first message is reported as the history's opening
        (
            'orphan_tool_return',
            [o for o in pairing.orphans if o[0] or not starts_with_tool_return],
            'tool return {!r} answers no call in an earlier response',
            'error',
        ),
        ('duplicate_tool_return', pairing.repeated_returns, 'tool call {!r} was already answered', 'warning'),
    ]
    return [
        Violation(code, i, text.format(c), severity, c)
        for code, found, text, severity in rows
        for i, c in found
    ]


def _preservation_violations(
    messages: Sequence[ModelMessage], original: Sequence[ModelMessage]
) -> list[Violation]:
    found: list[Violation] = []
    if original and messages and not _same_request(messages[-1], original[-1]):
        found.append(
            Violation('current_request_changed', len(messages) - 1, 'the current request was altered')
        )
    kept_system = {p.content for p in system_parts(messages)}
    found.extend(
        Violation('system_prompt_lost', -1, f'system prompt {part.content[:60]!r} was dropped')
        for part in system_parts(original)
        if part.content not in kept_system
    )
    original_parts = [m.parts for m in original if isinstance(m, ModelResponse)]
    reason = 'a response with signed thinking was changed, not kept whole'
    found.extend(
        Violation('signed_thinking_altered', index, reason)
        for index, message in enumerate(messages)
        if isinstance(message, ModelResponse)
        and any(isinstance(p, ThinkingPart) and p.signature for p in message.parts)
        and message.parts not in original_parts
    )
    return found


def _same_request(kept: ModelMessage, original: ModelMessage) -> bool:
    """Whether `kept` is `original` unchanged in meaning: equal, or with some of its content reduced by this
    package (a tool return marked with the id of its stored original, a user's text or file replaced by a
    note of ours): part for part, the same kinds and the same tool calls answered."""
    if kept == original:
        return True
    if type(kept) is not type(original) or len(kept.parts) != len(original.parts):
        return False
    return all(_same_part(a, b) for a, b in zip(kept.parts, original.parts, strict=True))


def _same_part(kept: Any, original: Any) -> bool:
    if kept == original:
        return True
    if type(kept) is not type(original):
        return False
    if isinstance(kept, ToolReturnPart):
        marked = 'artifact_id' in own_metadata(getattr(kept, 'metadata', None))
        return marked and (kept.tool_call_id, kept.tool_name) == (original.tool_call_id, original.tool_name)
    if isinstance(kept, UserPromptPart):
        content = kept.content
        texts = [content] if isinstance(content, str) else [c for c in content if isinstance(c, str)]
        return any(sealed_kind(text) is not None for text in texts)
    return False


def assert_valid_history(
    messages: Sequence[ModelMessage],
    *,
    original: Sequence[ModelMessage] | None = None,
    budget: int | None = None,
    count_tokens: Callable[[Sequence[ModelMessage]], int] | None = None,
    allow_warnings: bool = True,
    finished: bool | None = None,
) -> None:
    """Raise `HistoryValidationError` listing every violation; warnings pass unless `allow_warnings=False`.
    A finished run's history (`result.all_messages()`) is valid as it is; `finished` is as in
    `validate_history` (True: a run that ended with deferred tool calls; False: a request must end it).
    """
    violations = validate_history(
        messages, original=original, budget=budget, count_tokens=count_tokens, finished=finished
    )
    bad = violations if not allow_warnings else [v for v in violations if v.severity == 'error']
    if bad:
        raise HistoryValidationError(bad)
