"""What the capability keeps per run: one record per run, in one map bounded by `max_tracked_runs` (the least
recently active run dropped first), the runs going on (as many at most, released when each ends), and the key
that names a run, also on pydantic-ai 1.0, which has no run id."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelRequestPart

from .._compat import run_id_of
from ._stats import RunStats

if TYPE_CHECKING:
    from ..tokens import TokenCounter
    from ._validity import InputCheck


def _input_check() -> InputCheck:
    from ._validity import InputCheck  # the checks load with the first run

    return InputCheck()


@dataclass
class RunState:
    """What the capability remembers about one run between its requests."""

    input_check: InputCheck = field(default_factory=_input_check)
    """The incremental input check: each request continues the run's previous input."""
    stats: RunStats = field(default_factory=RunStats)
    """The run's running totals (`HistoryStats.runs`)."""
    offered_readback: bool | None = None
    """Whether the run's previous request offered `read_artifact` (its first appearance rewrites the cached
    prefix: tools come first); None before a request with tool definitions."""
    notice: ModelRequestPart | None = None
    """Late 1.x: the near-limit notice of the run's current request, until `wrap_model_request` puts it on
    the wire."""
    notice_band: int | None = None
    """The band (`NearLimitNotice.band`) of the run's latest notice, while its history stays past the
    notice's start."""
    workflow_counter: TokenCounter | None = None
    """Durable workflow code: the run's own token counter, begun afresh at the run's first step (see
    `HistoryCapability.make_context`)."""
    tracer: tuple[object, Any] | None = None
    """The run's capabilities (by identity) and the tracer of its instrumentation among them, found once."""

    def end(self) -> None:
        """The run has ended: only its stats stay (its near-limit state, its counter, which memoizes texts,
        its tracer and its input check, which holds its history, go)."""
        self.notice = self.notice_band = self.workflow_counter = self.tracer = None
        self.input_check = _input_check()


class Runs:
    """Every tracked run's `RunState`, the least recently active dropped past `limit`, and run keys."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._states: OrderedDict[str | None, RunState] = OrderedDict()
        self._open: OrderedDict[str, None] = OrderedDict()
        """Runs inside the run hook, the most recently begun last: a run is released when it ends (also when
        a dropped run is garbage-collected, which ends the hook); past `limit`, the oldest is forgotten."""
        self._legacy: dict[int, tuple[weakref.ReferenceType[Any], str]] = {}
        self._legacy_seq = 0

    def __getitem__(self, run: str | None) -> RunState:
        """The run's state, created if new and made the most recently active."""
        state = self._states.get(run)
        if state is not None:  # asked several times per request: one move, in C
            self._states.move_to_end(run)
            return state
        state = self._states[run] = RunState()
        while len(self._states) > self._limit:
            self._states.popitem(last=False)
        return state

    def begin(self, run: str) -> None:
        """`run` is going on (inside the run hook)."""
        self._open[run] = None
        self._open.move_to_end(run)
        while len(self._open) > self._limit:  # left unfinished and still referenced: background work stops
            self._open.popitem(last=False)

    def end(self, run: str) -> None:
        self._open.pop(run, None)

    def is_open(self, run: str | None) -> bool:
        return run is not None and run in self._open

    @property
    def open_count(self) -> int:
        """How many runs are going on, as far as the run hook tells."""
        return len(self._open)

    def peek(self, run: str | None) -> RunState | None:
        """The run's state if it is tracked, without making it the most recently active."""
        return self._states.get(run)

    def stats(self) -> Iterator[tuple[str, RunStats]]:
        """Each tracked run's stats, least recently active first (runs without a key count only overall)."""
        return ((run, state.stats) for run, state in self._states.items() if run is not None)

    def key(self, ctx: Any) -> str | None:
        """pydantic-ai's run id, else (1.0) a name for the run's `RunUsage`; None outside a run."""
        if ctx is None:
            return None
        run_id = run_id_of(ctx)
        if run_id is not None:
            return run_id
        # pydantic-ai 1.0 has no run id, and replaces its message list with each processor output; the
        # run's `RunUsage` is the one object that lives exactly as long as the run (unless the app shares
        # one usage between runs on purpose, when they count as one).
        usage = getattr(ctx, 'usage', None)
        return None if usage is None else self._legacy_key(usage)

    def _legacy_key(self, usage: object) -> str:
        key = id(usage)
        entry = self._legacy.get(key)
        if entry is not None and entry[0]() is usage:
            return entry[1]
        legacy = self._legacy
        try:
            ref = weakref.ref(usage, lambda _, key=key: legacy.pop(key, None))  # type: ignore[misc]
        except TypeError:  # not weak-referenceable: fall back to the object id
            return f'run-{key:x}'
        self._legacy_seq += 1
        name = f'run-{self._legacy_seq}'
        legacy[key] = (ref, name)
        return name
