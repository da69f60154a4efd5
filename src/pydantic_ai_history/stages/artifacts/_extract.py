"""Finding the artifacts of a history: tool returns and attached files, with where they live."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from ..._compat import decode_data_url, is_media
from ...context._artifact_models import Artifact
from ...messages._marks import unseal
from ...messages._utf8 import utf8
from ...store import artifact_id
from ...tokens._running_counts import IdentityMemo
from .._pieces import call_hints, is_processed, tool_return_text


@dataclass
class Candidate:
    """A text artifact (a tool return) that the planner may reduce."""

    artifact: Artifact
    message_index: int
    part_index: int
    text: str
    """What the planner works on (the reducer's output when a reducer ran)."""
    original: str
    """Exactly what the model would have seen; what goes to the spill store."""
    media_type: str
    hint: str = ''
    """Text from the tool call's arguments, added to the extraction query."""
    reduced_by: str | None = None
    files: tuple[Any, ...] = ()
    """Multimodal items of the tool return, kept after the text."""
    source_part: Any = None
    """The part as found (replaced by a new part when the artifact is reduced)."""

    @property
    def id(self) -> str:
        return self.artifact.id

    def at(self, message_index: int, part_index: int) -> Candidate:
        """This candidate where it is found now (messages before it may have been dropped)."""
        if (message_index, part_index) == (self.message_index, self.part_index):
            return self
        artifact = self.artifact.model_copy(update={'step': message_index})
        return dataclasses.replace(
            self, artifact=artifact, message_index=message_index, part_index=part_index
        )


CandidateMemo = IdentityMemo[tuple[Any, Candidate]]
"""Tool returns already examined, by identity, with the token counter and the candidate made of each: over
the hard limit every tool return is read on every request; a part seen before is not serialised, hashed and
counted again (parts never mutate). At most `CANDIDATE_MEMO_SIZE` entries."""
CANDIDATE_MEMO_SIZE = 2_048
"""Tool returns the memo keeps (oldest forgotten first): a candidate holds its part, so only this bound
frees the parts of conversations the app has let go."""


@dataclass
class Attachment:
    """An attached file (user prompt or tool return content) with its bytes."""

    message_index: int
    part_index: int
    item_index: int | None
    """Index into the part's content sequence; None when the content is the file itself."""
    data: bytes
    media_type: str
    name: str | None

    @property
    def id(self) -> str:
        return artifact_id(self.data)


def find_candidates(
    messages: Sequence[ModelMessage],
    *,
    count_tokens: Any,
    exempt_tools: frozenset[str],
    start: int,
    memo: CandidateMemo,
    make_id: Callable[[bytes], str],
) -> list[Candidate]:
    """Every unprocessed tool return from message `start` on (older ones are not read), as a `Candidate`;
    parts `memo` has seen are not examined again. `make_id` names the artifact (the store's keyed id)."""
    hints: dict[str, str] | None = None
    found: list[Candidate] = []
    for m_index in range(start, len(messages)):
        message = messages[m_index]
        if not isinstance(message, ModelRequest):
            continue
        for p_index, part in enumerate(message.parts):
            if not isinstance(part, ToolReturnPart) or part.tool_name in exempt_tools or is_processed(part):
                continue
            seen = memo.get(part)
            if seen is not None and seen[0] == count_tokens:
                found.append(seen[1].at(m_index, p_index))
                continue
            if hints is None:
                hints = call_hints(messages[max(start - 1, 0) :])
            text, media_type, files = tool_return_text(part)
            if not text:
                continue
            artifact = Artifact(
                id=make_id(utf8(text)),
                kind='tool_result',
                source=f'tool {part.tool_name!r}',
                chars=len(text),
                tokens=count_tokens(part),
                tool_name=part.tool_name,
                step=m_index,
                media_type=media_type,
            )
            candidate = Candidate(
                artifact,
                m_index,
                p_index,
                text,
                text,
                media_type,
                hints.get(part.tool_call_id, ''),
                files=files,
                source_part=part,
            )
            memo.set(part, (count_tokens, candidate))
            found.append(candidate)
    return found


def _decode(item: Any) -> tuple[bytes, str] | None:
    """Bytes and media type of a file item; None for remote URLs (never fetched) and undecodable data."""
    if isinstance(item, BinaryContent):
        return item.data, item.media_type
    url = getattr(item, 'url', None)
    return decode_data_url(url) if isinstance(url, str) else None


def _name_of(item: Any) -> str | None:
    for attr in ('filename', 'identifier'):
        value = getattr(item, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def find_attachments(messages: Sequence[ModelMessage], *, start: int = 0) -> list[Attachment]:
    """Files attached in user prompts or returned by tools, from message `start` on, not processed yet
    (a processed file is followed by, or replaced with, a sealed text item of ours)."""
    found: list[Attachment] = []
    for m_index in range(start, len(messages)):
        message = messages[m_index]
        if not isinstance(message, ModelRequest):
            continue
        for p_index, part in enumerate(message.parts):
            if not isinstance(part, (UserPromptPart, ToolReturnPart)):
                continue
            content = part.content
            items: list[tuple[int | None, Any]]
            if is_media(content):
                items = [(None, content)]
            elif isinstance(content, (list, tuple)):
                items = list(enumerate(content))
            else:
                continue
            for position, (i_index, item) in enumerate(items):
                if not is_media(item):
                    continue
                following = items[position + 1][1] if position + 1 < len(items) else None
                if isinstance(following, str) and unseal('artifact', following) is not None:
                    continue
                decoded = _decode(item)
                if decoded is None:
                    continue
                data, media_type = decoded
                if media_type.startswith('video/'):
                    continue
                found.append(Attachment(m_index, p_index, i_index, data, media_type, _name_of(item)))
    return found
