"""A view of a shared cache in which every key belongs to one scope (a tenant or a conversation)."""

from __future__ import annotations

from ..store._base import scope_tag
from ._base import SummaryCache


def scoped_key(key: str, scope: str) -> str:
    """`key` as stored for `scope`: prefixed with a hash of the scope (the default scope `''` keeps `key`).

    A prefix, not a suffix, so an operator can find (or delete) one tenant's entries by pattern.
    """
    return f'{scope_tag(scope)}/{key}' if scope else key


class ScopedCache(SummaryCache):
    """`cache` as one scope sees it: every key is namespaced by `scope` before it reaches the backend.

    So nothing one tenant's run caches (summaries, conversions, prefix records all carry content) is ever
    served to another's, whatever the runs have in common. Stats are counted by the shared cache.
    """

    def __init__(self, cache: SummaryCache, scope: str) -> None:
        super().__init__()
        self.inner = cache
        """The shared cache."""
        self.scope = scope
        """The scope every key is namespaced by."""

    async def get(self, key: str) -> str | None:
        return await self.inner.get(scoped_key(key, self.scope))

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        return await self.inner.set(scoped_key(key, self.scope), value, ttl=ttl)

    async def delete(self, key: str) -> None:
        await self.inner.delete(scoped_key(key, self.scope))

    # The `*_or_raise` variants (for wrappers) reach the shared cache through these.
    async def _get(self, key: str) -> str | None:
        return await self.inner.get_or_raise(scoped_key(key, self.scope))

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        await self.inner.set_or_raise(scoped_key(key, self.scope), value, ttl=ttl)

    async def _delete(self, key: str) -> None:
        await self.inner.delete_or_raise(scoped_key(key, self.scope))


def scoped(cache: SummaryCache | None, scope: str) -> SummaryCache | None:
    """`cache` as `scope` sees it (None stays None; the default scope `''` is the cache itself)."""
    return cache if cache is None or not scope else ScopedCache(cache, scope)
