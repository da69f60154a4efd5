"""When a background summary starts: `CompactionSettings.background_start` is only the earliest point. The
start waits as long as the run's own growth and the summarizer's observed pace allow, so a run far from its
trigger pays for no summary it may never use, and the summary is still ready before a request has to wait.

Nor does one start for a run expected to end before it is used (`RunLengths`: the runs that ended say how
long a run that got as far lasts), since a run's end throws its summary away, paid for.

Counted in requests, never timed: how many of a run's requests a summary took until it was ready measures the
summarizer against the pace of the runs it serves, with no clock (background summaries never run in durable
workflow code, and a count is the same however slow the machine or the provider is). Pure decisions: the
compactor (`_ahead`) measures, decides with these and says why in `BackgroundSummaryStarted`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelResponse

from ...events import BackgroundStartReason

STEPS_MEASURED = 4
"""How many of the run's newest steps its growth is measured on (the largest of them counts)."""
PACES_KEPT = 8
"""How many summaries' paces `SummarizerPace` keeps (the slowest of them is expected)."""
UNMEASURED_REQUESTS = 3
"""The requests a summary is expected to take before any was seen: aimed at the trigger then, not at the
budget, so the stretch between the two absorbs a slower summarizer."""


def step_growth(messages: Sequence[ModelMessage], per_message: Sequence[int]) -> int:
    """The tokens one step of the run adds: the most one of its newest `STEPS_MEASURED` steps (a model
    response and the request after it) added; 0 before the first response. A summary and the question it moved
    come before the first response it keeps, so they never count as growth."""
    starts = [i for i, message in enumerate(messages) if isinstance(message, ModelResponse)][-STEPS_MEASURED:]
    ends = [*starts[1:], len(messages)] if starts else []
    return max((sum(per_message[start:end]) for start, end in zip(starts, ends, strict=True)), default=0)


class SummarizerPace:
    """How many of a run's requests a background summary takes until it is ready, learned from the last
    `PACES_KEPT` made with a summarizer call (a cache hit is ready at once, saying nothing of the summarizer):
    the slowest of them is expected, so an estimate errs towards starting early."""

    def __init__(self) -> None:
        self._seen: deque[int] = deque(maxlen=PACES_KEPT)

    @property
    def expected(self) -> int | None:
        """The requests the next summary is expected to take; None before any was seen."""
        return max(self._seen) if self._seen else None

    def observe(self, requests: int) -> None:
        """A summary was ready at the `requests`-th request of its run after it started."""
        self._seen.append(max(requests, 1))

    def exceeded(self, requests: int) -> None:
        """A summary thrown away unfinished after `requests` requests took longer than that: counted when it
        says more than the estimate (`UNMEASURED_REQUESTS` before any summary was seen: a pace learned only
        from summaries seen ready would never be learned where every one is thrown away unfinished)."""
        expected = self.expected
        if requests >= (expected if expected is not None else UNMEASURED_REQUESTS):
            self.observe(requests + 1)


class RunLengths:
    """How many requests the last `PACES_KEPT` runs made (those whose history the compactor planned for): a
    run that ends before its background summary is used pays for it (a chat reloaded each turn makes one to
    three requests a run). A run is expected to last as the shortest of those that got as far did."""

    def __init__(self) -> None:
        self._seen: deque[int] = deque(maxlen=PACES_KEPT)

    def fewest_left(self, made: int) -> int | None:
        """The fewest requests a recent run that made at least `made` made after them; None when none got
        that far (or none ended yet)."""
        return min((length - made for length in self._seen if length >= made), default=None)

    def observe(self, requests: int) -> None:
        """A run ended after `requests` requests."""
        self._seen.append(requests)


@dataclass(frozen=True, kw_only=True)
class Lead:
    """Whether a background summary starts at this request (the history past `background_start`), and why."""

    start: bool
    """Whether it starts now."""
    reason: BackgroundStartReason
    """Why it starts (`BackgroundSummaryStarted.reason`), or would start when it does not yet."""
    tokens_per_step: int
    """The run's growth per step (`step_growth`); 0 when unmeasured."""
    expected_requests: int | None
    """The requests a summary is expected to take (`SummarizerPace.expected`); None before any was seen."""
    needed_tokens: int
    """The history size past which a request would wait for the summary (the trigger while the pace is
    unknown)."""
    requests_left: int
    """Requests until the first one past `needed_tokens`, at `tokens_per_step`."""
    run_requests_left: int | None = None
    """The requests the run is expected to make still (`RunLengths.fewest_left`); None when unknown."""
    run_ends_first: bool = False
    """Whether it does not start because the run is expected to end before the summary is used."""


def plan_lead(
    *,
    tokens: int,
    step: int,
    trigger: int,
    needed: int,
    expected: int | None,
    run_left: int | None = None,
    request_tokens: int | None = None,
) -> Lead:
    """Start now when one more request of waiting would leave the summary fewer requests than it is expected
    to take before it is needed: at `needed` (the budget, or where its cut stops fitting) once the pace is
    known, at the trigger with `UNMEASURED_REQUESTS` before. Always before the request that crosses the
    trigger (with no summary under way the event summarizes in the request path), and at once when the run's
    growth cannot be measured (`background_start` alone decides, as it did before the pace was learned).
    Never when the run is expected to end (`run_left` more requests, from the runs that ended) before the
    summary is ready or its event comes: the run's end would throw it away, paid for.

    `tokens` is the history in the units of `needed`; the trigger is crossed by the request's own estimate,
    `request_tokens` (default `tokens`): an event's count of the same history may be hundreds of tokens
    lower, and a crossing judged by it comes one request too late, when the event summarizes in place."""
    aim = needed if expected is not None else trigger
    takes = expected if expected is not None else UNMEASURED_REQUESTS
    measured = step > 0
    left = max(aim - tokens, 0) // step + 1 if measured else 0
    due = measured and left <= takes
    at = tokens if request_tokens is None else request_tokens
    crossing = measured and at + step > trigger
    to_trigger = max(trigger - at, 0) // step + 1 if measured else 1
    ends_first = run_left is not None and run_left < max(takes, to_trigger)
    reason: BackgroundStartReason = 'lead'
    if not measured:
        reason = 'unmeasured'
    elif at > trigger or (crossing and not due):  # crossed with nothing under way, or the next request will
        reason = 'trigger'
    return Lead(
        start=(due or crossing or not measured) and not ends_first,
        reason=reason,
        tokens_per_step=max(step, 0),
        expected_requests=expected,
        needed_tokens=aim,
        requests_left=left,
        run_requests_left=run_left,
        run_ends_first=ends_first,
    )
