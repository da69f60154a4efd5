"""The one cache interface shared by summaries, extractions, conversions and compactions."""

from __future__ import annotations

import hashlib
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..messages._utf8 import utf8

logger = logging.getLogger('pydantic_ai_history.cache')


@dataclass
class CacheStats:
    """Hit and miss counts of one cache instance."""

    hits: int = 0
    misses: int = 0
    errors: int = 0
    """Calls the backend failed; each was answered as a miss (get) or dropped (set), never raised."""

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class SummaryCache(ABC):
    """A string key-value cache; values are text (summaries, JSON of conversions).

    Subclasses implement `_get`/`_set`. A cache is an optimisation, so `get`, `set` and `delete` never raise:
    a failure is logged (a warning for the first of a series), counted in `stats.errors` and answered as a
    miss. `get_or_raise`/`set_or_raise`/`delete_or_raise` raise, for wrappers such as `FallbackCache`.
    """

    def __init__(self) -> None:
        self.stats = CacheStats()
        self._failing = False

    async def get(self, key: str) -> str | None:
        try:
            value = await self.get_or_raise(key)
        except Exception as e:
            self._report_failure('get', e)
            self.stats.misses += 1
            return None
        self._recovered()
        return value

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        """Store `value`; `ttl` is in seconds, `None` keeps it until evicted, `<= 0` removes the key.

        Returns False when the backend failed (logged and counted, never raised).
        """
        try:
            await self.set_or_raise(key, value, ttl=ttl)
        except Exception as e:
            self._report_failure('set', e)
            return False
        self._recovered()
        return True

    async def delete(self, key: str) -> None:
        """Remove `key` if present."""
        try:
            await self.delete_or_raise(key)
        except NotImplementedError:
            raise
        except Exception as e:
            self._report_failure('delete', e)

    async def get_or_raise(self, key: str) -> str | None:
        """`get`, letting a backend failure raise."""
        value = await self._get(key)
        if value is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return value

    async def set_or_raise(self, key: str, value: str, *, ttl: float | None = None) -> None:
        """`set`, letting a backend failure raise."""
        if ttl is not None and ttl <= 0:
            await self._delete(key)
        else:
            await self._set(key, value, ttl)

    async def delete_or_raise(self, key: str) -> None:
        """`delete`, letting a backend failure raise."""
        await self._delete(key)

    def _report_failure(self, operation: str, error: Exception) -> None:
        self.stats.errors += 1
        level = logging.DEBUG if self._failing else logging.WARNING
        logger.log(
            level,
            'cache %s: %s failed (%s: %s); answered as a miss, the run goes on',
            type(self).__name__,
            operation,
            type(error).__name__,
            error,
        )
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            logger.info('cache %s works again', type(self).__name__)

    @abstractmethod
    async def _get(self, key: str) -> str | None: ...

    @abstractmethod
    async def _set(self, key: str, value: str, ttl: float | None) -> None: ...

    async def _delete(self, key: str) -> None:
        # Not abstract, so caches written before `delete` existed keep working.
        raise NotImplementedError(f'{type(self).__name__} does not support delete')

    async def aclose(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Release connections; the default has none."""


def cache_key(namespace: str, *parts: str | bytes) -> str:
    """A stable key: `namespace:` + sha256 over the length-prefixed parts (so parts cannot run together)."""
    digest = hashlib.sha256()
    for part in parts:
        data = utf8(part) if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, 'big'))
        digest.update(data)
    return f'{namespace}:{digest.hexdigest()}'
