"""Clocks that are replay-safe inside a durable workflow: there every reading is pinned (`replay_safe`) to the
newest model response's timestamp, which the engine journaled (durations read zero, TTLs move per response).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelResponse


@dataclass
class _Pinned:
    at: float
    """The time every clock reads in this scope."""
    draws: int = field(default=0)
    """How many replay-safe tokens were drawn, so each one differs from the last."""


_pinned: ContextVar[_Pinned | None] = ContextVar('pydantic_ai_history_pinned_clock', default=None)


def _replay_safe(clock: Callable[[], float]) -> Callable[[], float]:
    def read() -> float:
        pinned = _pinned.get()
        return clock() if pinned is None else pinned.at

    return read


wall = _replay_safe(time.time)
"""`time.time()`, or the pinned time inside a durable workflow."""
monotonic = _replay_safe(time.monotonic)
"""`time.monotonic()`, or the pinned time inside a durable workflow (breakers, cooldowns)."""
perf = _replay_safe(time.perf_counter)
"""`time.perf_counter()` for stats, or the pinned time (durations then read 0) inside a workflow."""


def replay_safe_token(nbytes: int) -> str | None:
    """Inside a durable workflow, a hex token from the pinned time and a draw count (the same on every
    replay, different on every draw); None outside."""
    pinned = _pinned.get()
    if pinned is None:
        return None
    pinned.draws += 1
    return hashlib.sha256(f'{pinned.at!r}:{pinned.draws}'.encode()).hexdigest()[: nbytes * 2]


def message_time(messages: Sequence[ModelMessage]) -> float:
    """The timestamp of the newest model response (seconds since the epoch); 0 when there is none.

    Only responses: they come back from the model's durable operation, so a replay reads the same stamp.
    Requests are stamped in workflow code with the system clock (pydantic-ai's `now_utc`), which a replay
    reads again: pinned to one of those, a replay would draw other ids (`replay_safe_token`), count other
    tokens and could journal other operations than the first execution did.
    """
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    return response.timestamp.timestamp() if response is not None else 0.0


@contextmanager
def replay_safe(at: float) -> Iterator[None]:
    """Pin every clock of this package to `at` for the duration of the block."""
    token = _pinned.set(_Pinned(at))
    try:
        yield
    finally:
        _pinned.reset(token)
