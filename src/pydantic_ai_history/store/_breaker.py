"""A circuit breaker for a store backend: after a failure, refuse at once for a cool-down."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..messages._clock import monotonic
from ._base import StoreError, logger

_T = TypeVar('_T')


@dataclass(kw_only=True)
class StoreBreaker:
    """Lets calls through to a backend until one fails, then refuses them for `cooldown` seconds.

    A hung or broken backend (Redis under SIGSTOP, a full or dead disk) then costs one timeout per
    cool-down instead of one per operation: refused calls raise `StoreError` at once and callers keep the
    content inline. After the cool-down one call is let through; success closes the breaker.
    """

    name: str
    """The backend, for log lines."""
    cooldown: float = 30.0
    """Seconds during which calls are refused after a failure."""
    clock: Callable[[], float] = field(default=monotonic, repr=False)
    """Monotonic seconds (injectable, e.g. for tests or a journaled clock)."""
    attempts: int = 0
    """Calls that reached the backend."""
    refused: int = 0
    """Calls refused while the breaker was open."""
    failures: int = 0
    """Failed calls, in total."""
    open_until: float | None = None
    """Until when calls are refused (by `clock`); None while the backend works."""
    log: logging.Logger = field(default=logger, repr=False)
    """Where openings and recoveries are logged."""

    @property
    def is_open(self) -> bool:
        return self.open_until is not None and self.clock() < self.open_until

    async def call(
        self,
        operation: Callable[[], Awaitable[_T]],
        failure: type[BaseException] | tuple[type[BaseException], ...],
    ) -> _T:
        """Run `operation` unless open; a `failure` exception opens the breaker and becomes `StoreError`."""
        if self.is_open:
            self.refused += 1
            raise StoreError(f'{self.name} is unavailable (circuit open after a failure; retrying later)')
        self.attempts += 1
        try:
            result = await operation()
        except failure as e:
            self._failed(e)
            if isinstance(e, StoreError):
                raise
            raise StoreError(f'{self.name} failed: {type(e).__name__}: {e}') from e
        if self.open_until is not None:
            self.log.info('%s recovered', self.name)
            self.open_until = None
        return result

    def _failed(self, error: BaseException) -> None:
        self.failures += 1
        if self.open_until is None:
            self.log.warning(
                '%s failed (%s: %s); refusing its operations for %gs',
                self.name,
                type(error).__name__,
                error,
                self.cooldown,
            )
        self.open_until = self.clock() + self.cooldown
