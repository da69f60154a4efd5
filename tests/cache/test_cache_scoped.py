"""A scoped view of a shared cache: no scope reads another's entries; the default scope is the cache."""

from __future__ import annotations

import pytest

from pydantic_ai_history.cache import MemoryCache, ScopedCache, scoped, scoped_key

pytestmark = pytest.mark.anyio


async def test_scopes_never_share_an_entry() -> None:
    shared = MemoryCache()
    alice, bob = scoped(shared, 'tenant:alice'), scoped(shared, 'tenant:bob')
    assert isinstance(alice, ScopedCache)
    assert await alice.set('compactor-summary:abc', 'for alice')
    assert await bob.get('compactor-summary:abc') is None
    assert await alice.get('compactor-summary:abc') == 'for alice'
    assert await shared.get('compactor-summary:abc') is None
    # the shared cache counts what its views did
    assert (shared.stats.hits, shared.stats.misses) == (1, 2)
    await alice.delete('compactor-summary:abc')
    assert await alice.get('compactor-summary:abc') is None


async def test_keys_are_prefixed_by_a_hash_of_the_scope() -> None:
    key = scoped_key('artifact-convert:00ff', 'tenant:alice')
    assert key.endswith('/artifact-convert:00ff')
    assert key.startswith('scope-')
    assert 'alice' not in key
    assert scoped_key('artifact-convert:00ff', 'tenant:bob') != key
    # the default scope keeps the key, and its view is the cache itself
    shared = MemoryCache()
    assert scoped_key('k', '') == 'k'
    assert scoped(shared, '') is shared
    assert scoped(None, 'tenant:alice') is None
