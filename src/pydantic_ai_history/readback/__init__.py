"""The `read_artifact` tool: gives the model back what a stage reduced, exactly, a slice at a time.

It is offered only once the history holds a note or reference line that names it, so a run that never
spills sends the same tool list as a run without this package.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from pydantic_ai import RunContext
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, ToolReturn
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset

from .._compat import TOOLS_HAVE_METADATA, part_metadata, run_id_of
from ..context._context import ARTIFACT_MARKER, default_scope
from ..context._offload import OFF_LOOP_CHARS
from ..messages._marks import MARKER_KEY, READ_ARTIFACT_TOOL, READBACK_TOOL_METADATA
from ..store import ArtifactStore, InvalidArtifactId, StoreError
from ._limits import SEARCH_MAX_ARTIFACTS as SEARCH_MAX_ARTIFACTS
from ._limits import SEARCH_MAX_BYTES as SEARCH_MAX_BYTES
from ._limits import is_text
from ._pages import Page, shrunk_to_fit

if TYPE_CHECKING:
    from ..files import FileResult
    from ._search import Found

__all__ = (
    'MAX_READ_LIMIT',
    'READBACK_TOOLSET_ID',
    'READBACK_TOOL_METADATA',
    'READ_ARTIFACT_TOOL',
    'ReadRoom',
    'ReadbackGate',
    'names_readback',
    'read_artifact_text',
    'readback_toolset',
    'readback_toolset_id',
    'recall_passages',
    'search_artifacts_text',
)

logger = logging.getLogger('pydantic_ai_history')

READBACK_TOOLSET_ID = 'pydantic_ai_history_readback'
"""The read-back toolset's id under the processor's default id (durable engines name activities after it)."""


def readback_toolset_id(capability_id: str | None) -> str:
    """The read-back toolset's id for a processor with `capability_id`: stable, and distinct per processor."""
    return f'{capability_id}_readback' if capability_id else READBACK_TOOLSET_ID


DEFAULT_READ_LIMIT = 20_000
"""Characters a page returns unless the model asks for fewer: a page or so, cheap enough to afford."""
DEFAULT_QUERY_LIMIT = 4_000
"""Characters a query's passages return unless the model asks for more: the two best 2,000-character chunks,
about 1,000 tokens, those holding the query verbatim first (an id or a path asked for is in the answer).
Every later request carries the answer, so a question costs what it returns (benchmarks/RESULTS.md, "Cost
(issue 37)")."""
MAX_READ_LIMIT = 200_000
"""The most characters one call returns, whatever `limit` asks (and less when the request has less room)."""


@dataclass(frozen=True, kw_only=True)
class ReadRoom:
    """How much one read may return: the carrying request's room, shared by parallel reads."""

    max_tokens: int
    """Tokens one read may return, its first line included."""
    count_tokens: Callable[[str], int]
    """Tokens of a text as the serving model counts them."""


async def read_artifact_text(
    store: ArtifactStore,
    artifact_id: str,
    offset: int = 0,
    limit: int | None = None,
    query: str | None = None,
    *,
    scope: str = '',
    room: ReadRoom | None = None,
) -> str:
    """A stored artifact of `scope` from character `offset`, at most `limit` characters (`read_limit`) and
    `room.max_tokens` tokens (its first line says where the next page starts); with `query`, its most relevant
    passages. Errors come back as text the model can act on, never raised (another scope's id reads as
    missing)."""
    text, _, _ = await _read_artifact(store, artifact_id, offset, limit, query, scope=scope, room=room)
    return text


async def _read_artifact(
    store: ArtifactStore,
    artifact_id: str,
    offset: int,
    limit: int | None,
    query: str | None,
    *,
    scope: str,
    room: ReadRoom | None,
) -> tuple[str, Page | None, BinaryContent | None]:
    """`read_artifact_text`, the page it returned (None for an error) and the stored image it shows (an image
    comes back as itself, after a line that says what it is)."""
    try:
        info = await store.info(artifact_id, scope=scope)
        data = await store.get(artifact_id, scope=scope) if info is not None else None
    except InvalidArtifactId:
        return f'Error: {artifact_id!r} is not a valid artifact id.', None, None
    except StoreError as exc:
        return f'Error: the artifact store could not be read: {exc}', None, None
    if info is None or data is None:
        return f'Error: no artifact with id {artifact_id!r} is stored (it may have been evicted).', None, None
    described = f'{artifact_id} ({info.source}, {info.media_type}, {info.size_bytes:,} bytes)'
    if info.media_type.startswith('image/') and not is_text(info.media_type):  # SVG reads as text
        return (
            f'[{described}: the stored image follows]',
            None,
            BinaryContent(data, media_type=info.media_type),
        )
    content = data if is_text(info.media_type) else await _whole_document(data, info.media_type)
    if content is None:
        return f'Artifact {described} is not a document; it cannot be returned as text.', None, None
    read = partial(_read_text, content, artifact_id, offset, read_limit(limit, query), query, room)
    if len(data) > OFF_LOOP_CHARS:  # decoding, ranking and counting a large artifact leave the event loop
        text, page = await anyio.to_thread.run_sync(read)
    else:
        text, page = read()
    return text, page, None


def _read_text(
    content: bytes | str, artifact_id: str, offset: int, limit: int, query: str | None, room: ReadRoom | None
) -> tuple[str, Page]:
    """One read of `content` (the stored bytes of a text, or a document's text), within `limit` and `room`."""
    text = content.decode('utf-8', errors='replace') if isinstance(content, bytes) else content
    if query:
        from ._retrieval import top_passages

        passages = _fitted(partial(top_passages, text, query), limit, room)
        return passages, Page(artifact_id=artifact_id, total=len(text), query=query)
    offset = max(0, offset)
    chunk = text[offset : offset + limit]
    cut_to = room.max_tokens if room is not None and room.count_tokens(chunk) > room.max_tokens else None
    if room is not None and cut_to is not None:
        whole = chunk
        chunk = shrunk_to_fit(lambda n: whole[:n], len(whole), cut_to, room.count_tokens)
    page = Page(artifact_id=artifact_id, start=offset, end=offset + len(chunk), total=len(text))
    return page.text(chunk, room=cut_to), page


def read_limit(limit: int | None, query: str | None) -> int:
    """The characters one read returns: what the model asked for (within 1 and `MAX_READ_LIMIT`), or by
    default a page (`DEFAULT_READ_LIMIT`), or a query's passages (`DEFAULT_QUERY_LIMIT`)."""
    if limit is None:
        return DEFAULT_QUERY_LIMIT if query else DEFAULT_READ_LIMIT
    return max(1, min(limit, MAX_READ_LIMIT))


async def search_artifacts_text(
    store: ArtifactStore,
    query: str,
    limit: int | None = None,
    *,
    scope: str = '',
    room: ReadRoom | None = None,
    tool_name: str = READ_ARTIFACT_TOOL,
) -> str:
    """The passages most relevant to `query` in everything `scope` has stored, best first, at most `limit`
    characters (and `room.max_tokens` tokens), each headed by its artifact and how to read on with
    `tool_name`. Errors come back as text."""
    from ._search import search_scope  # loaded by the first search, not with the package

    limit = read_limit(limit, query)
    try:
        found = await search_scope(store, scope, query, limit)
    except StoreError as exc:
        return f'Error: the stored artifacts cannot be searched ({exc}); read them by artifact_id.'
    answer_within = partial(_search_answer, found, query, tool_name, None)
    return await anyio.to_thread.run_sync(_fitted, answer_within, limit, room)


async def recall_passages(
    store: ArtifactStore,
    question: str,
    limit: int,
    *,
    opening: str,
    scope: str = '',
    tool_name: str = READ_ARTIFACT_TOOL,
) -> str | None:
    """The passages of what `scope` stored that best match `question`, as `search_artifacts_text` finds them,
    under `opening` (the question is not echoed), within `limit` characters; None when nothing matches or the
    store cannot be searched (a recall is a help, never an error the model must read)."""
    from ._search import search_scope

    try:
        found = await search_scope(store, scope, question, limit)
    except StoreError:
        logger.warning('the stored artifacts cannot be searched: no passages recalled', exc_info=True)
        return None
    if not found.passages:
        return None
    return await anyio.to_thread.run_sync(partial(_search_answer, found, question, tool_name, opening, limit))


def _fitted(answer_within: Callable[[int], str], limit: int, room: ReadRoom | None) -> str:
    """`answer_within(limit)`, asked again for fewer characters (down to 200) until it fits `room`."""
    if room is None:
        return answer_within(limit)
    return shrunk_to_fit(answer_within, limit, room.max_tokens, room.count_tokens, floor=200)


def _search_answer(found: Found, query: str, tool_name: str, opening: str | None, limit: int) -> str:
    """The passages `found` for `query` within `limit` characters, under `opening` (by default a line that
    names the query and how many passages and artifacts there are)."""
    from ._search import select_passages

    searched = found.searched
    note = (
        f' {found.skipped} stored file(s) (documents, images, or past the search limits) were not searched.'
        if found.skipped
        else ''
    )
    if not found.passages:
        return f'[no stored passage matched {query!r} in {len(searched)} artifact(s).{note}]'
    pieces: list[str] = []
    used = 200  # the first line
    for passage in select_passages(found.passages, limit):
        info, length = searched[passage.document].info, searched[passage.document].length
        described = info.metadata.get('call') or info.source
        piece = (
            f'[{info.artifact_id} ({described}): characters {passage.start:,}-{passage.end:,} of {length:,}; '
            f'{tool_name}(artifact_id="{info.artifact_id}", offset={passage.start}) reads on]\n'
            + passage.text.strip('\n')
        )
        if used + len(piece) + 2 > limit:
            if pieces:
                continue  # the headers count too: the answer stays within `limit`
            piece = piece[: max(limit - used - 2, 0)]
        pieces.append(piece)
        used += len(piece) + 2
    if opening is None:
        opening = f'[{len(pieces)} passage(s) for {query!r} from {len(searched)} stored artifact(s).{note}]'
    return '\n\n'.join([opening, *pieces])


async def _whole_document(data: bytes, media_type: str) -> str | None:
    """The full markdown of a stored document (PDF, DOCX, ...); None for images, audio, unreadable bytes."""
    if media_type.startswith(('image/', 'audio/', 'video/')):
        return None
    from ..files import ConvertedDocument  # the file readers load with the first document read back

    result = await anyio.to_thread.run_sync(partial(_read_in_full, data, media_type))
    return result.text if isinstance(result, ConvertedDocument) else None


def _read_in_full(data: bytes, media_type: str) -> FileResult:
    """Read-back converts a stored document in full: the model asked for what the history only previewed."""
    from ..files import FileSettings, read_file  # the readers load on first use: here, off the event loop

    no_cuts = FileSettings(
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
    return read_file(data, media_type=media_type, settings=no_cuts)


_READBACK_CALL = '(artifact_id='
"""How a note of ours calls the read-back tool, whatever it is named."""


def names_readback(message: ModelMessage) -> bool:
    """Whether `message` (a request: every such note is written into one) holds something `read_artifact` can
    read: a part we marked with an artifact id, an artifact note, or a compaction's transcript reference."""
    if not isinstance(message, ModelRequest):
        return False
    for part in message.parts:
        marker = part_metadata(part).get(MARKER_KEY)
        if isinstance(marker, dict) and marker.get('artifact_id'):  # an id with nothing stored names none
            return True
        content = getattr(part, 'content', None)
        texts: Sequence[Any] = (
            (content,) if isinstance(content, str) else content if isinstance(content, (list, tuple)) else ()
        )
        for text in texts:
            if isinstance(text, str) and _names_readback(text):
                return True
    return False


_NOTE_CHARS = 65_536
"""Our notes are short, or open with their marker: of a longer text only both ends are read (a scan of a
200 MB tool return on the event loop would stall it)."""


def _names_readback(text: str) -> bool:
    if len(text) > _NOTE_CHARS:
        text = text[: _NOTE_CHARS // 2] + '\n' + text[-_NOTE_CHARS // 2 :]
    return ARTIFACT_MARKER in text or _READBACK_CALL in text


@dataclass
class _Scan:
    """How far one history was read, and whether it named the tool so far."""

    found: bool
    length: int
    first: weakref.ReferenceType[Any] | None
    """The history's first message: another object there means another history that reuses the list's id."""
    last: weakref.ReferenceType[Any] | None
    """The last message read: when the history still holds it at `length - 1`, only what follows is new."""

    def same_history(self, messages: Sequence[ModelMessage]) -> bool:
        return bool(messages) and self.first is not None and self.first() is messages[0]

    def unread_from(self, messages: Sequence[ModelMessage]) -> int:
        """Where reading resumes: after the last message read when it is still in place, else 0."""
        if not 0 < self.length <= len(messages) or self.last is None:
            return 0
        return self.length if messages[self.length - 1] is self.last() else 0


@dataclass(kw_only=True)
class ReadbackGate:
    """Decides, per request, whether the run's history names `read_artifact`; reads each message about once.

    Each history list is remembered by identity with how far it was read, so only appended messages are
    read; `observe` covers notes the processor wrote mid-history. Once a run named the tool it keeps it,
    even after the window drops the note: a tool list that comes and goes breaks the prompt cache.
    """

    run_key: Callable[[Any], str | None] = run_id_of
    """The run a `RunContext` belongs to (the processor's key, which also knows pydantic-ai 1.0's runs)."""
    predict: Callable[[Any, Sequence[ModelMessage]], bool | Awaitable[bool]] | None = None
    """Whether processing the history about to be sent will certainly write such a note (the processor asks
    its stages): tools are prepared before the processor runs, and the note's own request should offer it."""
    offered_always: Callable[[Any], bool] | None = None
    """Runs offered the tool from their first request, without reading their history: durable workflow
    code, whose tool list must not depend on what this process remembers (a replay runs again where the
    run's later requests were seen) nor make journaled calls to predict a note."""
    max_tracked: int = 1_024
    """Histories and runs remembered at once (the least recently used are forgotten first)."""
    _scans: OrderedDict[int, _Scan] = field(default_factory=OrderedDict, repr=False)
    _runs: OrderedDict[str, None] = field(default_factory=OrderedDict, repr=False)

    def needed(self, messages: Sequence[ModelMessage], run: str | None = None) -> bool:
        """Whether `messages` (of `run`) holds a note that names the read-back tool, or the run's did."""
        if run is not None and run in self._runs:
            return True
        scan = self._scans.pop(id(messages), None)
        if scan is None or not scan.same_history(messages):
            scan = _Scan(False, 0, None, None)
        if not scan.found:
            start = scan.unread_from(messages)
            scan.found = any(names_readback(m) for m in messages[start:])
        scan.length = len(messages)
        scan.last = _weak(messages[-1]) if messages else None
        if messages and not scan.same_history(messages):
            scan.first = _weak(messages[0])
        _remember(self._scans, id(messages), scan, self.max_tracked)
        if scan.found and run is not None:
            _remember(self._runs, run, None, self.max_tracked)
        return scan.found

    def observe(self, ctx: Any, before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> None:
        """Note what the processor turned `before` into, for the run of `ctx` (only new messages are read)."""
        run = self.run_key(ctx) if ctx is not None and before is not after else None
        if run is None or run in self._runs:
            return
        kept = {id(m) for m in before}
        if any(names_readback(m) for m in after if id(m) not in kept):
            _remember(self._runs, run, None, self.max_tracked)

    async def offered(self, ctx: RunContext[Any]) -> bool:
        """Whether the run's request at `ctx` offers the read-back tool: once there is something to read."""
        if self.offered_always is not None and self.offered_always(ctx):
            return True
        messages = ctx.messages
        if self.needed(messages, self.run_key(ctx)):
            return True
        if self.predict is None:
            return False
        predicted = self.predict(ctx, messages)
        return bool(await predicted if inspect.isawaitable(predicted) else predicted)

    async def prepare(self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        """A prepare function that offers `tool_defs` while `offered` says so, else none."""
        return tool_defs if await self.offered(ctx) else []


def _remember(memory: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    memory.pop(key, None)
    memory[key] = value
    while len(memory) > limit:
        memory.popitem(last=False)


def _weak(message: object) -> weakref.ReferenceType[Any] | None:
    try:
        return weakref.ref(message)
    except TypeError:  # a message type without weak references: read the whole history next time
        return None


@dataclass
class _GatedToolset(WrapperToolset[Any]):
    """`wrapped`'s tools while `gate` offers them, else none: asked before `wrapped` lists its tools, so a run
    that has nothing to read back pays one question per step, not a listing filtered away."""

    gate: ReadbackGate = field(kw_only=True)
    """Whether the run's history names the read-back tool (or a stage will certainly write a note that
    does)."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        if not await self.gate.offered(ctx):
            return {}
        return await self.wrapped.get_tools(ctx)


def readback_toolset(
    store: ArtifactStore,
    *,
    scope: Callable[[RunContext[Any]], str] | None = None,
    gate: ReadbackGate | None = None,
    toolset_id: str = READBACK_TOOLSET_ID,
    room: Callable[[RunContext[Any]], ReadRoom | None] | None = None,
    tool_name: str = READ_ARTIFACT_TOOL,
) -> AbstractToolset[Any]:
    """A toolset with one tool, `read_artifact` (or `tool_name`), reading from `store` in the scope
    `scope(ctx)` names (default `default_scope`), offered only while `gate` says so (share one gate across
    toolsets serving the same runs). The tool carries `READBACK_TOOL_METADATA`; `room(ctx)` bounds each read
    by the carrying request's room; `toolset_id` is the inner function toolset's stable id.
    """
    toolset: FunctionToolset[Any] = FunctionToolset(id=toolset_id)
    scope_of = scope if scope is not None else default_scope

    async def read_artifact(
        ctx: RunContext[Any],
        artifact_id: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        query: str | None = None,
    ) -> str | ToolReturn:
        """Read back content that was shortened or removed from the conversation to save space.

        The answer is also bounded by the room the conversation has left (parallel reads share it); its
        first line says which characters it returned and the offset of the next page.

        Args:
            artifact_id: the id given in the note that replaced the content (starts with `art_`). Leave it
                out, with a `query`, to search everything removed from this conversation.
            offset: the character to start from.
            limit: at most how many characters to return (by default 20,000, or 4,000 of passages for a
                query; never more than 200,000).
            query: if given, return the passages most relevant to this question instead of a slice.
        """
        bound = room(ctx) if room is not None else None
        if not artifact_id:
            if not query:
                return 'Error: give an artifact_id to read, or a query to search everything stored.'
            return await search_artifacts_text(
                store, query, limit, scope=scope_of(ctx), room=bound, tool_name=tool_name
            )
        text, page, image = await _read_artifact(
            store, artifact_id, offset, limit, query, scope=scope_of(ctx), room=bound
        )
        if image is not None:  # sent beside the return, as pydantic-ai sends a tool's files on every version
            return ToolReturn(return_value=text, content=[image])
        # the page, in metadata the model never sees: a stage can cut it shorter without storing a copy
        return text if page is None else ToolReturn(return_value=text, metadata=page.metadata())

    if TOOLS_HAVE_METADATA:
        toolset.add_function(read_artifact, name=tool_name, metadata=dict(READBACK_TOOL_METADATA))
    else:  # pydantic-ai 1.0
        toolset.add_function(read_artifact, name=tool_name)
    return _GatedToolset(toolset, gate=gate if gate is not None else ReadbackGate())
