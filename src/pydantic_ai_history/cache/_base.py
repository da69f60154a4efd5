"""The one cache interface shared by summaries, extractions, conversions and compactions."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass
class CacheStats:
    """Hit and miss counts of one cache instance."""

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class SummaryCache(ABC):
    """A string key-value cache; values are text (summaries, JSON of conversions).

    Subclasses implement `_get`/`_set`; hit and miss counting lives here so every backend reports alike.
    """

    def __init__(self) -> None:
        self.stats = CacheStats()

    async def get(self, key: str) -> str | None:
        value = await self._get(key)
        if value is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return value

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        """Store `value`; `ttl` is in seconds, `None` keeps it until evicted, `<= 0` removes the key."""
        if ttl is not None and ttl <= 0:
            await self._delete(key)
        else:
            await self._set(key, value, ttl)

    async def delete(self, key: str) -> None:
        """Remove `key` if present."""
        await self._delete(key)

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
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, 'big'))
        digest.update(data)
    return f'{namespace}:{digest.hexdigest()}'
