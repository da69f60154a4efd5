"""The note that stands for the messages the window dropped, and how to read one back."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from ..._compat import message_metadata
from ...messages._marks import OPENINGS, marker_kind, own_metadata, own_request, part_kinds, seal, strip_seal
from ...messages.units import system_parts
from .._transcript import named_transcripts, read_call


def window_note(
    dropped: Sequence[ModelMessage],
    run_id: str | None,
    *,
    transcript: str | None = None,
    complete: bool = True,
) -> ModelRequest:
    """The request that stands for dropped messages, keeping their system prompt parts; earlier notes of ours
    among them are folded in. `transcript`: the stored transcript it names, of all the dropped messages when
    `complete`, else of those an earlier note stood for."""
    count = sum(1 if (noted := dropped_count(m)) is None else noted for m in dropped)
    text = f'{OPENINGS["window"]} {count} earlier messages were removed to fit the context window; '
    details: dict[str, object] = {'dropped_messages': count}
    if transcript is None:
        text += 'the conversation continues below.'
    else:
        which = 'their transcript' if complete else 'the transcript of the earliest of them'
        text += f'{which}: {read_call(transcript)} finds any detail. The conversation continues below.'
        details['transcript'] = transcript
    return own_request(
        [
            *((p, None) for p in system_parts(dropped)),
            (UserPromptPart(content=seal('window', text)), 'window'),
        ],
        details=details,
        run_id=run_id,
    )


_NOTE_COUNT = re.compile(re.escape(OPENINGS['window']) + r' (\d+) earlier messages were removed')


def dropped_count(message: ModelMessage) -> int | None:
    """How many messages a window note of ours stands for (None for any other message): from its metadata, or
    where there is none (1.0, merged notes split back out) from its note parts' own sealed text only."""
    found = _note_detail(message, 'dropped_messages')
    if found is None:
        return None
    detail, texts = found
    if isinstance(detail, int):
        return detail
    return sum(int(match.group(1)) if (match := _NOTE_COUNT.match(text)) else 0 for text in texts)


def note_transcript(message: ModelMessage) -> str | None:
    """The id of the stored transcript a window note of ours names (the newest, when notes were merged); None
    otherwise. Read like `dropped_count`."""
    found = _note_detail(message, 'transcript')
    if found is None:
        return None
    detail, texts = found
    if isinstance(detail, str):
        return detail
    named = [name for text in texts for name in named_transcripts(text)]
    return named[-1] if named else None


def _note_detail(message: ModelMessage, key: str) -> tuple[object, list[str]] | None:
    """None for anything but a window note of ours; else its metadata value for `key` and, only when that is
    missing, the texts of its note parts without their seals."""
    if marker_kind(message) != 'window':
        return None
    detail = own_metadata(message_metadata(message)).get(key)
    if detail is not None:
        return detail, []
    texts = [
        strip_seal(content)
        for part, kind in zip(message.parts, part_kinds(message), strict=True)
        if kind == 'window' and isinstance(content := getattr(part, 'content', None), str)
    ]
    return None, texts
