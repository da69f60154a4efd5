"""The request that carries a summary, and reading the summary back out of it.

The summary is a `CompactionPart` where that is a request part (2.x), else a sealed `UserPromptPart`; never a
mid-history `SystemPromptPart` (providers reject it). Parts are marked as ours (`_marks`) and told apart by
structure, never by searching for `PINNED_HEADING`: a summarizer that writes the heading cannot make its
words pinned, nor hide what follows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart

from ..._compat import COMPACTION_PART, COMPACTION_REQUEST_PART, message_metadata
from ...messages._marks import (
    MARKER_KEY,
    OPENINGS,
    marker_kind,
    own_metadata,
    own_request,
    part_kinds,
    seal,
    strip_seal,
)
from .._transcript import named_transcripts
from ._trail import TrailEntry, parse_trail, render_trail, trail_from_data

PINNED_HEADING = '## Pinned (kept verbatim)'
"""The heading of the pinned part of a summary message; what the model reads, never how it is found."""

TRANSCRIPT_REFERENCE_OPENING = 'The full transcript of the '
"""The fixed opening of the reference line (the summary's own reference part)."""

_CACHE_FORMAT = 'pydantic-ai-history/summary-sections@1'


@dataclass(frozen=True)
class SummarySections:
    """A summary message's sections: the summarizer's text and what the package writes and carries."""

    summary: str
    """The summarizer's (or the fallback's) text: what the next summarizer updates."""
    pinned: str = ''
    """Pinned units, verbatim; never shown to the summarizer."""
    reference: str = ''
    """The line naming the stored transcript of the latest evicted messages; never shown to the summarizer."""
    trail: tuple[TrailEntry, ...] = ()
    """The exact details of everything summarized so far (`_trail`), written by code; carried as data."""
    transcript: str = ''
    """The id of the stored transcript `reference` names (''): the next compaction chains its own to it."""

    @property
    def text(self) -> str:
        """All sections as the model reads them (for events and people, never parsed back)."""
        summary = '\n\n'.join(p for p in (self.summary, render_trail(self.trail)) if p)
        pinned = f'{PINNED_HEADING}\n{self.pinned}' if self.pinned else ''
        return '\n\n'.join(p for p in (summary, self.reference, pinned) if p)


def build_summary_message(
    sections: SummarySections | str,
    *,
    details: Mapping[str, Any],
    system_parts: Sequence[SystemPromptPart] = (),
) -> ModelRequest:
    """A new request holding `sections` (or a plain summary text), with the evicted `system_parts` kept.
    No `run_id` is set: on 2.x `new_messages()` then starts at the run's own first message, so apps that
    store it keep their full history."""
    if isinstance(sections, str):
        sections = SummarySections(sections)
    summary: Any
    if COMPACTION_REQUEST_PART is not None:
        summary = COMPACTION_REQUEST_PART(
            content=sections.summary, metadata={MARKER_KEY: {'kind': 'summary'}}
        )
    else:
        summary = UserPromptPart(content=seal('summary', f'{OPENINGS["summary"]}\n{sections.summary}'))
    parts: list[tuple[Any, str | None]] = [(p, None) for p in system_parts]
    parts.append((summary, 'summary'))
    if sections.trail:
        parts.append((UserPromptPart(content=seal('trail', render_trail(sections.trail))), 'trail'))
        details = {**details, 'trail': [list(entry) for entry in sections.trail]}
    if sections.transcript:
        details = {**details, 'transcript': sections.transcript}
    if sections.reference:
        parts.append((UserPromptPart(content=seal('transcript', sections.reference)), 'transcript'))
    if sections.pinned:
        pinned = f'{PINNED_HEADING}\n{sections.pinned}'
        parts.append((UserPromptPart(content=seal('pinned', pinned)), 'pinned'))
    return own_request(parts, details=details)


def _without_opening(text: str, opening: str) -> str:
    return text[len(opening) :].lstrip('\n') if text.startswith(opening) else text


def summary_sections(message: ModelMessage) -> SummarySections | None:
    """The sections of a summary request of ours, read from its parts; None for any other message."""
    if not isinstance(message, ModelRequest) or marker_kind(message) != 'summary':
        return None
    texts: dict[str, list[str]] = {}
    for part, kind in zip(message.parts, part_kinds(message), strict=True):
        if kind is None:
            continue
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            texts.setdefault(kind, []).append(part.content or '')
        elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
            texts.setdefault(kind, []).append(strip_seal(part.content))
    summary = next(iter(texts.get('summary', ())), '')
    reference = next(iter(texts.get('transcript', ())), '')
    metadata = own_metadata(message_metadata(message))
    if metadata.get('trail') is not None:
        trail = trail_from_data(metadata['trail'])
    else:  # no metadata (pydantic-ai 1.0): the part we wrote, one value per line
        trail = tuple(entry for text in texts.get('trail', ()) for entry in parse_trail(text))
    pinned = [_without_opening(text, PINNED_HEADING) for text in texts.get('pinned', ())]
    transcript = metadata.get('transcript')
    return SummarySections(
        _without_opening(summary, OPENINGS['summary']),
        '\n\n'.join(pinned),
        reference,
        trail,
        transcript if isinstance(transcript, str) else _legacy_transcript(reference),
    )


def _legacy_transcript(reference: str) -> str:
    """The id from a reference line of ours, for summaries that did not keep it as data (pydantic-ai 1.0
    has no metadata; earlier releases did not store it)."""
    if TRANSCRIPT_REFERENCE_OPENING not in reference:
        return ''
    return next(iter(named_transcripts(reference)), '')


def summary_text(message: ModelMessage) -> str | None:
    """The whole text of a summary request of ours (summary, then its pinned section), or None."""
    sections = summary_sections(message)
    return sections.text if sections is not None else None


def encode_sections(sections: SummarySections) -> str:
    return json.dumps(
        {
            'format': _CACHE_FORMAT,
            'summary': sections.summary,
            'pinned': sections.pinned,
            'reference': sections.reference,
            'trail': [list(entry) for entry in sections.trail],
            'transcript': sections.transcript,
        }
    )


def decode_sections(value: str) -> SummarySections:
    """Sections from `encode_sections`; any other value (a plain summarizer text) is a summary alone."""
    if value.startswith('{'):
        try:
            data = json.loads(value)
        except ValueError:
            data = None
        texts = ('summary', 'pinned', 'reference')
        if (
            isinstance(data, dict)
            and data.get('format') == _CACHE_FORMAT
            and all(isinstance(data.get(name), str) for name in texts)
        ):
            trail = trail_from_data(data.get('trail', ()))
            transcript = data.get('transcript')
            if not isinstance(transcript, str):
                transcript = _legacy_transcript(data['reference'])
            return SummarySections(data['summary'], data['pinned'], data['reference'], trail, transcript)
    return SummarySections(value)
