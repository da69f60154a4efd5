"""The compactor's circuit breakers: after repeated failures of a call in one scope, stop it there a while."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ...messages._clock import monotonic

Call = Literal['summarizer', 'provider']
"""What a breaker guards: the summarizer, or the serving model's own compaction (`method='provider'`). Each
has its own breakers, so a provider that fails to compact does not also stop the LLM summary standing in."""


@dataclass(kw_only=True)
class ScopedBreakers:
    """One breaker per call and scope, so content in one scope that makes the summarizer fail cannot switch
    every other scope to the fallback. Opens after `max_failures` consecutive failures for `cooldown` seconds;
    then one call is let through, whose failure reopens it at once. LRU-bounded to `max_scopes`."""

    max_failures: int
    """Consecutive failures in one scope before its cool-down."""
    cooldown: float
    """Seconds a scope's call is not made after `max_failures` failures."""
    clock: Callable[[], float] = field(default=monotonic, repr=False)
    """Monotonic seconds; injectable (tests, or a clock a durable engine journals)."""
    max_scopes: int = 4_096
    """Breakers kept at most."""
    _state: OrderedDict[tuple[Call, str], tuple[int, float]] = field(
        default_factory=OrderedDict[tuple[Call, str], tuple[int, float]], init=False, repr=False
    )
    """(call, scope) -> consecutive failures and until when the breaker is open (0.0 when it is closed)."""

    def allows(self, call: Call, scope: str) -> bool:
        key = (call, scope)
        if key not in self._state:
            return True
        self._state.move_to_end(key)
        return self.clock() >= self._state[key][1]

    def success(self, call: Call, scope: str) -> None:
        self._state.pop((call, scope), None)

    def failure(self, call: Call, scope: str) -> None:
        failures, open_until = self._state.pop((call, scope), (0, 0.0))
        failures += 1
        if failures >= self.max_failures:
            open_until = self.clock() + self.cooldown
        self._state[(call, scope)] = (failures, open_until)
        while len(self._state) > self.max_scopes:
            self._state.popitem(last=False)

    def failures(self, call: Call, scope: str) -> int:
        return self._state.get((call, scope), (0, 0.0))[0]
