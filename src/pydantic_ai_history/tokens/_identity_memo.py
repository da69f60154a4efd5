"""Values memoized by object identity, without keeping the objects alive."""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

__all__ = ('IdentityMemo',)

V = TypeVar('V')

_SWEEP_MIN = 4_096


class IdentityMemo(Generic[V]):
    """A value per live object, found by `id` and confirmed by a weak reference.

    One weak reference per object and no callback: a callback closure (and a tuple) per entry made the first
    count or hash of a long history allocate enough long-lived objects to set off full garbage collections
    over the whole history. An entry whose object died fails the identity check (so a reused id is never
    mistaken for it) and is swept whenever the memo has doubled since the last sweep.
    """

    __slots__ = ('_refs', '_sweep_at', '_values')

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ReferenceType[Any]] = {}
        self._values: dict[int, V] = {}
        self._sweep_at = _SWEEP_MIN

    def get(self, obj: object) -> V | None:
        key = id(obj)
        ref = self._refs.get(key)
        if ref is None or ref() is not obj:
            return None
        return self._values.get(key)  # a sweep in another thread may have just dropped it

    def set(self, obj: object, value: V) -> None:
        key = id(obj)
        self._refs[key] = weakref.ref(obj)
        self._values[key] = value
        if len(self._refs) > self._sweep_at:
            self.sweep()

    def sweep(self) -> None:
        """Drop the entries of objects that no longer exist."""
        dead = [key for key, ref in self._refs.items() if ref() is None]
        for key in dead:
            del self._refs[key], self._values[key]
        self._sweep_at = max(2 * len(self._refs), _SWEEP_MIN)

    def __len__(self) -> int:
        """Entries held, the dead ones not yet swept included."""
        return len(self._refs)
