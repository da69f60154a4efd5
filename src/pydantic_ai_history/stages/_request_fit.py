"""Fitting the newest request into its room: what it carries is reduced, never its structure.

When the newest request alone is over its room (`_room.request_room`), its pieces (`_pieces`: tool returns'
texts, the user's texts, files in either) are planned against that room (`plan_fit`): files past their
share are stored and named by a line, the largest texts are cut to one shared level ("water filling"), each
stored then replaced by its passages most relevant to the question under the id that reads it back. When
that level is below what a note costs, the tiny texts are stored together behind one note: each tool return
keeps a pointer (`[#k]`), so every call still has its return; the user's question keeps its place. Used by
the artifact stage and the window; only the newest request changes (no provider has cached it). A piece the
store refuses is reduced all the same, its note says it is lost, and `ContentLost` says what is gone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from .._compat import make_request
from ..budget._room import kept_tokens, request_room, window_room
from ..context._context import ARTIFACT_MARKER, HistoryContext
from ..context._offload import OFF_LOOP_CHARS, large_content
from ..events import ArtifactProcessed
from ..messages._marks import marker_kind, part_kinds, readback_tool, seal, sealed_kind
from ..messages._utf8 import utf8
from ..readback._pages import Page, shrunk_to_fit
from ..tokens import TokenCounter, TokenEstimate
from ._pieces import (
    NOT_STORED,
    POINTER_TOKENS,
    FitPlan,
    Piece,
    Replacement,
    call_hints,
    corrected,
    plan_fit,
    replace_pieces,
    request_pieces,
    stored_marker,
)

_PASSES = 3
"""Reductions are measured after they are made; a request still over its room is reduced again this often."""
_PAGE_HEADER_TOKENS = 48
"""What a read-back page's first line costs."""


_QUESTION_CHARS = 4_000
"""A longer user message stands for its question by its beginning and its end (it is a pasted document)."""


def latest_question(messages: Sequence[ModelMessage]) -> str:
    """The latest user prompt's text (what the current request answers), its beginning and end when long."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest) or marker_kind(message) is not None:
            continue
        for part, kind in zip(reversed(message.parts), reversed(part_kinds(message)), strict=True):
            if isinstance(part, UserPromptPart) and kind is None:
                content = part.content
                texts = (
                    [content]
                    if isinstance(content, str)
                    else [c for c in content if isinstance(c, str) and sealed_kind(c) is None]
                )
                if texts:
                    text, half = '\n'.join(texts), _QUESTION_CHARS // 2
                    return text if len(text) <= _QUESTION_CHARS else f'{text[:half]}\n{text[-half:]}'
    return ''


# ---- texts -------------------------------------------------------------------------------------------------


def _how_to_read(stored: bool, call: str) -> str:
    """How the model gets the rest: `call` when the original is stored, else that what is not shown is lost
    (a note never names a read-back that cannot answer)."""
    return (
        f'{call} reads the rest' if stored else 'the original could not be stored: what is not shown is lost'
    )


def passages_within(
    text: str, head: str, query: str, max_tokens: int, counter: TokenCounter, *, chunk_chars: int = 2_000
) -> str:
    """`head` and the passages of `text` most relevant to `query` (its opening ones when nothing matches),
    within `max_tokens` (corrected)."""
    correction = counter.tokenizer_profile.correction
    chars_per_token = len(text) / max(counter.count_text(text), 1)
    room = max_tokens / correction - counter.count_text(head) - 4
    target = max(int(room * chars_per_token), 200)
    from ..readback._retrieval import rank_passages  # loaded by the first extraction, not with the package

    ranking = rank_passages(text, query, chunk_chars=min(chunk_chars, max(target // 3, 300)))
    cost = functools.partial(corrected, counter)
    return shrunk_to_fit(lambda n: head + ranking.select(n).text, target, max_tokens, cost, floor=200)


SHOWN_QUERY_CHARS = 80
"""How much of the query a view's first line repeats: what its passages were chosen for, not the whole of it
(every later request re-reads the line)."""


def showing_passages(query: str) -> str:
    """What a view's first line says it shows: the passages most relevant to the query's opening words (its
    beginning for an empty query)."""
    shown = ' '.join(query.split())[:SHOWN_QUERY_CHARS]
    return f'showing the passages most relevant to {shown!r}' if shown else 'showing its beginning'


_PROMPT_HEAD_SHARE = 0.25
"""The share of a reduced user message given to its beginning; its passages most relevant to its question
(its last lines) get the rest."""


def reduced_text(
    item: Piece, artifact_id: str, max_tokens: int, query: str, counter: TokenCounter, stored: bool
) -> str:
    """What stands for `item` within `max_tokens`: a header naming the stored original, then its passages most
    relevant to `query` (a user's message: its beginning, then the passages relevant to its last lines)."""
    if item.tool_name is None:
        query = _last_lines(item.text)
        showing = 'showing its beginning, then its passages most relevant to its last paragraph'
    else:
        showing = showing_passages(query)
    head = (
        f'{ARTIFACT_MARKER} of {item.source}, {len(item.text):,} characters, '
        f'~{item.tokens:,} tokens, more than this request has room for | {showing} | '
        f'{_how_to_read(stored, f"{readback_tool()}(artifact_id={artifact_id!r}, offset=0, query=...)")}]\n'
    )
    if item.tool_name is None:
        head += _beginning(item.text, int(max_tokens * _PROMPT_HEAD_SHARE), counter)
    return passages_within(item.text, head, query, max_tokens, counter)


def _last_lines(text: str, max_chars: int = 500) -> str:
    """The question a long message asks: its last paragraph (a pasted document usually comes first)."""
    tail = text.rstrip()[-max_chars:]
    for separator in ('\n\n', '\n'):
        if separator in tail:
            return tail.rsplit(separator, 1)[1]
    return tail


def _beginning(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """The first lines of `text` within about `max_tokens`, with where they end."""
    chars = int(max_tokens * len(text) / max(counter.count_text(text), 1))
    cut = text.rfind('\n', chars // 2, chars)
    shown = text[: cut if cut > 0 else chars]
    return f'[its beginning, characters 0-{len(shown):,} of {len(text):,}]\n{shown}\n'


def group_data(items: Sequence[Piece]) -> bytes:
    """What a group stores: one JSON line per text, in order (`#`, the tool or null for the user's message,
    call id, content)."""
    lines = (
        json.dumps(
            {'#': n, 'tool': i.tool_name, 'tool_call_id': i.tool_call_id, 'content': i.text},
            ensure_ascii=False,
        )
        for n, i in enumerate(items, 1)
    )
    return utf8('\n'.join(lines))


def group_note(
    items: Sequence[Piece],
    data: bytes,
    artifact_id: str,
    max_tokens: int,
    query: str,
    counter: TokenCounter,
    stored: bool,
) -> str:
    """The note the first grouped text carries: what the group holds, how to read it, and a preview."""
    chars = sum(len(i.text) for i in items)
    tokens = sum(i.tokens for i in items)
    returns = sum(1 for i in items if i.kind == 'tool')
    what = ', '.join(
        f'{n:,} {name}'
        for n, name in ((returns, 'tool returns'), (len(items) - returns, "texts of the user's message"))
        if n
    )
    kept = (
        'they are stored together, one JSON line each ("#", "tool", "tool_call_id", "content"), each tool '
        f"return keeps its [#number] | {readback_tool()}(artifact_id='{artifact_id}', query=...) finds any "
        'of them, offset=... pages through'
        if stored
        else 'they could not be stored: what is not shown is lost; each tool return keeps its [#number]'
    )
    head = (
        f'[#1] {ARTIFACT_MARKER} {artifact_id} | {what} of this request, #1 to #{len(items)} '
        f'({chars:,} characters, ~{tokens:,} tokens), are more than it has room for: {kept}]\n'
    )
    return passages_within(data.decode('utf-8', 'replace'), head, query, max_tokens, counter)


def file_line(piece: Piece, artifact_id: str, stored: bool) -> str:
    """The line standing for a stored file: what it was, what it cost, how to get it back."""
    how = (
        f"{readback_tool()}(artifact_id='{artifact_id}') shows it again"
        if stored
        else 'it could not be stored: it is lost'
    )
    return (
        f'{ARTIFACT_MARKER} {artifact_id} | {piece.source}, ~{piece.tokens:,} tokens, more than this request '
        f'has room for | {how}]'
    )


# ---- applying ----------------------------------------------------------------------------------------------

_Place = tuple[int, 'int | None']
"""Where a replacement goes in the newest request: the part's index, and the item's index in its content."""


def newest_room(
    messages: Sequence[ModelMessage], estimate: TokenEstimate, context: HistoryContext, *, floor: int | None
) -> tuple[int, int] | None:
    """The newest request's room and the most it can carry once the window drops all it may (`window_room`);
    None when it is within its room. `floor`: the least room it gets (`request_room`); None: the window's."""
    kept = kept_tokens(
        messages,
        estimate.per_message,
        estimate.overhead,
        keep_first_user_message=context.keep_first_user_message,
    )
    most = window_room(context.limits, kept=kept)
    newest = estimate.per_message[-1]
    room = most
    if floor is not None:
        room = request_room(context.limits, others=estimate.total - newest, kept=kept, floor=floor)
    return (room, most) if newest > room else None


async def fit_newest(
    messages: list[ModelMessage],
    rooms: tuple[int, int] | None,
    context: HistoryContext,
    *,
    stage: str,
) -> list[ModelMessage]:
    """`messages` with the newest request cut to its room (`rooms`: `newest_room`'s answer)."""
    if rooms is None:
        return messages
    room, most = rooms
    return await fit_request(messages, room, context, query=latest_question(messages), stage=stage, most=most)


async def fit_request(
    messages: list[ModelMessage],
    room: int,
    context: HistoryContext,
    *,
    query: str,
    stage: str,
    most: int | None = None,
) -> list[ModelMessage]:
    """`messages` with the newest request's pieces reduced to at most `room` tokens (every call keeps its
    return, the user's question its place); `messages` itself when it fits or nothing can be cut. What the
    store cannot keep is cut only as far as `most` (what the request can carry once the window drops what it
    may) requires."""
    request = messages[-1]
    if not isinstance(request, ModelRequest):
        return messages
    counter = context.counter
    hints = call_hints(messages[-2:-1])
    if large_content([request]):
        pieces = await context.off_loop(request_pieces, request, counter, hints)
    else:
        pieces = request_pieces(request, counter, hints)
    fit = _Fit(pieces, context, query=query, stage=stage)
    plan, current = await _fitted(fit, request, room)
    if plan is not None and most is not None and most > room and fit.unstored(plan):
        room = most
        plan, current = await _fitted(fit, request, room)
    before = counter.count_message(request)
    if plan is None or counter.count_message(current) >= before:
        return messages  # nothing to cut, or notes that cost more than what they would replace
    fit.report(plan, reason=f'the newest request is {before:,} tokens, over its room of {room:,} ({stage})')
    return [*messages[:-1], current]


async def _fitted(fit: _Fit, request: ModelRequest, room: int) -> tuple[FitPlan | None, ModelRequest]:
    """The plan that brings `request` within `room` and the request it makes; None when nothing is cut."""
    counter = fit.context.counter
    pieces = fit.pieces
    target = room - (counter.count_message(request) - sum(piece.tokens for piece in pieces))
    plan = FitPlan({})
    current = request
    for _ in range(_PASSES):
        plan = plan_fit(pieces, target)
        if plan.empty:
            return None, request
        current = _replaced(request, await fit.replacements(plan))
        after = counter.count_message(current)
        if after <= room:
            break
        target -= after - room  # the notes came out larger than planned: plan for less
    return plan, current


class _Fit:
    """The reductions of one request's pieces: each original stored once, rendered per plan."""

    def __init__(self, pieces: Sequence[Piece], context: HistoryContext, *, query: str, stage: str) -> None:
        self.pieces = pieces
        self.context = context
        self.query = query
        self.stage = stage
        self.stored: dict[int, tuple[str, bool]] = {}
        """Piece index -> its artifact id and whether the store kept it."""
        self.group: tuple[tuple[int, ...], str, bool] | None = None
        """The grouped pieces, their artifact id, and whether the store kept them."""
        self.texts: dict[int, str] = {}
        """Piece index -> its text in the latest plan (the group's note under the first grouped piece)."""

    async def replacements(self, plan: FitPlan) -> dict[_Place, Replacement]:
        out: dict[_Place, Replacement] = {}
        self.texts = {}
        for index in (*plan.caps, *plan.stubbed):
            piece = self.pieces[index]
            if index in plan.caps:
                text, strategy = await self._piece(index, plan.caps[index])
            else:
                text, strategy = file_line(piece, *await self._stored(index)), 'stub'
            self.texts[index] = text
            marker = self._marker(index, piece, strategy)
            out[(piece.part_index, piece.item_index)] = _replacement(piece, text, marker)
        if plan.group:
            out.update(await self._grouped(plan))
        return out

    def _marker(self, index: int, piece: Piece, strategy: str) -> dict[str, Any]:
        """What the replaced part records: the id its original is stored under (`NOT_STORED` when the store
        refused it, so no later stub points there)."""
        artifact_id, stored = self.stored[index]
        return stored_marker(artifact_id if stored else NOT_STORED, piece.tokens, strategy)

    async def _piece(self, index: int, cap: int) -> tuple[str, str]:
        """One text within `cap` tokens: its text and how it was reduced. A read-back page is cut shorter (its
        artifact is stored already); anything else is stored first."""
        piece = self.pieces[index]
        counter = self.context.counter
        if piece.page is not None:
            self.stored[index] = (piece.page.artifact_id, True)
            return _repaged(piece, piece.page, cap, counter), 'page'
        artifact_id, stored = await self._stored(index)
        query = f'{self.query} {piece.hint}'.strip()
        render = functools.partial(reduced_text, piece, artifact_id, cap, query, counter, stored)
        text = await self.context.off_loop(render) if _large(piece) else render()
        return text, 'extract'

    async def _stored(self, index: int) -> tuple[str, bool]:
        """The piece's original, stored once: its artifact id, and whether the store kept it."""
        found = self.stored.get(index)
        if found is None:
            piece = self.pieces[index]
            context = self.context
            keyed = functools.partial(_keyed, context, piece)
            data, media_type, artifact_id = await context.off_loop(keyed) if _large(piece) else keyed()
            tool = {'tool_name': piece.tool_name or ''}
            stored = await context.store_original(
                artifact_id, data, media_type=media_type, source=piece.source, metadata=tool
            )
            found = self.stored[index] = (artifact_id, stored)
        return found

    async def _grouped(self, plan: FitPlan) -> dict[_Place, Replacement]:
        context = self.context
        grouped = [self.pieces[i] for i in plan.group]
        if self.group is None or self.group[0] != plan.group:
            data = await context.off_loop(group_data, grouped)
            artifact_id = await context.off_loop(context.artifact_id, data)
            source = f'{len(grouped)} pieces of one request'
            ndjson, no_tool = 'application/x-ndjson', {'tool_name': ''}
            stored = await context.store_original(
                artifact_id, data, media_type=ndjson, source=source, metadata=no_tool
            )
            self.group = (plan.group, artifact_id, stored)
            self._group_data = data
        _, artifact_id, stored = self.group
        render = functools.partial(
            group_note,
            grouped,
            self._group_data,
            artifact_id,
            plan.group_tokens,
            self.query,
            context.counter,
            stored,
        )
        note = await context.off_loop(render)
        self.texts[plan.group[0]] = note
        out: dict[_Place, Replacement] = {}
        kept_id = artifact_id if stored else NOT_STORED
        for number, piece in enumerate(grouped, 1):
            marker = stored_marker(kept_id, piece.tokens, 'group')
            text = note if number == 1 else f'[#{number}]' if piece.kind == 'tool' else None
            out[(piece.part_index, piece.item_index)] = _replacement(piece, text, marker)
        return out

    def unstored(self, plan: FitPlan) -> bool:
        """Whether an original the plan reduces could not be stored."""
        pieces = any(not self.stored[i][1] for i in (*plan.caps, *plan.stubbed) if i in self.stored)
        return pieces or (bool(plan.group) and self.group is not None and not self.group[2])

    def report(self, plan: FitPlan, *, reason: str) -> None:
        """The events of the final plan: one per reduced piece (and group), and what could not be stored."""
        context = self.context
        count = context.counter.count_text
        for index in (*plan.caps, *plan.stubbed):
            piece = self.pieces[index]
            artifact_id, stored = self.stored[index]
            after = count(self.texts[index])
            strategy = 'stub' if piece.kind == 'media' else 'extract' if piece.page is None else 'page'
            report_artifact(context, artifact_id, piece.source, strategy, piece.tokens, after, reason)
            if piece.kind == 'user':
                context.warn(
                    'user_prompt_reduced',
                    f"the user's message ({piece.tokens:,} tokens) is more than the request has room for: "
                    f'stored as {artifact_id}; the model sees its passages most relevant to its question and '
                    'how to read it',
                    artifact_id=artifact_id,
                    tokens=piece.tokens,
                )
            if not stored:
                self._lost([piece], f'{piece.source} was reduced to fit the request and could not be stored')
        if plan.group and self.group is not None:
            grouped = [self.pieces[i] for i in plan.group]
            _, artifact_id, stored = self.group
            before = sum(i.tokens for i in grouped)
            pointers = sum(1 for i in grouped[1:] if i.kind == 'tool')
            after = count(self.texts[plan.group[0]]) + pointers * POINTER_TOKENS
            source = f'{len(grouped)} pieces'
            report_artifact(
                context, artifact_id, source, 'group', before, after, f'{reason}; stored together'
            )
            if not stored:
                self._lost(grouped, f'{source} were cut to fit the request and could not be stored')

    def _lost(self, pieces: Sequence[Piece], reason: str) -> None:
        """`ContentLost` naming the calls (or the user message) of which only what is shown is left."""
        parts: list[Any] = [
            ToolReturnPart(tool_name=i.tool_name, content='', tool_call_id=i.tool_call_id or '')
            if i.tool_name is not None
            else UserPromptPart(content='')
            for i in pieces
        ]
        what = 'content cut to fit the request'
        self.context.lost(self.stage, 'content_cut', reason, [make_request(parts)], what=what)


def _repaged(piece: Piece, page: Page, cap: int, counter: TokenCounter) -> str:
    """A read-back page cut to `cap` tokens, its first line saying where the next page starts."""
    body = page.body(piece.text)
    chars = int(max(cap - _PAGE_HEADER_TOKENS, 1) * len(body) / max(corrected(counter, body), 1))

    def render(size: int) -> str:
        shorter, kept = page.shorter(body, size)
        return shorter.text(kept, room=cap)

    return shrunk_to_fit(render, chars, cap, functools.partial(corrected, counter))


def _large(piece: Piece) -> bool:
    return len(piece.text) > OFF_LOOP_CHARS


def _keyed(context: HistoryContext, piece: Piece) -> tuple[bytes, str, str]:
    """The bytes a store keeps of `piece` (a file's own bytes, a link's address), their media type, and their
    id in the run's scope."""
    media = piece.media
    if media is None:
        data, media_type = utf8(piece.text), piece.media_type
    elif isinstance(media, BinaryContent):
        data, media_type = media.data, piece.media_type
    else:
        data, media_type = utf8(str(getattr(media, 'url', ''))), 'text/uri-list'
    return data, media_type, context.artifact_id(data)


def report_artifact(
    context: HistoryContext,
    artifact_id: str,
    source: str,
    strategy: str,
    before: int,
    after: int,
    why: str,
    cache_hit: bool = False,
) -> None:
    """The `ArtifactProcessed` event of one reduced artifact."""
    context.emit_event(
        ArtifactProcessed(
            run_id=context.run_id,
            artifact_id=artifact_id,
            source=source,
            strategy=strategy,
            tokens_before=before,
            tokens_after=after,
            cache_hit=cache_hit,
            rationale=why,
        )
    )


def _replacement(piece: Piece, text: str | None, marker: dict[str, Any]) -> Replacement:
    """What stands for `piece`: in the user's message a text is sealed as ours (a user prompt part has no
    metadata to say so)."""
    sealed = seal('artifact', text) if text is not None and piece.tool_name is None else text
    return Replacement(sealed, marker)


def _replaced(request: ModelRequest, replacements: dict[_Place, Replacement]) -> ModelRequest:
    """`request` with its pieces replaced."""
    [replaced] = replace_pieces([request], {(0, p, i): r for (p, i), r in replacements.items()})
    assert isinstance(replaced, ModelRequest)
    return replaced
