"""Counts kept between requests, by message identity (`IdentityMemo`) and per conversation, so a request
costs what is new, not the whole history.

Per conversation the counter keeps recent *branches* (messages, counts, running totals, where usage sits,
what was sent); a history that extends one is recognised by a single list comparison in C (equal reloaded
copies match too). A history that departs (a compaction, a fork) starts a branch from the longest shared
prefix.

A branch holds its messages while its conversation is active; once its run has ended (`RunningCounts.park`) it
holds them weakly, so a conversation the app let go of costs its counts only, until the next `park` drops it.
"""

from __future__ import annotations

import bisect
import itertools
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast, overload

from pydantic_ai.messages import ModelMessage, ModelResponse

from .._compat import is_compaction_response

CountMessage = Callable[[ModelMessage], int]

V = TypeVar('V')

_SWEEP_MIN = 4_096


class IdentityMemo(Generic[V]):
    """A value per live object, found by `id` and confirmed by a weak reference. No callback: a closure per
    entry set off full garbage collections on long histories; dead entries fail the identity check and are
    swept whenever the memo has doubled (at least `_SWEEP_MIN` entries; `collect` sweeps below that too). With
    `max_entries`, the oldest entries are forgotten past it (a value that refers to its own object keeps that
    object alive, so only a bound limits such a memo).
    """

    __slots__ = ('_entries', '_live', '_max_entries', '_sweep_at')

    def __init__(self, max_entries: int | None = None) -> None:
        self._entries: dict[int, tuple[weakref.ReferenceType[Any], V]] = {}
        self._max_entries = max_entries
        self._sweep_at = _SWEEP_MIN
        self._live = 0

    def get(self, obj: object) -> V | None:
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def set(self, obj: object, value: V) -> None:
        entries = self._entries
        if self._max_entries is not None and len(entries) >= self._max_entries and id(obj) not in entries:
            del entries[next(iter(entries))]
        entries[id(obj)] = (weakref.ref(obj), value)
        if len(entries) > self._sweep_at:
            self.sweep()

    def sweep(self) -> None:
        """Drop the entries of objects that no longer exist."""
        self._entries = {key: entry for key, entry in self._entries.items() if entry[0]() is not None}
        self._live = len(self._entries)
        self._sweep_at = max(2 * self._live, _SWEEP_MIN)

    def collect(self) -> None:
        """Sweep (outside the hot path, e.g. when a run ends) once at least as many entries were added since
        the last sweep as it left: a constant cost per entry, and dead entries at most the live ones."""
        if len(self._entries) > 2 * self._live:
            self.sweep()

    def __len__(self) -> int:
        """Entries held, the dead ones not yet swept included."""
        return len(self._entries)


class CountsView(Sequence[int]):
    """The first `length` counts of a branch, read-only (a branch's lists only ever grow); equal to any
    sequence of the same counts, sliced to a tuple."""

    __slots__ = ('_counts', '_length')

    def __init__(self, counts: list[int], length: int) -> None:
        self._counts = counts
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)  # clamped to the view: no copy of the rest
            return tuple(self._counts[start:stop:step])
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError('per-message index out of range')
        return self._counts[index]

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self._counts, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CountsView):
            return self._counts[: self._length] == other._counts[: other._length]
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self._counts[: self._length] == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(tuple(self))


@dataclass(kw_only=True)
class Branch:
    """One history of a conversation as last seen, with everything the estimate needs about its prefixes."""

    messages: list[ModelMessage] = field(default_factory=list)
    """The messages, held (their ids cannot be reused while the branch lives); empty while parked."""
    parked: list[weakref.ReferenceType[ModelMessage]] | None = None
    """While parked (its run ended): its messages by weak reference, in place of `messages`; else None."""
    counts: list[int] = field(default_factory=list)
    """Each message's count; only ever appended to (views of it stay valid)."""
    cumulative: list[int] = field(default_factory=lambda: [0])
    """`cumulative[i]` is the sum of the first `i` counts."""
    usages: list[int] = field(default_factory=list)
    """Indexes of the responses carrying provider usage, ascending."""
    sent: dict[int, int | None] = field(default_factory=dict)
    """Lengths of the prefixes that went to the model as they are (`mark_sent`), with what the request's tool
    definitions cost (None: not known)."""
    last_used: int = 0
    """The `RunningCounts` clock at the branch's latest lookup."""

    def park(self) -> None:
        """Hold the messages weakly (a conversation the app let go of frees them)."""
        if self.parked is None:
            self.parked = [weakref.ref(message) for message in self.messages]
            self.messages = []

    def unpark(self) -> Branch | None:
        """The branch holding its messages again: its whole self when they all live, else the prefix that does
        (None when not even the first does: a reloaded copy then starts afresh)."""
        parked = self.parked
        if parked is None:
            return self
        messages = [ref() for ref in parked]
        alive = len(messages)
        if not all(messages):  # in C (messages are true); a false one only takes the slower look
            alive = next((i for i, message in enumerate(messages) if message is None), alive)
        if alive == 0:
            return None
        del messages[alive:]
        self.parked = None
        self.messages = cast('list[ModelMessage]', messages)  # none is None below `alive`
        self.rewind(alive)
        return self

    def extend(self, new: Sequence[ModelMessage], counts: list[int]) -> None:
        start = len(self.counts)
        self.counts.extend(counts)
        self.cumulative.extend(
            itertools.islice(itertools.accumulate(counts, initial=self.cumulative[-1]), 1, None)
        )
        for offset, message in enumerate(new):
            # a compaction response's usage measured the conversation it replaced: no anchor for what follows
            if (
                isinstance(message, ModelResponse)
                and message.usage.input_tokens
                and not is_compaction_response(message)
            ):
                self.usages.append(start + offset)

    def rewind(self, length: int) -> None:
        """Forget the counts beyond the first `length` messages; lists a `CountsView` still holds (by
        reference count) are copied rather than cut."""
        if length == len(self.counts):
            return
        if _shared(self.counts) or _shared(self.cumulative):
            self.counts = self.counts[:length]
            self.cumulative = self.cumulative[: length + 1]
        else:
            del self.counts[length:]
            del self.cumulative[length + 1 :]
        del self.usages[bisect.bisect_left(self.usages, length) :]
        self.sent = {n: tools for n, tools in self.sent.items() if n <= length}

    def prefix(self, length: int) -> Branch:
        """A new branch holding this one's first `length` messages (its own lists: views of this one stay)."""
        return Branch(
            messages=self.messages[:length],
            counts=self.counts[:length],
            cumulative=self.cumulative[: length + 1],
            usages=self.usages[: bisect.bisect_left(self.usages, length)],
            sent={n: tools for n, tools in self.sent.items() if n <= length},
        )

    def newest_usage(self, length: int) -> int | None:
        """The index of the newest response with usage among the first `length` messages."""
        position = bisect.bisect_left(self.usages, length)
        return self.usages[position - 1] if position else None


def _shared(values: list[int]) -> bool:
    """Whether anything but its branch holds `values` (a live view); always true where unknowable."""
    getrefcount = getattr(sys, 'getrefcount', None)
    # the branch's attribute, getrefcount's argument and this frame's local
    return getrefcount is None or getrefcount(values) > 3


@dataclass
class RunningCounts:
    """The branches of recent conversations, bounded in conversations, branches and messages held."""

    max_conversations: int = 64
    max_branches: int = 3
    """Histories kept per conversation: the growing one, a compacted one, a fork."""
    max_idle_syncs: int = 4
    """A branch other than the latest, not read in this many lookups, is dropped: a history the processor
    compacted away is not kept alive beyond the next request or two (the messages are held, not weakly)."""
    max_messages: int = 400_000
    """Messages held across all conversations; the least recent conversations go first beyond it. A parked
    branch (`park`) holds none: it keeps one weak reference and two counts per message, and goes at the next
    `park` once its first message is gone."""
    _slots: OrderedDict[int, list[Branch]] = field(default_factory=OrderedDict, init=False, repr=False)
    _clock: int = field(default=0, init=False, repr=False)
    _last: tuple[Sequence[ModelMessage], int, Branch] | None = field(default=None, init=False, repr=False)

    def sync(self, messages: Sequence[ModelMessage], count: CountMessage) -> Branch:
        """A branch whose first `len(messages)` messages are `messages`, counting only what it lacked."""
        self._clock += 1
        given = messages if isinstance(messages, list) else list(messages)
        last = self._last
        # The same history again in another list (a request's tools, then its hook): one comparison in C,
        # identical messages never reach `__eq__`.
        if last is not None and len(last[2].messages) == len(given) and last[2].messages == given:
            same = last[2]
            same.last_used = self._clock
            self._last = (messages, len(messages), same)
            return same
        key = id(given[0])
        branches = self._slots.pop(key, [])  # a branch holds its first message: its id is not reused
        if branches and branches[0].parked is not None:  # a parked slot: its first messages live, or it goes
            branches = [b for b in map(Branch.unpark, branches) if b is not None]
        branch = _matching(branches, given, count)
        if branch is None:
            branch = _diverging(branches[0] if branches else None, given, count)
            branches.insert(0, branch)
        elif branch is not branches[0]:
            branches.remove(branch)
            branches.insert(0, branch)
        branch.last_used = self._clock
        del branches[self.max_branches :]
        branches[1:] = [b for b in branches[1:] if self._clock - b.last_used <= self.max_idle_syncs]
        self._slots[key] = branches
        self._evict(key)
        self._last = (messages, len(messages), branch)
        return branch

    def mark_sent(
        self, messages: Sequence[ModelMessage], count: CountMessage, tools: int | None = None
    ) -> None:
        """Record that exactly `messages` went to the model, with what its tool definitions cost (`tools`)."""
        last = self._last
        if last is not None and last[0] is messages and last[1] == len(messages):
            branch = last[2]  # the list just estimated (the idle path): nothing to compare again
        else:
            branch = self.sync(messages, count)
        branch.sent[len(messages)] = tools
        # Let go of the caller's list while the caller still holds it: held until the next request, its
        # last reference would be dropped (all of its items released) inside that request's hook.
        self._last = None

    def park(self, keep: int = 0) -> None:
        """Hold weakly the messages of all but the `keep` most recently used conversations (their runs ended),
        and drop the parked ones whose first message is gone (nothing can continue them)."""
        self._last = None
        slots = self._slots
        for key in list(itertools.islice(slots, max(len(slots) - keep, 0))):
            branches = slots[key]
            if branches[0].parked is None:
                for branch in branches:
                    branch.park()
            elif branches[0].parked[0]() is None:
                del slots[key]

    def _evict(self, keep: int) -> None:
        while len(self._slots) > self.max_conversations:
            self._slots.popitem(last=False)
        if len(self._slots) < 2:  # the one conversation is never evicted for its own size
            return
        held = sum(len(b.messages) for branches in self._slots.values() for b in branches)
        while held > self.max_messages and len(self._slots) > 1:
            key, branches = next(iter(self._slots.items()))
            if key == keep:
                break
            del self._slots[key]
            held -= sum(len(b.messages) for b in branches)


_TAIL = 16
"""How far back from the end the last object a history shares with a branch is looked for."""
_REWIND = 2
"""At most this many of a branch's last messages are replaced in place (a retried request, a reduced last
tool return); a branch losing more is kept (a fork may leave it alive) and the new history branches."""


def _matching(branches: list[Branch], messages: list[ModelMessage], count: CountMessage) -> Branch | None:
    """The branch `messages` follows (now holding it, counted) or is a prefix of; None if none."""
    if len(branches) == 1:  # most conversations have one branch
        shared = _shared_end(branches[0].messages, messages)
        return branches[0] if shared and _follow(branches[0], messages, shared, count) else None
    candidates = [
        (_shared_end(branch.messages, messages), -rank, branch) for rank, branch in enumerate(branches)
    ]
    for shared, _, branch in sorted(candidates, key=lambda c: c[:2], reverse=True):
        if shared and _follow(branch, messages, shared, count):
            return branch
    return None


def _shared_end(held: list[ModelMessage], messages: list[ModelMessage]) -> int:
    """Where a prefix shared with `held` would end, judged by the last messages only (0: no near end)."""
    known, length = len(held), len(messages)
    shared = min(known, length)
    if shared and (held[shared - 1] is messages[shared - 1] or held[shared - 1] == messages[shared - 1]):
        return shared  # the same object, or an equal copy (a reload)
    floor = max(shared - _TAIL, 0)
    while shared > floor and held[shared - 1] is not messages[shared - 1]:
        shared -= 1
    if shared == 0 or held[shared - 1] is not messages[shared - 1]:
        return 0
    if shared < known and shared < length and known - shared > _REWIND:
        return 0  # departs early from a longer branch: a compaction or a fork, not a retry
    return shared


def _follow(branch: Branch, messages: list[ModelMessage], shared: int, count: CountMessage) -> bool:
    held = branch.messages
    length = len(messages)
    if shared == length < len(held):  # a prefix of the branch: compare without copying either list
        tail = held[length:]
        del held[length:]
        same = held == messages
        held.extend(tail)
        return same
    dropped, new = held[shared:], messages[shared:]
    del held[shared:]
    held.extend(new)
    same = False
    try:
        # One comparison in C of the whole history; identical objects never reach `__eq__`.
        if held == messages:
            counts = [count(m) for m in new]
            same = True
    finally:
        if not same:  # not this branch, or counting raised: the branch as it was
            del held[shared:]
            held.extend(dropped)
    if same:
        branch.rewind(shared)
        branch.extend(new, counts)
    return same


def _diverging(parent: Branch | None, messages: list[ModelMessage], count: CountMessage) -> Branch:
    """A new branch for `messages`: the counts of the parent's shared prefix, the rest counted."""
    shared = 0
    if parent is not None:
        for held, given in zip(parent.messages, messages, strict=False):
            if held is not given:
                break
            shared += 1
    branch = parent.prefix(shared) if parent is not None else Branch()
    new = messages[shared:]
    counts = [count(m) for m in new]
    branch.messages.extend(new)
    branch.extend(new, counts)
    return branch
