"""Summaries started ahead of their compaction event, off the request path: one per run, bounded.

When the history passes `CompactionSettings.background_start` of the trigger, the compactor plans the event
on a snapshot of the history as the trigger would (the cut, the cost rule that decides whether it will
summarize at all, the summary's cache key) and runs only the summarizer call in an asyncio task. At the
trigger the event uses that summary when the history still extends the snapshot and the summary it needs has
the same key: the same messages summarized with the same inputs, so the same summary a blocking compaction
would have made for that cut.

State is per run and bounded (`BackgroundSummaries`): each run holds at most one job, at most `limit` runs
hold one (the oldest is cancelled), and the processor ends a run's job when the run ends. Cancelling never
awaits (a run that ends by cancellation cannot await anything): the task is cancelled and kept referenced
until it is done, so it is never destroyed while pending.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic_ai.usage import RunUsage

from ..._compat import ModelMessage
from ...events import BackgroundDiscardReason
from ...pipeline._clock import perf

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ('BackgroundJob', 'BackgroundSummaries')

logger = logging.getLogger('pydantic_ai_history.compactor')

TASK_NAME = 'pydantic_ai_history.background_summary'
"""The name of every background summary's asyncio task (so an app's task dump says whose it is)."""

_R = TypeVar('_R')


@dataclass(eq=False)
class BackgroundJob(Generic[_R]):
    """One summary being made ahead of its event."""

    run_id: str
    """The run it belongs to: only that run's requests use it."""
    snapshot: list[ModelMessage]
    """The compactor's input when it started: the event uses it while the history extends this."""
    cut_at: int
    """Where its verbatim tail starts (a message index, in the history with our own parts separated)."""
    key: str
    """The summary cache key of what it summarizes: an event needing another key cannot use it."""
    evicted: int
    """Messages its summary replaces."""
    task: asyncio.Task[_R]
    """Its summarizer call; a failure is marked retrieved (an unused result is dropped on purpose)."""
    usage: RunUsage
    """Its own usage (added to the run's when it finishes), so its cost is known apart."""
    span: Span | None = None
    """Its span, from its start until it is used or thrown away (None when nothing records spans)."""
    started: float = field(default_factory=perf)
    reason: BackgroundDiscardReason = 'not_needed'
    """Why it is thrown away if the event that takes it does not use it (set where the event decides)."""
    used: bool = False
    deferred: int = 0
    """Requests past the trigger that went out as they were, within the budget, while it still ran."""

    @classmethod
    def start(cls, coroutine: Coroutine[Any, Any, _R], **fields: Any) -> BackgroundJob[_R]:
        """The job running `coroutine` in a task of its own."""
        task = asyncio.create_task(coroutine, name=TASK_NAME)
        task.add_done_callback(_retrieve)
        return cls(task=task, **fields)

    def close_span(self, attributes: dict[str, str | bool]) -> None:
        """End its span with what became of it (once)."""
        span, self.span = self.span, None
        if span is not None:
            if self.ready:
                attributes = {**attributes, 'pydantic_ai_history.background.finished': True}
            span.set_attributes(attributes)
            span.end()

    def extended_by(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether `messages` is the snapshot with messages appended (the same objects, or equal ones)."""
        size = len(self.snapshot)
        return len(messages) >= size and list(messages[:size]) == self.snapshot

    @property
    def ready(self) -> bool:
        return self.task.done()

    async def result(self) -> _R:
        """The task's result, waited for; raises what the task raised. A cancelled caller leaves the task
        running for its owner to cancel (`asyncio.wait` does not cancel what it waits for)."""
        await asyncio.wait((self.task,))
        return self.task.result()


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug('a background summary failed', exc_info=task.exception())


class BackgroundSummaries:
    """The running or finished background summaries, one per run, at most `limit` runs."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._jobs: OrderedDict[str, BackgroundJob[Any]] = OrderedDict()
        self._cancelled: set[asyncio.Task[Any]] = set()
        """Cancelled tasks not done yet: referenced until they are, so none is destroyed while pending."""

    def get(self, run_id: str | None) -> BackgroundJob[Any] | None:
        return self._jobs.get(run_id) if run_id is not None else None

    def pop(self, run_id: str | None) -> BackgroundJob[Any] | None:
        return self._jobs.pop(run_id, None) if run_id is not None else None

    def add(self, job: BackgroundJob[Any]) -> list[BackgroundJob[Any]]:
        """Hold `job` for its run; the jobs it pushed out (the oldest, over the limit), to be discarded."""
        replaced = self._jobs.pop(job.run_id, None)
        self._jobs[job.run_id] = job
        evicted = [replaced] if replaced is not None else []
        while len(self._jobs) > self._limit:
            evicted.append(self._jobs.popitem(last=False)[1])
        return evicted

    def cancel(self, job: BackgroundJob[Any]) -> None:
        """Stop `job` without awaiting it; its task stays referenced until it is done."""
        if not job.task.done():
            job.task.cancel()
            self._cancelled.add(job.task)
            job.task.add_done_callback(self._cancelled.discard)
