"""When a background summary starts (`_lead`): `background_start` is the earliest point; the start waits until
the run's growth says the summary is needed within the requests a summary takes (learned, never timed)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.usage import RunUsage

from pydantic_ai_history.stages.compactor._background import BackgroundJob
from pydantic_ai_history.stages.compactor._lead import (
    PACES_KEPT,
    UNMEASURED_REQUESTS,
    RunLengths,
    SummarizerPace,
    plan_lead,
    step_growth,
)

TRIGGER, BUDGET = 24_000, 30_000


def test_before_the_pace_is_known_the_summary_aims_at_the_trigger() -> None:
    far = plan_lead(tokens=18_000, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=None)
    assert not far.start
    assert (far.needed_tokens, far.requests_left) == (TRIGGER, 7)
    near = plan_lead(tokens=21_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=None)
    assert near.start
    assert near.reason == 'lead'
    assert near.requests_left == UNMEASURED_REQUESTS


def test_a_known_pace_aims_at_where_a_request_would_wait() -> None:
    # 8 requests a summary: the requests between the trigger and the budget go out while it is made
    waiting = plan_lead(tokens=20_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=8)
    assert not waiting.start
    assert waiting.requests_left == 10
    due = plan_lead(tokens=22_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=8)
    assert due.start
    assert (due.reason, due.requests_left, due.expected_requests) == ('lead', 8, 8)


def test_a_cut_that_stops_fitting_earlier_brings_the_start_forward() -> None:
    assert not plan_lead(tokens=20_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=6).start
    lead = plan_lead(tokens=20_500, step=1_000, trigger=TRIGGER, needed=26_000, expected=6)
    assert lead.start
    assert lead.requests_left == 6


def test_a_fast_summarizer_still_starts_before_the_trigger() -> None:
    """With no summary under way, the event that crosses the trigger would summarize in the request path."""
    before = plan_lead(tokens=22_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=1)
    assert not before.start
    last = plan_lead(tokens=23_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=1)
    assert last.start
    assert last.reason == 'trigger'


def test_the_trigger_s_crossing_is_judged_by_the_request_s_own_estimate() -> None:
    """The event counts the history afresh (lower, here, by 600 tokens): judged by that count, the request
    that crosses the trigger would come with no summary under way."""
    by_event = plan_lead(tokens=22_900, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=1)
    assert not by_event.start
    lead = plan_lead(
        tokens=22_900, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=1, request_tokens=23_500
    )
    assert lead.start
    assert lead.reason == 'trigger'
    assert lead.requests_left == 8, "the lead to `needed` stays in the event's count"


def test_unmeasured_growth_starts_at_background_start() -> None:
    lead = plan_lead(tokens=15_000, step=0, trigger=TRIGGER, needed=BUDGET, expected=8)
    assert lead.start
    assert lead.reason == 'unmeasured'


def test_growth_is_the_largest_of_the_newest_steps() -> None:
    request = ModelRequest(parts=[UserPromptPart('go')])
    response = ModelResponse(parts=[TextPart('step')])
    messages = [request, response, request, response, request, response, request]
    assert step_growth(messages, [100, 10, 500, 10, 20, 10, 30]) == 510
    assert step_growth(messages[:1], [100]) == 0, 'no response yet: nothing to measure'
    # a summary before the first kept response is not growth
    assert step_growth(messages, [9_000, 10, 50, 10, 20, 10, 30]) == 60


def test_the_pace_is_the_slowest_recent_summary() -> None:
    pace = SummarizerPace()
    assert pace.expected is None
    pace.exceeded(UNMEASURED_REQUESTS - 1)
    assert pace.expected is None, 'thrown away sooner than a summary is first expected to take: says nothing'
    pace.exceeded(UNMEASURED_REQUESTS + 2)
    assert pace.expected == UNMEASURED_REQUESTS + 3, 'unfinished after more: a pace is learned from it'
    pace.observe(3)
    pace.observe(6)
    assert pace.expected == 6
    pace.exceeded(2)
    assert pace.expected == 6, 'a lower bound under the estimate changes nothing'
    pace.exceeded(7)
    assert pace.expected == 8
    for _ in range(PACES_KEPT):
        pace.observe(2)
    assert pace.expected == 2, 'the oldest are forgotten'


def test_a_run_expected_to_end_before_its_summary_is_used_starts_none() -> None:
    # due at the trigger, three requests ahead; the recent runs made 2 requests, this one 1: one left
    short = plan_lead(tokens=21_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=None, run_left=1)
    assert not short.start
    assert short.run_ends_first
    assert short.run_requests_left == 1
    # the runs last long enough for the summary to be made and its event to come
    long = plan_lead(tokens=21_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=None, run_left=5)
    assert long.start
    assert not long.run_ends_first
    # a run that has made more requests than any recent one is not held back (no run length known)
    unknown = plan_lead(tokens=21_500, step=1_000, trigger=TRIGGER, needed=BUDGET, expected=None)
    assert unknown.start


def test_a_run_is_expected_to_last_as_the_shortest_recent_run_that_got_as_far() -> None:
    lengths = RunLengths()
    assert lengths.fewest_left(1) is None
    for requests in (2, 9, 12, 3):
        lengths.observe(requests)
    assert lengths.fewest_left(1) == 1  # a run of 2 requests ended one request after its first
    assert lengths.fewest_left(4) == 5  # of those that made 4 (9 and 12), the run of 9 ended 5 later
    assert lengths.fewest_left(13) is None, 'longer than any recent run: not known'
    for _ in range(PACES_KEPT):
        lengths.observe(20)
    assert lengths.fewest_left(4) == 16, 'only the recent runs count'


@pytest.mark.anyio
async def test_a_held_summary_s_room_is_what_the_messages_added_since_its_snapshot_count() -> None:
    """The room is measured on the messages, so the growth is too: the history's total also moves with the
    provider's usage it anchors on (a request that adds 300 tokens may move the total by 250 or by 400)."""

    async def summary() -> str:
        return 'summary'

    snapshot: list[ModelMessage] = [ModelRequest([UserPromptPart('task')]), ModelResponse([TextPart('a')])]
    job = BackgroundJob[str].start(
        summary(), run_id='run', snapshot=snapshot, cut_at=1, key='k', evicted=1, usage=RunUsage(), room=600
    )
    await job.result()
    assert job.usable_after([5_000, 3_000, 300, 300])
    assert not job.usable_after([5_000, 3_000, 300, 301])
    assert not job.usable_after([10, 10, 601]), 'the snapshot counted anew changes nothing'
    unbounded = dataclasses.replace(job, room=None)
    assert unbounded.usable_after([0, 0, 10**9])
