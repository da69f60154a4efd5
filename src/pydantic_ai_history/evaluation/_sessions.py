"""The sessions an evaluation compacts, and where they are cut: loading, and the pure cut arithmetic."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest

from ._probe_files import AnswerProbe, ProbeFileError, is_probe_file, load_probes, probes_path

FIXTURES_ENV = 'PYDANTIC_AI_HISTORY_EVAL_SESSIONS'
"""A folder of saved histories to use as the built-in set instead of the five that ship with the package (for
example the larger set in the project's `../shared/fixtures/conversations`)."""
BUILTIN_SESSIONS = Path(__file__).resolve().parent / 'sessions'
"""The five real conversations that ship with the package (about 230 KB; sources and licences in its
README)."""


class SessionError(ValueError):
    """A history that cannot be evaluated (unreadable, not a history, nothing to compact); the message says
    which and why."""


@dataclass(frozen=True, kw_only=True)
class EvalSession:
    """One saved conversation, ready to be compacted."""

    name: str
    """The file's stem, or the name the caller gave."""
    messages: list[ModelMessage]
    """The history up to its last request: the request the agent would answer next."""
    dropped_responses: int = 0
    """Trailing responses left out so the history ends with a request (saved agent runs often end with a
    tool call that was never answered)."""
    probes: tuple[AnswerProbe, ...] = ()
    """Hand-written probes whose answers are in the part the evaluation compacts away (its probe file's)."""


def session_from_messages(
    name: str, messages: Sequence[ModelMessage], probes: Sequence[AnswerProbe] = ()
) -> EvalSession:
    """`messages` as a session, cut after its last `ModelRequest`, with its hand-written `probes`."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), default=-1)
    if last < 2:
        raise SessionError(
            f'{name}: too short to compact (it needs at least three messages ending in a request)'
        )
    return EvalSession(
        name=name,
        messages=list(messages[: last + 1]),
        dropped_responses=len(messages) - last - 1,
        probes=tuple(probes),
    )


def load_session(path: str | os.PathLike[str]) -> EvalSession:
    """A session from a file saved with `ModelMessagesTypeAdapter.dump_json`, with the probes of its probe
    file (`<name>.probes.json` beside it) when there is one."""
    from pydantic import ValidationError
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise SessionError(f'{file}: cannot read ({exc.strerror or exc})') from exc
    try:
        messages = ModelMessagesTypeAdapter.validate_json(data)
    except ValidationError as exc:
        raise SessionError(f'{file}: not a pydantic-ai message history ({exc.errors()[0]["msg"]})') from exc
    probes_file = probes_path(file)
    try:
        probes = load_probes(probes_file) if probes_file.exists() else ()
    except ProbeFileError as exc:
        raise SessionError(str(exc)) from exc
    return session_from_messages(file.stem, messages, probes)


def builtin_session_paths(folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """The saved histories of the built-in set: `folder`, else `$PYDANTIC_AI_HISTORY_EVAL_SESSIONS`, else the
    five that ship with the package (`BUILTIN_SESSIONS`). Probe files (`*.probes.json`) are not sessions."""
    chosen = folder if folder is not None else os.environ.get(FIXTURES_ENV)
    found = Path(chosen).glob('*.json') if chosen else BUILTIN_SESSIONS.glob('*.json')
    return sorted(path for path in found if not is_probe_file(path))


def compaction_target(
    total_tokens: int, keep_fraction: float, summary_reserve: int, trail_share: float = 0.0
) -> int:
    """The compactor's target that keeps about `keep_fraction` of a `total_tokens` history verbatim: that
    share, plus what the summary itself is allowed, plus the share of the target its trail may take."""
    return round((max(1, round(total_tokens * keep_fraction)) + summary_reserve) / (1 - trail_share))


def kept_head(original: Sequence[ModelMessage], compacted: Sequence[ModelMessage]) -> int:
    """How many leading messages of `original` `compacted` kept as they were (the same objects)."""
    same = itertools.takewhile(lambda pair: pair[0] is pair[1], zip(original, compacted, strict=False))
    return sum(1 for _ in same)


def tail_start(original: Sequence[ModelMessage], compacted: Sequence[ModelMessage]) -> int | None:
    """The index in `original` where the verbatim tail `compacted` ends with begins (the same objects); None
    when nothing was compacted."""
    if len(compacted) == len(original) == kept_head(original, compacted):
        return None
    return len(original) - kept_head(original[::-1], compacted[::-1])
