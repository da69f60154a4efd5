"""The compactor's circuit breakers: after repeated failures of a call in one scope, stop it there a while."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ...pipeline._clock import monotonic

__all__ = ('Breaker', 'Call', 'ScopedBreakers')

Call = Literal['summarizer', 'provider']
"""What a breaker guards: the summarizer, or the serving model's own compaction (`method='provider'`). Each
has its own breakers, so a provider that fails to compact does not also stop the LLM summary standing in."""


@dataclass
class Breaker:
    """Opens after `max_failures` consecutive failures and stays open for `cooldown` seconds.

    Once the cool-down has passed one call is let through; a success closes the breaker, a failure opens it
    again at once.
    """

    max_failures: int
    cooldown: float
    failures: int = 0
    open_until: float | None = None

    def allows(self, now: float) -> bool:
        return self.open_until is None or now >= self.open_until

    def success(self) -> None:
        self.failures = 0
        self.open_until = None

    def failure(self, now: float) -> None:
        self.failures += 1
        if self.failures >= self.max_failures:
            self.open_until = now + self.cooldown


@dataclass(kw_only=True)
class ScopedBreakers:
    """One `Breaker` per call and scope (conversation or tenant), so content in one scope that makes the
    summarizer fail cannot switch every other scope to the fallback digest.

    A provider outage then opens each active scope's breaker after its own `max_failures`; that costs a few
    failed calls per scope, never a wrong summary. At most `max_scopes` breakers are kept (the least
    recently used forgotten first, which closes them).
    """

    max_failures: int
    """Consecutive failures in one scope before its cool-down."""
    cooldown: float
    """Seconds a scope's call is not made after `max_failures` failures."""
    clock: Callable[[], float] = field(default=monotonic, repr=False)
    """Monotonic seconds; injectable (tests, or a clock a durable engine journals)."""
    max_scopes: int = 4_096
    """Breakers kept at most."""
    _breakers: OrderedDict[tuple[Call, str], Breaker] = field(
        default_factory=OrderedDict[tuple[Call, str], Breaker], init=False, repr=False
    )

    def get(self, call: Call, scope: str) -> Breaker:
        """The breaker of `call` in `scope` (a closed one when the scope is new)."""
        key = (call, scope)
        breaker = self._breakers.pop(key, None)
        if breaker is None:
            breaker = Breaker(self.max_failures, self.cooldown)
        self._breakers[key] = breaker
        while len(self._breakers) > self.max_scopes:
            self._breakers.popitem(last=False)
        return breaker

    def allows(self, call: Call, scope: str) -> bool:
        return self.get(call, scope).allows(self.clock())

    def success(self, call: Call, scope: str) -> None:
        self.get(call, scope).success()

    def failure(self, call: Call, scope: str) -> None:
        self.get(call, scope).failure(self.clock())

    def failures(self, call: Call, scope: str) -> int:
        """Consecutive failures of `call` counted in `scope`."""
        found = self._breakers.get((call, scope))
        return 0 if found is None else found.failures
