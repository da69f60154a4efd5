"""Finding the artifacts of a history: tool returns and attached files, with where they live."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core

from ..._compat import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    part_metadata,
)
from ..._context import MARKER_KEY
from ...pinning import TEXT_MARKERS
from ...store import artifact_id
from ._models import Artifact, ArtifactKind

__all__ = (
    'ARTIFACT_MARKER',
    'Attachment',
    'Candidate',
    'find_attachments',
    'find_candidates',
    'latest_question',
)

ARTIFACT_MARKER = '[pydantic-ai-history: artifact'
"""Opening of every text this stage writes in place of an artifact; how processed content is recognised
where there is no metadata (user prompt content)."""


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
    in_current_request: bool
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
    in_current_request: bool

    @property
    def id(self) -> str:
        return artifact_id(self.data)


def is_processed(part: Any) -> bool:
    ours = part_metadata(part).get(MARKER_KEY)
    if isinstance(ours, dict) and 'artifact_id' in ours:
        return True
    content = getattr(part, 'content', None)
    return isinstance(content, str) and content.startswith(ARTIFACT_MARKER)


def is_media(item: Any) -> bool:
    return isinstance(item, BinaryContent) or (hasattr(item, 'url') and hasattr(item, 'media_type'))


def tool_return_text(part: ToolReturnPart) -> tuple[str, str, tuple[Any, ...]]:
    """The text the model sees for a tool return (JSON for structured content), its media type, its files."""
    content = part.content
    if isinstance(content, str):
        return content, 'text/plain', ()
    if isinstance(content, (list, tuple)) and any(is_media(i) for i in content):
        files = tuple(i for i in content if is_media(i))
        rest = [i for i in content if not is_media(i) and type(i).__name__ != 'CachePoint']
        if all(isinstance(i, str) for i in rest):
            return '\n'.join(rest), 'text/plain', files
        return _json(rest), 'application/json', files
    try:
        text = part.model_response_str()
    except Exception:
        text = _json(content)
    return text, 'application/json', ()


def _json(value: Any) -> str:
    return pydantic_core.to_json(value, fallback=str).decode()


def _call_hints(messages: Sequence[ModelMessage]) -> dict[str, str]:
    """Tool call id -> the string values of its arguments (a search query is a good extraction hint)."""
    hints: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                try:
                    args = part.args_as_dict()
                except Exception:
                    continue
                hints[part.tool_call_id] = ' '.join(
                    str(v) for v in args.values() if isinstance(v, (str, int, float))
                )
    return hints


def find_candidates(
    messages: Sequence[ModelMessage], *, count_tokens: Any, exempt_tools: frozenset[str], start: int = 0
) -> list[Candidate]:
    """Every unprocessed tool return from message `start` on, as a `Candidate`.

    `count_tokens(part)` prices the part as it stands. Only messages from `start` are read (the call hints
    from the response before it), so looking at the current request alone costs nothing per older message.
    """
    last = len(messages) - 1
    hints = _call_hints(messages[max(start - 1, 0) :])
    found: list[Candidate] = []
    for m_index in range(start, len(messages)):
        message = messages[m_index]
        if not isinstance(message, ModelRequest):
            continue
        for p_index, part in enumerate(message.parts):
            if not isinstance(part, ToolReturnPart) or part.tool_name in exempt_tools or is_processed(part):
                continue
            text, media_type, files = tool_return_text(part)
            if not text:
                continue
            artifact = Artifact(
                id=artifact_id(text.encode()),
                kind='tool_result',
                source=f'tool {part.tool_name!r}',
                chars=len(text),
                tokens=count_tokens(part),
                tool_name=part.tool_name,
                step=m_index,
                media_type=media_type,
            )
            found.append(
                Candidate(
                    artifact,
                    m_index,
                    p_index,
                    text,
                    text,
                    media_type,
                    m_index == last,
                    hints.get(part.tool_call_id, ''),
                    files=files,
                    source_part=part,
                )
            )
    return found


def _decode(item: Any) -> tuple[bytes, str] | None:
    """Bytes and media type of a file item; None for remote URLs (never fetched) and undecodable data."""
    if isinstance(item, BinaryContent):
        return item.data, item.media_type
    url = getattr(item, 'url', '')
    if not isinstance(url, str) or not url.startswith('data:'):
        return None
    header, _, payload = url.partition(',')
    media_type = header[5:].split(';', 1)[0] or 'application/octet-stream'
    try:
        data = base64.b64decode(payload, validate=False) if ';base64' in header else payload.encode()
    except ValueError:
        return None
    return data, media_type


def _name_of(item: Any) -> str | None:
    for attr in ('filename', 'identifier'):
        value = getattr(item, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def find_attachments(messages: Sequence[ModelMessage], *, start: int = 0) -> list[Attachment]:
    """Files attached in user prompts or returned by tools, from message `start` on, not processed yet.

    A processed file is followed by (or replaced with) a text item opening with `ARTIFACT_MARKER`.
    """
    last = len(messages) - 1
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
                if isinstance(following, str) and following.startswith(ARTIFACT_MARKER):
                    continue
                decoded = _decode(item)
                if decoded is None:
                    continue
                data, media_type = decoded
                if media_type.startswith('video/'):
                    continue
                found.append(
                    Attachment(m_index, p_index, i_index, data, media_type, _name_of(item), m_index == last)
                )
    return found


_OURS = (ARTIFACT_MARKER, *TEXT_MARKERS.values())


def latest_question(messages: Sequence[ModelMessage]) -> str:
    """The text of the latest user prompt (what the current request is answering)."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart):
                content = part.content
                if isinstance(content, str):
                    if not content.startswith(_OURS):
                        return content
                    continue
                texts = [c for c in content if isinstance(c, str) and not c.startswith(_OURS)]
                if texts:
                    return '\n'.join(texts)
    return ''


def kind_of_media(media_type: str) -> ArtifactKind:
    if media_type.startswith('image/'):
        return 'image'
    if media_type.startswith('audio/'):
        return 'audio'
    return 'document'
