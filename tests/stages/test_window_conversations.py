"""The window on every real conversation in the shared fixtures, at several small budgets.

Every output must be valid, be the preserved head + our note + a contiguous suffix of the input (the same
message objects), fit whenever head + current request fit, and be the *longest* such suffix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, SystemPromptPart

from _history import conversations, is_suffix_by_identity, load_conversation
from pydantic_ai_history import (
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SlidingWindow,
    WindowApplied,
    assert_valid_history,
)
from pydantic_ai_history.messages._marks import SEAL_TOKENS, marker_kind
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages.window import select_window
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio

FRACTIONS = (0.02, 0.1, 0.25, 0.5, 0.8)
"""Budgets as fractions of each conversation's size: from 'head and current request barely fit' to mild."""
NOTE_SLACK = 40 + SEAL_TOKENS  # the window reserves this much for its note (sealed); it costs a little less


@pytest.fixture(scope='module')
def counter() -> TokenCounter:
    return TokenCounter('gpt-4o')


def test_every_conversation_loads_as_processor_input(fixtures_dir: Path):
    paths = conversations(fixtures_dir)
    assert len(paths) >= 10
    for path in paths:
        assert_valid_history(load_conversation(path))


@pytest.mark.parametrize('keep_first', [True, False])
@pytest.mark.parametrize('fraction', FRACTIONS)
async def test_window_on_real_conversations(
    fixtures_dir: Path, counter: TokenCounter, fraction: float, keep_first: bool
):
    checked = 0
    for path in conversations(fixtures_dir):
        history = load_conversation(path)
        total = counter.count_messages(history)
        budget = max(int(total * fraction), 50)
        events: list[HistoryEvent] = []
        processor = HistoryProcessor(
            stages=[SlidingWindow()],
            model='gpt-4o',
            policy=ContextPolicy(budget_tokens=budget),
            keep_first_user_message=keep_first,
            on_history_event=events.append,
        )
        out = await processor.process(history)

        assert_valid_history(out, original=history)
        units = split_units(history)
        head = select_window(
            history,
            units,
            [counter.count_message(m) for m in history],
            budget,
            keep_first_user_message=keep_first,
        ).head
        assert all(a is b for a, b in zip(out[:head], history[:head], strict=False)), path.name
        rest = out[head:]
        if total <= budget:
            assert all(a is b for a, b in zip(out, history, strict=False))
            assert len(out) == len(history)
            continue
        checked += 1
        assert [e for e in events if isinstance(e, WindowApplied)], path.name
        assert marker_kind(rest[0]) == 'window', path.name
        suffix = rest[1:]
        cut = out[-1] is not history[-1]  # the current request alone did not fit: its content was cut
        kept_whole = suffix[:-1] if cut else suffix
        whole = history[:-1] if cut else history
        assert is_suffix_by_identity(kept_whole, whole), f'{path.name}: not a contiguous suffix'
        assert len(suffix) >= len(units[-1]), f'{path.name}: the current request unit was dropped'

        used = counter.count_messages(out)
        if cut:
            # cut only when nothing else could make room, and then to what the budget leaves it
            assert used <= budget or any(
                isinstance(e, HistoryWarning) and e.code == 'over_budget' for e in events
            ), path.name
            continue
        # what must stay whatever it costs: the head, the current request, and every system prompt part
        mandatory = counter.count_messages([*history[:head], *history[units[-1].start :]]) + sum(
            counter.count_part(p)
            for m in history[head : units[-1].start]
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, SystemPromptPart)
        )
        if mandatory + NOTE_SLACK <= budget:
            assert used <= budget, f'{path.name}: {used} > {budget}'
        else:
            assert any(isinstance(e, HistoryWarning) and e.code == 'over_budget' for e in events), path.name

        # the longest suffix: the unit just before it (if not head) would not have fitted
        first_kept = len(history) - len(suffix)
        previous = [u for u in units if u.end == first_kept and u.start >= head]
        if previous:
            extra = counter.count_messages(history[previous[0].start : previous[0].end])
            assert used + extra > budget - NOTE_SLACK, f'{path.name}: stopped early'
    assert checked > 0
