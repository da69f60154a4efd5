"""Drafts: the history a selection gives, with the note in place of what it drops, and its cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest

from ...context._context import HistoryContext
from ...messages._marks import marker_kind
from ...messages.units import Unit
from .._loads import with_reloads
from .._spill import Transcript, render_transcript
from ._note import note_transcript, window_note
from ._select import WindowSelection


@dataclass(frozen=True, kw_only=True)
class Draft:
    """A history the window may return: the kept messages around the note, and what the note stands for."""

    selection: WindowSelection
    """The units kept and dropped."""
    result: list[ModelMessage]
    """The kept messages with the note where the dropped ones were."""
    note: ModelRequest
    """The note that stands for the dropped messages."""
    dropped: list[ModelMessage]
    """The messages the note stands for."""
    transcript: Transcript | None
    """The transcript of the dropped content, rendered and keyed but not stored yet; None without one."""
    named: bool
    """Whether the note names `transcript` (a plain note stands in where that one does not fit)."""
    after: int
    """The result's tokens, provider overhead included."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """What one window call works on: drafts for different selections are made from it."""

    messages: Sequence[ModelMessage]
    """The history the window was given."""
    units: Sequence[Unit]
    """Its units (a tool call and its return, a turn), which the window keeps or drops whole."""
    overhead: int
    """Provider overhead (instructions, tool definitions) counted on top of the messages."""
    context: HistoryContext
    """The request's context: counter, store, run id."""

    def draft(self, selection: WindowSelection, *, spill: bool) -> Draft:
        """The history `selection` gives, its note naming the transcript of the dropped content when `spill`
        (earlier notes of ours are superseded, not content)."""
        units = self.units
        dropped = [m for i in selection.dropped_units for m in self.messages[units[i].start : units[i].end]]
        content = [m for m in dropped if marker_kind(m) != 'window']
        if not spill or not content:
            return self.plain(selection, dropped, None)
        previous = [t for m in dropped if (t := note_transcript(m)) is not None]
        transcript = render_transcript(content, self.context, previous)
        note = window_note(dropped, self.context.run_id, transcript=transcript.artifact_id)
        return self.assemble(selection, note, dropped, transcript, named=True)

    def plain(
        self, selection: WindowSelection, dropped: list[ModelMessage], transcript: Transcript | None
    ) -> Draft:
        """A draft whose note names no new transcript (`transcript`, if any, is still to be stored); the
        newest earlier transcript stays named: it chains to every one before."""
        previous = [t for m in dropped if (t := note_transcript(m)) is not None]
        has_content = any(marker_kind(m) != 'window' for m in dropped)
        earlier = previous[-1] if previous else None
        note = window_note(dropped, self.context.run_id, transcript=earlier, complete=not has_content)
        return self.assemble(selection, note, dropped, transcript, named=False)

    def assemble(
        self,
        selection: WindowSelection,
        note: ModelRequest,
        dropped: list[ModelMessage],
        transcript: Transcript | None,
        *,
        named: bool,
    ) -> Draft:
        """The draft of the kept units with `note` (standing for `dropped`, naming `transcript` when `named`)
        where the dropped ones were, and the loads they lose recorded again after it."""
        kept = set(selection.kept_units)
        result: list[ModelMessage] = []
        note_at = 0
        for index, unit in enumerate(self.units):
            if index not in kept:
                continue
            if not note_at and unit.start >= selection.head:
                result.append(note)
                note_at = len(result)
            result.extend(self.messages[unit.start : unit.end])
        result, _ = with_reloads(self.messages, result, kept_from=note_at, run_id=self.context.run_id)
        return Draft(
            selection=selection,
            result=result,
            note=note,
            dropped=dropped,
            transcript=transcript,
            named=named,
            after=self.context.counter.count_messages(result) + self.overhead,
        )


def plain_if_it_fits(layout: Layout, draft: Draft, budget: int, before: int) -> Draft:
    """`draft` with a plain note when naming its transcript is what keeps it from fitting (the request must
    fit, or at least shrink); the transcript is stored all the same."""
    plain = layout.plain(draft.selection, draft.dropped, draft.transcript)
    if plain.after <= budget or draft.after >= before > plain.after:
        return plain
    return draft
