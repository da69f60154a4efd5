"""Storing what a stage removes, before it removes it: the transcript of the removed messages.

What stands for removed messages (a summary's reference line, the window's note) names their stored
transcript, which opens with a line naming earlier ones, so one reference reaches every removal. Rendering
and keying are pure (a stage can price its note first); storing is the one effect, its failure reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage

from ..context._context import HistoryContext
from ..messages.units import split_units
from ..store import StoreError
from ._transcript import TranscriptUnit, render_units, transcript_data, transcript_preamble


@dataclass(frozen=True, kw_only=True)
class Transcript:
    """The transcript of removed messages, rendered and keyed, not yet stored."""

    data: bytes
    """The rendered text (framed records, tool results whole), UTF-8."""
    artifact_id: str
    """The id it is stored under in the run's scope (keyed: unguessable from the content)."""
    messages: int
    """How many messages it holds."""


def render_transcript(
    messages: Sequence[ModelMessage],
    context: HistoryContext,
    previous: Sequence[str] = (),
    rendered: Sequence[TranscriptUnit] | None = None,
    gone: Sequence[str] = (),
) -> Transcript:
    """The transcript of `messages` (or `rendered`), opening with the line naming `previous` and `gone`
    transcripts (`transcript_preamble`), and its id in the run's scope."""
    preamble = transcript_preamble(previous, gone)
    if rendered is None:
        units = split_units(messages)
        rendered = render_units(
            messages, units, context.counter, tool_result_max_tokens=None, preamble=preamble
        )
    data = transcript_data(rendered, preamble)
    return Transcript(data=data, artifact_id=context.artifact_id(data), messages=len(messages))


async def store_transcript(transcript: Transcript, context: HistoryContext, *, source: str) -> bool:
    """Store `transcript` in the run's scope; False (with a `transcript_store_failed` warning) when the
    store fails or there is none."""
    return await context.store_original(
        transcript.artifact_id,
        transcript.data,
        media_type='text/markdown',
        source=source,
        code='transcript_store_failed',
        consequence=f': the transcript of {transcript.messages} removed messages is not stored',
    )


async def no_longer_stored(transcripts: Sequence[str], context: HistoryContext) -> list[str]:
    """Which of `transcripts` the store no longer holds in the run's scope. Under durable execution (workflow
    code) none is assumed gone, nor when the store cannot answer."""
    store = context.store
    if store is None or context.operations is not None:
        return []
    gone: list[str] = []
    for transcript in transcripts:
        try:
            if await store.info(transcript, scope=context.scope) is None:
                gone.append(transcript)
        except StoreError:
            return []
    return gone


async def spill_transcript(
    messages: Sequence[ModelMessage],
    context: HistoryContext,
    *,
    previous: Sequence[str] = (),
    source: str,
    rendered: Sequence[TranscriptUnit] | None = None,
    gone: Sequence[str] = (),
) -> str | None:
    """Render (unless `rendered`) and store the transcript of `messages`: its id; `''` when there is no store
    or nothing to store; None when storing failed."""
    if context.store is None or not messages:
        return ''
    transcript = render_transcript(messages, context, previous, rendered, gone)
    return transcript.artifact_id if await store_transcript(transcript, context, source=source) else None
