"""The summarizer's circuit breaker: after repeated failures, stop calling it for a while."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ('Breaker',)


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
