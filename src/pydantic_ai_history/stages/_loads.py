"""On-demand capabilities a cut unloaded, and the record that loads them again.

pydantic-ai 2.x counts a deferred capability as loaded while its load (a `load_capability` call and return, or
a `CapabilityLoadDeltaPart`) is in the post-compaction window; its tools (`ToolAvailabilityDeltaPart`) and
instructions (`InstructionDeltaPart`, block `capability:<id>`) likewise. A cut that removes them unloads it.
So a stage that cut asks `lost_loads` and puts back pydantic-ai's own call-less record of a load (what
`RunContext.load_capability` writes) in one request after its summary or note: no tool call is made up, so
nothing is orphaned. Pure, by part identity; on 1.x it finds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, ModelResponse

from .._compat import (
    CAPABILITY_LOAD_DELTA_PART,
    COMPACTION_PART,
    HAS_DEFERRED_CAPABILITIES,
    INSTRUCTION_DELTA_PART,
    LOAD_CAPABILITY_CALL_PART,
    LOAD_CAPABILITY_RETURN_PART,
    TOOL_AVAILABILITY_DELTA_PART,
    make_request,
    post_compaction_window,
)

_CAPABILITY_BLOCK = 'capability:'
"""How pydantic-ai names a loaded capability's instruction block (`CapabilityInstructionSource`)."""


@dataclass
class LoadState:
    """What a stretch of history says about loaded capabilities and revealed tools, in history order."""

    loaded: list[str] = field(default_factory=list)
    """Capability ids loaded, in load order (a capability loaded again moves to the end)."""
    revealed: list[str] = field(default_factory=list)
    """Tool names revealed by `ToolAvailabilityDeltaPart`s, in first-appearance order."""
    statements: dict[str, Any] = field(default_factory=dict)
    """Capability id -> the latest `InstructionDeltaPart` stating its instructions."""

    def empty(self) -> bool:
        return not (self.loaded or self.revealed)

    def without(self, live: LoadState) -> LoadState:
        """What this state has that `live` does not, with the statements of the capabilities that remain."""
        loaded = [c for c in self.loaded if c not in live.loaded]
        return LoadState(
            loaded=loaded,
            revealed=[name for name in self.revealed if name not in live.revealed],
            statements={c: s for c, s in self.statements.items() if c in loaded},
        )


def _statement_owner(part: object) -> str | None:
    """The capability whose loaded block an `InstructionDeltaPart` states, or None for any other part."""
    if INSTRUCTION_DELTA_PART is None or not isinstance(part, INSTRUCTION_DELTA_PART):
        return None
    block = str(getattr(part, 'id', '') or '')
    return block[len(_CAPABILITY_BLOCK) :] if block.startswith(_CAPABILITY_BLOCK) else None


def _loaded_by(part: object, calls: dict[str, str]) -> list[str]:
    """The capabilities `part` loads, as pydantic-ai's `LoadExchanges` decides; folds calls into `calls`."""
    if CAPABILITY_LOAD_DELTA_PART is not None and isinstance(part, CAPABILITY_LOAD_DELTA_PART):
        return list(part.loaded)
    if LOAD_CAPABILITY_CALL_PART is not None and isinstance(part, LOAD_CAPABILITY_CALL_PART):
        capability_id = part.capability_id
        if capability_id is not None:
            calls[part.tool_call_id] = capability_id
        return []
    if LOAD_CAPABILITY_RETURN_PART is not None and isinstance(part, LOAD_CAPABILITY_RETURN_PART):
        found = calls.get(part.tool_call_id)
        return [found] if found is not None else []
    return []


def _window_parts(messages: Sequence[ModelMessage]) -> Iterable[object]:
    """Every part of the post-compaction window, in order: the only parts pydantic-ai derives state from."""
    for message in post_compaction_window(messages):
        yield from message.parts


def _fold(parts: Iterable[object], counted: set[int] | None = None) -> LoadState:
    """The state the `parts` leave; with `counted`, only those parts add to it (calls are always read, so a
    return is paired with its call wherever it is)."""
    state = LoadState()
    calls: dict[str, str] = {}
    seen: set[str] = set()
    for part in parts:
        loaded = _loaded_by(part, calls)
        if counted is not None and id(part) not in counted:
            continue
        for capability_id in loaded:
            if capability_id in state.loaded:
                state.loaded.remove(capability_id)
            state.loaded.append(capability_id)
        if TOOL_AVAILABILITY_DELTA_PART is not None and isinstance(part, TOOL_AVAILABILITY_DELTA_PART):
            new = [name for name in part.tools_added if name not in seen]
            seen.update(new)
            state.revealed.extend(new)
        elif (owner := _statement_owner(part)) is not None:
            state.statements[owner] = part
    return state


def lost_loads(before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> LoadState:
    """What `before` had loaded and revealed that `after` no longer has, with the latest statement of each
    lost capability's instructions among the removed parts (those still in `after` are stated there)."""
    window = _load_window(before)
    if not window:
        return LoadState()
    kept = {id(part) for message in after for part in message.parts}
    removed = _fold(window, {id(part) for part in window if id(part) not in kept})
    if removed.empty():
        return removed
    return removed.without(_fold(_window_parts(after)))


_LOAD_RECORDS = tuple(
    cls
    for cls in (CAPABILITY_LOAD_DELTA_PART, LOAD_CAPABILITY_RETURN_PART, TOOL_AVAILABILITY_DELTA_PART)
    if cls is not None
)


def _load_window(messages: Sequence[ModelMessage]) -> list[object]:
    """The parts of the post-compaction window of `messages`, or none when no load or reveal is among them
    (nothing for a cut to lose; always so where the version has no on-demand capabilities)."""
    if not HAS_DEFERRED_CAPABILITIES:
        return []
    window = list(_window_parts(messages))
    return window if any(isinstance(part, _LOAD_RECORDS) for part in window) else []


def reload_record(lost: LoadState, *, run_id: str | None = None) -> ModelRequest | None:
    """pydantic-ai's record of a load without a call for everything `lost` names; None when it names nothing.
    Statements are full texts (`base_hash=None`): the text they diffed against is gone."""
    if lost.empty() or CAPABILITY_LOAD_DELTA_PART is None or TOOL_AVAILABILITY_DELTA_PART is None:
        return None
    parts: list[ModelRequestPart] = []
    if lost.loaded:
        parts.append(CAPABILITY_LOAD_DELTA_PART(loaded=list(lost.loaded)))
    if lost.revealed:
        parts.append(TOOL_AVAILABILITY_DELTA_PART(tools_added=list(lost.revealed)))
    parts.extend(replace(lost.statements[c], base_hash=None) for c in lost.loaded if c in lost.statements)
    return make_request(parts, run_id=run_id)


def record_index(after: Sequence[ModelMessage], kept_from: int) -> int:
    """Where the record goes in `after` (inside its post-compaction window, between units, never last): after
    the latest request holding our `CompactionPart`, or past the requests answering a provider's compaction;
    without one, where the kept messages start (`kept_from`)."""
    last = len(after) - 1
    for index in range(last, -1, -1):
        message = after[index]
        if COMPACTION_PART is None or not any(isinstance(p, COMPACTION_PART) for p in message.parts):
            continue
        at = index + 1
        if isinstance(message, ModelResponse):
            while at < last and isinstance(after[at], ModelRequest):
                at += 1
        return min(at, last)
    return max(min(kept_from, last), 0)


def with_reloads(
    before: Sequence[ModelMessage],
    after: list[ModelMessage],
    *,
    kept_from: int,
    run_id: str | None = None,
) -> tuple[list[ModelMessage], ModelRequest | None]:
    """`after` with the record of what the cut from `before` unloaded, and that record (None: `after` itself).
    `kept_from`: where in `after` the messages kept after the cut's own message start."""
    if after is before:
        return after, None
    record = reload_record(lost_loads(before, after), run_id=run_id)
    if record is None:
        return after, None
    at = record_index(after, kept_from)
    return [*after[:at], record, *after[at:]], record


def reload_reserve(messages: Sequence[ModelMessage]) -> ModelRequest | None:
    """The largest record a cut of `messages` could need (every load and reveal lost), for a stage to plan
    with before it knows where it cuts; None when nothing is loaded or revealed."""
    window = _load_window(messages)
    return reload_record(_fold(window)) if window else None
