"""The `read_artifact` tool: gives the model back what a stage reduced, exactly, a slice at a time."""

from __future__ import annotations

from typing import Any

from pydantic_ai.toolsets import FunctionToolset

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
) -> str:
    """The text of a stored artifact from character `offset`, at most `limit` characters.

    With `query`, the passages most relevant to it are returned instead of a positional slice.
    Errors come back as text the model can act on, never as exceptions that would end the run.
    """
    try:
        info = await store.info(artifact_id)
        data = await store.get(artifact_id) if info is not None else None
    except InvalidArtifactId:
        return f'Error: {artifact_id!r} is not a valid artifact id.'
    except StoreError as exc:
        return f'Error: the artifact store could not be read: {exc}'
    if info is None or data is None:
        return f'Error: no artifact with id {artifact_id!r} is stored (it may have been evicted).'
    if not (info.media_type.startswith('text/') or info.media_type in _TEXT_TYPES):
        return (
            f'Artifact {artifact_id} ({info.source}, {info.media_type}, {info.size_bytes:,} bytes) '
            'is binary; it cannot be returned as text.'
        )
    text = data.decode('utf-8', errors='replace')
    limit = max(1, min(limit, 200_000))
    if query:
        from .retrieval import top_passages

        return top_passages(text, query, max_chars=limit)
    offset = max(0, offset)
    chunk = text[offset : offset + limit]
    end = offset + len(chunk)
    more = f' Call again with offset={end} for more.' if end < len(text) else ''
    return f'[{artifact_id}: characters {offset:,}-{end:,} of {len(text):,}.{more}]\n{chunk}'


_TEXT_TYPES = frozenset({'application/json', 'application/xml', 'application/x-ndjson', 'application/yaml'})


def readback_toolset(store: ArtifactStore) -> FunctionToolset[Any]:
    """A toolset with one tool, `read_artifact`, reading from `store`."""
    toolset: FunctionToolset[Any] = FunctionToolset()

    async def read_artifact(
        artifact_id: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT, query: str | None = None
    ) -> str:
        """Read back content that was shortened or removed from the conversation to save space.

        Args:
            artifact_id: the id given in the note that replaced the content (starts with `art_`).
            offset: the character to start from.
            limit: how many characters to return (at most 200,000).
            query: if given, return the passages most relevant to this question instead of a slice.
        """
        return await read_artifact_text(store, artifact_id, offset, limit, query)

    toolset.add_function(read_artifact, name=READ_ARTIFACT_TOOL)
    return toolset
