"""Retention of the persistent stores: what to delete so a store stays within its age and size bounds.

The decision is a pure function over what a store holds (`plan_prune`); each store scans and deletes around
it. Oldest first: an artifact's age is the time since it was last written or read, so a transcript the model
still reads back is the last to go.

Within its retention (`max_age`) an artifact belongs to a conversation that may still read it back: a store
never deletes it to make room for a newer one. A write past the size bound deletes only what expired and is
refused (`StoreQuotaExceeded`) when that is not enough; only an explicit prune (the CLI, `prune()`) deletes
the least recently used past `max_bytes`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

DEFAULT_MAX_AGE = 30 * 24 * 3600.0
"""Default retention by age: 30 days since an artifact was last written or read."""
DEFAULT_MAX_BYTES = 1024**3
"""Default retention by size for `DirectoryStore`: 1 GiB of data and sidecars in all scopes together."""
StoreBound = Literal['store']
"""`prune(max_age='store')`: the bound the store was configured with."""
LOW_WATER = 0.9
"""A prune past the size bound deletes down to this share of it, so the next writes do not prune again."""


@dataclass(frozen=True)
class Held:
    """One stored artifact, as retention sees it."""

    key: str
    """Where it is (a path, a Redis key)."""
    size: int
    """Bytes it takes, its info included."""
    used_at: float
    """When it was last written or read (seconds since the epoch)."""


@dataclass(frozen=True)
class PruneReport:
    """What a prune did."""

    removed: int
    """Artifacts deleted (expired, or the oldest past the size bound)."""
    freed_bytes: int
    held: int
    """Artifacts left."""
    held_bytes: int
    """Bytes left."""

    def __str__(self) -> str:
        return (
            f'removed {self.removed:,} artifact(s), {self.freed_bytes:,} bytes; '
            f'{self.held:,} left, {self.held_bytes:,} bytes'
        )


def plan_prune(
    held: Iterable[Held], *, now: float, max_age: float | None, max_bytes: int | None
) -> tuple[list[Held], list[Held]]:
    """`(to delete, to keep)`: every artifact unused for more than `max_age`, then the oldest until the rest
    is at most `LOW_WATER` of `max_bytes` (only when it is over `max_bytes`). None switches a bound off."""
    ordered = sorted(held, key=lambda h: h.used_at)
    # oldest first, so the expired ones are a prefix
    expired = [h for h in ordered if max_age is not None and now - h.used_at > max_age]
    kept = ordered[len(expired) :]
    total = sum(h.size for h in kept)
    if max_bytes is None or total <= max_bytes:
        return expired, kept
    goal = int(max_bytes * LOW_WATER)
    cut = 0
    while cut < len(kept) and total > goal:
        total -= kept[cut].size
        cut += 1
    return [*expired, *kept[:cut]], kept[cut:]
