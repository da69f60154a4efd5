"""Hand-written probes with known answers, kept beside a session as `<session>.probes.json`: the format, its
validation, and how an answer is scored against them (normalised containment; no judge)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import ConfigDict, StringConstraints, TypeAdapter, ValidationError

from ._text import contains, normalize_answer

PROBES_SUFFIX = '.probes.json'
"""A session's probe file is named after it: `task9.json` -> `task9.probes.json`."""

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ProbeFileError(ValueError):
    """A probe file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True, kw_only=True)
class AnswerProbe:
    """One question about a session whose answer is in the part the evaluation compacts away."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra='forbid')

    question: _Text
    """What the model under test is asked, as a new user turn after the history."""
    answer: _Text
    """The expected answer, short and checkable: an id, an amount, a path, a word."""
    accept: tuple[_Text, ...] = ()
    """Other spellings that also count as right (`MasterCard` / `Mastercard` need none: case is ignored)."""
    note: str = field(default='', compare=False)
    """Where in the session the answer comes from (for the reader of the file; never shown to a model)."""

    @property
    def answers(self) -> tuple[str, ...]:
        """Every accepted answer, the expected one first."""
        return (self.answer, *self.accept)


_PROBES: TypeAdapter[list[AnswerProbe]] = TypeAdapter(list[AnswerProbe])


def probes_path(session: str | os.PathLike[str]) -> Path:
    """Where the probes of the session saved at `session` are kept."""
    path = Path(session)
    return path.with_name(path.name.removesuffix('.json') + PROBES_SUFFIX)


def is_probe_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a probe file (read beside its session, never a session itself)."""
    return Path(path).name.endswith(PROBES_SUFFIX)


def load_probes(path: str | os.PathLike[str]) -> tuple[AnswerProbe, ...]:
    """The probes of a probe file: a JSON list of `{"question", "answer", "accept", "note"}` objects
    (`accept` and `note` optional). A `ProbeFileError` naming the file and the entry when it is not."""
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ProbeFileError(f'{file}: cannot read ({exc.strerror or exc})') from exc
    try:
        probes = _PROBES.validate_json(data)
    except ValidationError as exc:
        raise ProbeFileError(f'{file}: {_errors(exc)}') from exc
    for index, probe in enumerate(probes, 1):
        given_away = [a for a in probe.answers if contains(normalize_answer(probe.question), _key(a))]
        if given_away:
            raise ProbeFileError(
                f'{file}: entry {index}: the question gives its answer away ({given_away[0]!r})'
            )
        if not all(_key(a) for a in probe.answers):
            raise ProbeFileError(f'{file}: entry {index}: an answer is empty once normalised')
    if not probes:
        raise ProbeFileError(f'{file}: holds no probes (a JSON list of {{"question", "answer"}} objects)')
    return tuple(probes)


def _errors(exc: ValidationError) -> str:
    """The first few validation errors, each with the entry (1-based) and field it is about."""
    errors = exc.errors()
    if errors[0]['type'] == 'json_invalid':
        return f'not valid JSON ({errors[0]["msg"]})'
    if not errors[0]['loc']:
        return 'must be a JSON list of probes ({"question", "answer", "accept", "note"} objects)'
    return '; '.join(_error(error['loc'], error['msg']) for error in errors[:3])


def _error(loc: tuple[int | str, ...], message: str) -> str:
    where = f'entry {loc[0] + 1}' if isinstance(loc[0], int) else str(loc[0])
    fields = '.'.join(str(part) for part in loc[1:])
    return f'{where}: {fields + ": " if fields else ""}{message}'


def _key(answer: str) -> str:
    return normalize_answer(answer)


def is_right(probe: AnswerProbe, reply: str) -> bool:
    """Whether `reply` holds the expected answer or an accepted one (normalised, as a whole token run)."""
    text = normalize_answer(reply)
    return any(contains(text, _key(answer)) for answer in probe.answers)
