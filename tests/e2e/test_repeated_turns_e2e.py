"""Runs continued on a saved history that was compacted: each request carries exactly one summary.

A new run on a saved history has pydantic-ai merge consecutive requests, so the summary request that follows
the kept first user turn arrives fused into it. The next compaction must find its own summary there and
update it, not keep it as foreign content beside a new one (two summaries, the older one stale).
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import Behaviour, check_requests, fake_model, filler, full_processor, make_agent, strict
from pydantic_ai.messages import ModelMessage

from pydantic_ai_history import CompactionResult, HistoryEvent
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.messages._marks import marker_kind, part_kinds, separate_own_parts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def _summary_parts(messages: list[ModelMessage]) -> int:
    return sum(kind == 'summary' for message in messages for kind in part_kinds(message))


def _summaries(messages: list[ModelMessage]) -> int:
    """Summary requests, counted once each (a request of ours has several summary-kind parts)."""
    return sum(marker_kind(m) == 'summary' for m in separate_own_parts(messages))


async def test_each_turn_carries_one_summary() -> None:
    events: list[HistoryEvent] = []
    summarizer = Behaviour('echo')
    processor = full_processor(
        context_window=16_000,
        max_tokens=8_000,
        target_tokens=3_000,
        summarizer=fake_model(summarizer),
        on_event=events.append,
        stubs=False,  # summaries are the point: no cheap tier of stubs before them
    )
    provider = strict(5, 16_000)
    agent = make_agent(provider.model(), processor)

    @agent.tool_plain
    def fetch(n: int) -> str:
        """Fetch page n."""
        return f'page {n}\n' + filler(6_000, seed=n)

    history: list[Any] = []
    for turn in range(3):
        result = await agent.run(f'turn {turn}: summarize the report', message_history=history)
        history = result.all_messages()
        compactions = [e for e in events if isinstance(e, CompactionResult)]
        assert len(compactions) > turn, 'every turn must compact, or the fused shape is not exercised'
        with processor.marks():  # a fused summary part is known by its seal (1.x), keyed by the store
            assert _summaries(history) == 1, f'turn {turn}: {_summaries(history)} summaries in the history'
    check_requests(provider)
    with processor.marks():
        for record in provider.requests[-3:]:
            assert _summaries(record.history) <= 1
        fused = [
            m for r in provider.requests for m in r.history if _summary_parts([m]) and marker_kind(m) is None
        ]
    if HAS_CAPABILITIES:  # pydantic-ai 1.0 sends the saved requests as they are: nothing is fused there
        assert fused, (
            'no request arrived with the summary fused into a user turn: the shape was not exercised'
        )
    assert summarizer.calls >= 3


def test_separate_own_parts_keeps_foreign_requests_and_identity() -> None:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    plain = [ModelRequest(parts=[UserPromptPart(content='hello')])]
    assert separate_own_parts(plain) is plain
