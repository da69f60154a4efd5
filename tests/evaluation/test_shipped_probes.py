"""The probes that ship with the built-in sessions: at least five each, every answer in the part the
evaluation compacts away and nowhere in what it keeps verbatim, at the cut the evaluation itself makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pydantic_ai_history import TokenCounter
from pydantic_ai_history.evaluation import (
    EvalSettings,
    builtin_session_paths,
    context_text,
    is_right,
    load_session,
    probes_path,
    session_cut,
)
from pydantic_ai_history.evaluation._sessions import BUILTIN_SESSIONS
from pydantic_ai_history.evaluation._strategies import COUNTING_MODEL

pytestmark = pytest.mark.anyio

SHIPPED = builtin_session_paths(BUILTIN_SESSIONS)


def test_every_builtin_session_has_a_probe_file_of_five_or_more() -> None:
    assert len(SHIPPED) == 5
    for path in SHIPPED:
        assert probes_path(path).exists(), path.name
        assert len(load_session(path).probes) >= 5, path.name


@pytest.mark.parametrize('path', SHIPPED, ids=lambda p: Path(p).stem[:40])
async def test_each_answer_is_only_in_the_compacted_part(path: Path) -> None:
    session = load_session(path)
    counter = TokenCounter(COUNTING_MODEL)
    split = await session_cut(session.messages, EvalSettings().keep_fraction, counter)
    assert split.cut is not None
    messages, cut = session.messages, split.cut
    evicted = context_text(messages[cut.head : cut.start], counter)
    kept = context_text([*messages[: cut.head], *messages[cut.start :]], counter)
    for probe in session.probes:
        assert is_right(probe, evicted), f'{probe.question!r}: {probe.answer!r} is not in the compacted part'
        assert not is_right(probe, kept), f'{probe.question!r}: an answer is also in the part kept verbatim'
