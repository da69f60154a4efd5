"""The processor's guard: what was already wrong with a history, so that no stage may add to it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage

from ..context._offload import LONG_HISTORY
from ..messages.validate import PAIRING_CODES, StructureCheck, Violation

_HISTORY_CODES = frozenset(
    {'empty', 'starts_with_response', 'starts_with_tool_return', 'not_ending_with_request'}
)
"""Violations about the history's ends: where they are is the history itself, whichever message is there."""

_Key = tuple[str, object]


class Validity:
    """What the next stage receives, and what was already wrong with it: no stage may add to that. A
    violation is the same when its code and place are: for pairing the tool call id (however messages move),
    for the ends the history, otherwise the message by identity."""

    def __init__(
        self, messages: list[ModelMessage], structure: StructureCheck, violations: list[Violation]
    ) -> None:
        self.messages = messages
        self.structure = structure
        self.violations = violations
        self._keys: Counter[_Key] | None = None

    def copy(self) -> Validity:
        """The same history and check, as another object (`accept` changes this one)."""
        return Validity(self.messages, self.structure, self.violations)

    def added(self, violations: Sequence[Violation], result: Sequence[ModelMessage]) -> list[Violation]:
        """The violations of `result` (a stage's output) that its input did not have."""
        if self._keys is None:
            self._keys = Counter(_key(v, self.messages, None) for v in self.violations)
        places = {id(m): i for i, m in enumerate(self.messages)}
        remaining = Counter(self._keys)
        added: list[Violation] = []
        for violation in violations:
            key = _key(violation, result, places)
            if remaining[key] > 0:
                remaining[key] -= 1
            else:
                added.append(violation)
        return added

    def accept(
        self, messages: list[ModelMessage], structure: StructureCheck, violations: list[Violation]
    ) -> None:
        """A stage's output becomes the next stage's input."""
        self.messages, self.structure, self.violations, self._keys = messages, structure, violations, None


def _key(violation: Violation, messages: Sequence[ModelMessage], places: dict[int, int] | None) -> _Key:
    if violation.code in PAIRING_CODES:
        return violation.code, violation.tool_call_id
    if violation.code in _HISTORY_CODES or violation.index < 0:
        return violation.code, None
    if places is None:
        return violation.code, violation.index
    return violation.code, places.get(id(messages[violation.index]), ('new', violation.index))


class InputCheck:
    """Validates each input history incrementally: an input that extends the previous output continues its
    pairing state with only the new messages (cheap on long histories); any other is checked from scratch."""

    def __init__(self) -> None:
        self._last: list[ModelMessage] = []
        self._checked: list[ModelMessage] | None = None
        self._structure: StructureCheck | None = None
        """The check of `_last`, made by the first `check` (a run's first request checks from scratch)."""
        self._reported: frozenset[str] = frozenset()

    def unreported(self, validity: Validity) -> list[Violation]:
        """The errors of `validity` not reported before: a broken old message warns once, not on every
        request."""
        if not validity.violations and not self._reported:  # a valid history, as on almost every request
            return []
        errors = [v for v in validity.violations if v.severity == 'error']
        new = [v for v in errors if str(v) not in self._reported]
        self._reported = frozenset(str(v) for v in errors)
        return new

    def long(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether checking `messages` may read more than `LONG_HISTORY` of them (all, unless they extend the
        last input: only the new ones)."""
        return len(messages) - len(self._last) > LONG_HISTORY

    def check(self, messages: list[ModelMessage]) -> Validity:
        """The validity of `messages`, from the state of the last history seen when it is a prefix."""
        last = self._last
        known = len(last)
        extends = False
        structure = self._structure
        if 0 < known <= len(messages) and structure is not None and structure.length == known:
            last.extend(messages[known:])
            # One comparison in C: identical messages never reach `__eq__`, and equal ones pair alike.
            extends = last == messages
        if structure is None or not extends:
            structure = self._structure = StructureCheck()
            known = 0
        structure.extend(messages[known:])
        # `_last` now copies `messages` when they extend it; until `adopt`, no input extends anything
        self._checked, self._last = (messages, last) if extends else (None, [])
        return Validity(messages, structure, structure.violations(messages))

    def adopt(self, validity: Validity) -> None:
        """Continue from the history the stages returned: the next input extends it."""
        if validity.messages is not self._checked or not self._last:
            # our own copy: the caller may change the list it gets back
            self._last = list(validity.messages)
        self._checked = None
        self._structure = validity.structure
