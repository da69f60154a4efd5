"""`WarningKind` lists every warning code the package emits, and runs emit nothing else."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from _history import user
from pydantic_ai_history import (
    ContextPolicy,
    HistoryEvent,
    HistoryWarning,
    WarningKind,
    create_history_processor,
)

pytestmark = pytest.mark.anyio

PACKAGE = Path(__file__).resolve().parent.parent / 'src' / 'pydantic_ai_history'
_EMITTED = re.compile(r"(?:\.warn\(|\.lost\(\s*'[a-z]+',|code=)\s*'([a-z_]+)'")
"""A code as the package passes it: `context.warn('code', ...)`, `context.lost('stage', 'code', ...)`,
`HistoryWarning(code='code', ...)`."""


def _emitted_codes() -> set[str]:
    codes: set[str] = set()
    for path in PACKAGE.rglob('*.py'):
        codes.update(_EMITTED.findall(path.read_text(encoding='utf-8')))
    return codes


def test_warning_kind_is_exactly_what_the_package_emits() -> None:
    emitted = _emitted_codes()
    assert len(emitted) >= 10, 'the source scan found too few codes: the pattern is broken'
    assert emitted == set(get_args(WarningKind))


def test_every_warning_kind_is_documented() -> None:
    from pydantic_ai_history import events

    source = Path(events.__file__).read_text(encoding='utf-8')
    doc = source.split('WarningKind = Literal[', 1)[1].split('"""', 2)[1]
    for code in get_args(WarningKind):
        assert f'- `{code}`' in doc, code


async def test_runs_emit_only_listed_codes() -> None:
    events: list[HistoryEvent] = []
    processor = create_history_processor(on_event=events.append)
    await processor.process([])  # empty_history
    await processor.process([user('hello')], model='acme:unknown-model')  # context_window_fallback
    tiny = create_history_processor(
        policy=ContextPolicy(context_window=50, budget_tokens=5), on_event=events.append
    )
    await tiny.process([user('a long request ' * 50)], model='openai:gpt-4o')  # over_budget
    codes = {e.code for e in events if isinstance(e, HistoryWarning)}
    assert {'empty_history', 'context_window_fallback', 'over_budget'} <= codes
    assert codes <= set(get_args(WarningKind))
