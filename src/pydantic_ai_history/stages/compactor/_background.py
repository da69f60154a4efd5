"""Summaries started ahead of their compaction event, off the request path: one per run, bounded.

Past `background_start` of the trigger, once the run's growth and the summarizer's pace say it is time
(`_lead`), the event is planned on a snapshot as the trigger would plan it and only the summarizer call runs
in a task. The trigger uses it when the history still extends the snapshot and the needed summary has the
same key: the same summary a blocking compaction would make. At most one job per run and at most `limit` runs
hold one: past that no job starts (that run's event summarizes when it comes, as without background work) and
no job is ever pushed out for another; a job ends with its event or its run. Cancelling never awaits (a
cancelled run cannot): the task stays referenced until done, so it is never destroyed while pending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import RunUsage

from ...events import BackgroundDiscardReason
from ...messages._clock import perf
from ._lead import RunLengths, SummarizerPace

if TYPE_CHECKING:
    from opentelemetry.trace import Span


logger = logging.getLogger('pydantic_ai_history.compactor')

TASK_NAME = 'pydantic_ai_history.background_summary'
"""The name of every background summary's asyncio task (so an app's task dump says whose it is)."""

_R = TypeVar('_R')

_MAX_RUNS_SEEN = 4_096
"""Runs whose request count is kept while they go on (each ends with its run; the bound is for runs that
never say they ended)."""


@dataclass(eq=False)
class BackgroundJob(Generic[_R]):
    """One summary being made ahead of its event."""

    run_id: str
    """The run it is made for: it ends with that run."""
    snapshot: list[ModelMessage]
    """The compactor's input when it started: the event uses it while the history extends this."""
    cut_at: int
    """Where its verbatim tail starts (a message index, in the history with our own parts separated)."""
    key: str
    """The summary cache key of what it summarizes: an event needing another key cannot use it."""
    evicted: int
    """How many messages it summarizes."""
    task: asyncio.Task[_R]
    """Its summarizer call; a failure is marked retrieved (an unused result is dropped on purpose)."""
    usage: RunUsage
    """Its own usage (added to the run's when it finishes), so its cost is known apart."""
    room: int | None = None
    """How many tokens the messages added after the snapshot may count and the event still take this summary
    (what its cut leaves verbatim, all added since, as stubs where the event stubs the tool outputs, and one
    more step within the target); None: no bound."""
    span: Span | None = None
    """The job's span (`background_compaction`), ended when it is used or thrown away."""
    started: float = field(default_factory=perf)
    """When it started (the replay-safe performance clock), for the lead it had over its event."""
    reason: BackgroundDiscardReason = 'not_needed'
    """Why it is thrown away if the event that takes it does not use it (set where the event decides)."""
    used: bool = False
    """Whether its event took the summary."""
    ended: bool = False
    """Whether it was thrown away already: where its event decides not to take it, before that event makes a
    summary of its own (a summarizer call never runs beside the one that replaces it)."""
    deferred: int = 0
    """Requests past the trigger that went out as they were, within the budget, while it still ran."""
    requests: int = 0
    """The run's requests since it started (the one that started it aside)."""
    ready_after: int | None = None
    """At which of those requests it was first seen ready (`SummarizerPace` learns from it)."""

    @classmethod
    def start(cls, coroutine: Coroutine[Any, Any, _R], **fields: Any) -> BackgroundJob[_R]:
        task = asyncio.create_task(coroutine, name=TASK_NAME)
        task.add_done_callback(_retrieve)
        return cls(task=task, **fields)

    def close_span(self, attributes: dict[str, str | bool]) -> None:
        span, self.span = self.span, None
        if span is not None:
            if self.ready:
                attributes = {**attributes, 'pydantic_ai_history.background.finished': True}
            span.set_attributes(attributes)
            span.end()

    def count_request(self) -> int | None:
        """One more request of its run: how many it took, when this is the first to see it ready."""
        self.requests += 1
        if self.ready_after is None and self.ready:
            self.ready_after = self.requests
            return self.requests
        return None

    def usable_after(self, per_message: Sequence[int]) -> bool:
        """Whether its cut can still serve an event after one more step from a history that extends the
        snapshot, `per_message` its counts: the growth is what the messages added since count, as the room
        is measured (the history's total also moves with what the provider's usage anchors it on)."""
        return self.room is None or sum(per_message[len(self.snapshot) :]) <= self.room

    def extended_by(self, messages: Sequence[ModelMessage]) -> bool:
        size = len(self.snapshot)
        return len(messages) >= size and list(messages[:size]) == self.snapshot

    @property
    def ready(self) -> bool:
        return self.task.done()

    async def result(self) -> _R:
        """A cancelled caller leaves the task running for its owner to cancel (`asyncio.wait` does not)."""
        await asyncio.wait((self.task,))
        return self.task.result()


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug('a background summary failed', exc_info=task.exception())


class BackgroundSummaries:
    """The background summaries, one per run, at most `limit` runs: a job is added only where there is room
    (`has_room`), so none is ever pushed out for another. `pace` learns how long they take."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._jobs: dict[str, BackgroundJob[Any]] = {}
        self._cancelled: set[asyncio.Task[Any]] = set()
        """Cancelled tasks not done yet: referenced until they are, so none is destroyed while pending."""
        self.pace = SummarizerPace()
        """How many of a run's requests a summary takes until it is ready."""
        self.lengths = RunLengths()
        """How many requests the recent runs made."""
        self._steps: dict[str, int] = {}
        """Run id -> the newest of its requests the compactor saw (at most `_MAX_RUNS_SEEN` runs going on)."""

    def note_step(self, run_id: str, step: int) -> None:
        """The run made its `step`-th request."""
        steps = self._steps
        if run_id not in steps and len(steps) >= _MAX_RUNS_SEEN:
            del steps[next(iter(steps))]  # a run that never ended (its hook did not run): the oldest goes
        steps[run_id] = step

    def step_of(self, run_id: str) -> int | None:
        return self._steps.get(run_id)

    def end_run(self, run_id: str) -> None:
        """The run ended: its length is learned."""
        step = self._steps.pop(run_id, None)
        if step is not None:
            self.lengths.observe(step)

    def get(self, run_id: str | None) -> BackgroundJob[Any] | None:
        return self._jobs.get(run_id) if run_id is not None else None

    def pop(self, run_id: str | None) -> BackgroundJob[Any] | None:
        return self._jobs.pop(run_id, None) if run_id is not None else None

    def __len__(self) -> int:
        return len(self._jobs)

    def has_room(self, run_id: str) -> bool:
        """Whether `run_id` may hold a job: it holds one (to be replaced), or fewer than `limit` runs do."""
        return run_id in self._jobs or len(self._jobs) < self._limit

    def add(self, job: BackgroundJob[Any]) -> BackgroundJob[Any] | None:
        """Hold `job` for its run (where `has_room` said so); returns the run's previous job, to discard."""
        replaced = self._jobs.pop(job.run_id, None)
        self._jobs[job.run_id] = job
        return replaced

    def cancel(self, job: BackgroundJob[Any]) -> None:
        if not job.task.done():
            job.task.cancel()
            self._cancelled.add(job.task)
            job.task.add_done_callback(self._cancelled.discard)
