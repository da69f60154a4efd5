"""The `read_artifact` tool: gives the model back what a stage reduced, exactly, a slice at a time."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import anyio.to_thread
from pydantic_ai import RunContext
from pydantic_ai.toolsets import FunctionToolset

from ._context import default_scope
from .files import ConvertedDocument, FileSettings, read_file
from .store import ArtifactStore, InvalidArtifactId, StoreError

__all__ = ('READ_ARTIFACT_TOOL', 'read_artifact_text', 'readback_toolset')

READ_ARTIFACT_TOOL = 'read_artifact'
DEFAULT_READ_LIMIT = 20_000
"""Characters returned per call unless the model asks for fewer: a page or so, cheap enough to afford."""


async def read_artifact_text(
    store: ArtifactStore,
    artifact_id: str,
    offset: int = 0,
    limit: int = DEFAULT_READ_LIMIT,
    query: str | None = None,
    *,
    scope: str = '',
) -> str:
    """The text of a stored artifact of `scope` from character `offset`, at most `limit` characters.

    With `query`, the passages most relevant to it are returned instead of a positional slice.
    Errors come back as text the model can act on, never as exceptions that would end the run. An id
    stored in another scope is answered exactly like a missing one.
    """
    try:
        info = await store.info(artifact_id, scope=scope)
        data = await store.get(artifact_id, scope=scope) if info is not None else None
    except InvalidArtifactId:
        return f'Error: {artifact_id!r} is not a valid artifact id.'
    except StoreError as exc:
        return f'Error: the artifact store could not be read: {exc}'
    if info is None or data is None:
        return f'Error: no artifact with id {artifact_id!r} is stored (it may have been evicted).'
    if info.media_type.startswith('text/') or info.media_type in _TEXT_TYPES:
        text = data.decode('utf-8', errors='replace')
    else:
        document = await _whole_document(data, info.media_type)
        if document is None:
            return (
                f'Artifact {artifact_id} ({info.source}, {info.media_type}, {info.size_bytes:,} bytes) '
                'is not a document; it cannot be returned as text.'
            )
        text = document
    limit = max(1, min(limit, 200_000))
    if query:
        from .retrieval import top_passages

        return top_passages(text, query, max_chars=limit)
    offset = max(0, offset)
    chunk = text[offset : offset + limit]
    end = offset + len(chunk)
    more = f' Call again with offset={end} for more.' if end < len(text) else ''
    return f'[{artifact_id}: characters {offset:,}-{end:,} of {len(text):,}.{more}]\n{chunk}'


_TEXT_TYPES = frozenset(
    {'application/json', 'application/xml', 'application/x-ndjson', 'application/yaml', 'image/svg+xml'}
)

_NO_CUTS = FileSettings(
    max_tokens=10**12,
    text_max_lines=10**12,
    text_max_line_chars=10**12,
    table_head_rows=10**12,
    table_max_columns=10**6,
    table_max_cell_chars=10**12,
    struct_max_depth=10**3,
    struct_max_items=10**12,
    struct_max_keys=10**12,
    struct_max_string_chars=10**12,
)
"""Read-back converts a stored document in full: the model asked for what the history only previewed."""


async def _whole_document(data: bytes, media_type: str) -> str | None:
    """The full markdown of a stored document (PDF, DOCX, ...); None for images, audio, unreadable bytes."""
    if media_type.startswith(('image/', 'audio/', 'video/')):
        return None
    result = await anyio.to_thread.run_sync(
        partial(read_file, data, media_type=media_type, settings=_NO_CUTS)
    )
    return result.text if isinstance(result, ConvertedDocument) else None


def readback_toolset(
    store: ArtifactStore, *, scope: Callable[[RunContext[Any]], str] | None = None
) -> FunctionToolset[Any]:
    """A toolset with one tool, `read_artifact`, reading from `store` in the scope `scope(ctx)` names."""
    toolset: FunctionToolset[Any] = FunctionToolset()
    scope_of = scope if scope is not None else default_scope

    async def read_artifact(
        ctx: RunContext[Any],
        artifact_id: str,
        offset: int = 0,
        limit: int = DEFAULT_READ_LIMIT,
        query: str | None = None,
    ) -> str:
        """Read back content that was shortened or removed from the conversation to save space.

        Args:
            artifact_id: the id given in the note that replaced the content (starts with `art_`).
            offset: the character to start from.
            limit: how many characters to return (at most 200,000).
            query: if given, return the passages most relevant to this question instead of a slice.
        """
        return await read_artifact_text(store, artifact_id, offset, limit, query, scope=scope_of(ctx))

    toolset.add_function(read_artifact, name=READ_ARTIFACT_TOOL)
    return toolset
