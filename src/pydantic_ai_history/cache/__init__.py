"""Caches for summaries, extractions, conversions and compactions: one interface, several backends.

`MemoryCache` is the default. `SQLiteCache` survives restarts on one machine. `RedisCache` is shared
between processes and machines; use it through `redis_cache()` (a `FallbackCache`) so an unreachable
server degrades to memory with a warning instead of failing the run. The processor hands its stages a
`ScopedCache` view of the one it is given: every key carries the run's scope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._base import CacheStats, SummaryCache, cache_key
from ._memory import MemoryCache
from ._scoped import ScopedCache, scoped, scoped_key

if TYPE_CHECKING:
    from ._fallback import FallbackCache, redis_cache
    from ._redis import RedisCache
    from ._sqlite import SQLiteCache

__all__ = (
    'CacheStats',
    'FallbackCache',
    'MemoryCache',
    'RedisCache',
    'SQLiteCache',
    'ScopedCache',
    'SummaryCache',
    'cache_key',
    'redis_cache',
    'scoped',
    'scoped_key',
)

# Backends load on first use: the default path never needs them (their imports, e.g. sqlite3, cost time).
_LAZY = {
    'FallbackCache': '._fallback',
    'RedisCache': '._redis',
    'SQLiteCache': '._sqlite',
    'redis_cache': '._fallback',
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
