"""A large tool return the history already shows: the same content (its artifact id) reduced to the same view
by an earlier return still in the history (a file read again, the same query run twice). Its view would only
repeat what the model has; a short line naming the artifact stands for it instead. Only the newest request is
changed, like every decision of the stage: the earlier view stays where it is."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart

from ..._compat import part_metadata
from ...messages._marks import MARKER_KEY


def view_body(text: str) -> str:
    """What a view shows below its marker line (the line names the call, which a repeat may word apart)."""
    return text.partition('\n')[2]


def shown_before(messages: Sequence[ModelMessage], artifact_id: str, body: str) -> bool:
    """Whether a tool return in `messages`, marked by us with `artifact_id`, shows exactly `body` (newest
    first: a repeat is usually close)."""
    if not body.strip():
        return False
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            content = part.content if isinstance(part, ToolReturnPart) else None
            # the text first (a comparison in C that fails at once), then our marker
            if not isinstance(content, str) or not content.endswith(body) or view_body(content) != body:
                continue
            marker = part_metadata(part).get(MARKER_KEY)
            if isinstance(marker, dict) and marker.get('artifact_id') == artifact_id:
                return True
    return False
