"""The summarizer's circuit breaker: after repeated failures in one scope, stop calling it there a while."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..._clock import monotonic

__all__ = ('Breaker', 'ScopedBreakers')


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
    """One `Breaker` per scope (conversation or tenant), so content in one scope that makes the summarizer
    fail cannot switch every other scope to the fallback digest.

    A provider outage then opens each active scope's breaker after its own `max_failures`; that costs a few
    failed calls per scope, never a wrong summary. At most `max_scopes` breakers are kept (the least
    recently used forgotten first, which closes them).
    """

    max_failures: int
    """Consecutive failures in one scope before its cool-down."""
    cooldown: float
    """Seconds a scope's summarizer is not called after `max_failures` failures."""
    clock: Callable[[], float] = field(default=monotonic, repr=False)
    """Monotonic seconds; injectable (tests, or a clock a durable engine journals)."""
    max_scopes: int = 4_096
    """Breakers kept at most."""
    _breakers: OrderedDict[str, Breaker] = field(
        default_factory=OrderedDict[str, Breaker], init=False, repr=False
    )

    def get(self, scope: str) -> Breaker:
        """The breaker of `scope` (a closed one when the scope is new)."""
        breaker = self._breakers.pop(scope, None)
        if breaker is None:
            breaker = Breaker(self.max_failures, self.cooldown)
        self._breakers[scope] = breaker
        while len(self._breakers) > self.max_scopes:
            self._breakers.popitem(last=False)
        return breaker

    def allows(self, scope: str) -> bool:
        return self.get(scope).allows(self.clock())

    def success(self, scope: str) -> None:
        self.get(scope).success()

    def failure(self, scope: str) -> None:
        self.get(scope).failure(self.clock())

    def failures(self, scope: str) -> int:
        """Consecutive failures counted in `scope`."""
        found = self._breakers.get(scope)
        return 0 if found is None else found.failures
