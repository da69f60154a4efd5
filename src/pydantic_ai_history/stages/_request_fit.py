"""Fitting the newest request into its room: what it carries is reduced, never its structure.

When the newest request alone is over its room (`_room.request_room`), its largest pieces are reduced first
to one shared level ("water filling"), each stored then replaced by its passages most relevant to the
question under the id that reads it back. When that level is below what a note costs, the tool returns are
stored together behind one note and each keeps a pointer (`[#k]`): every call still has its return. Used
by the artifact stage and the window; only the newest request changes (no provider has cached it). A piece
the store refuses is reduced all the same, and `ContentLost` says what is gone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._compat import (
    CACHE_POINTS,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    is_media,
    json_text,
    make_request,
    part_metadata,
    with_part_metadata,
)
from ..budget._room import kept_tokens, request_room, window_room
from ..context._context import ARTIFACT_MARKER, MARKER_KEY, HistoryContext
from ..context._offload import OFF_LOOP_CHARS, large_content
from ..events import ArtifactProcessed
from ..messages._marks import marker_kind, part_kinds, readback_tool, seal, sealed_kind
from ..messages._utf8 import utf8
from ..readback._pages import Page, shrunk_to_fit
from ..tokens import TokenCounter, TokenEstimate

__all__ = (
    'FitPlan',
    'Reducible',
    'call_hints',
    'corrected',
    'fit_newest',
    'fit_request',
    'is_processed',
    'latest_question',
    'marked_return',
    'newest_room',
    'plan_fit',
    'reducible_items',
    'report_artifact',
    'store_original',
    'tool_return_text',
    'water_level',
)

STUB_TOKENS = 120
"""Below this level a piece is not worth a note of its own (the note and its id cost about this much)."""
POINTER_TOKENS = 6
"""What a grouped tool return keeps: `[#123]` and its framing share."""
_PASSES = 3
"""Reductions are measured after they are made; a request still over its room is reduced again this often."""
_PAGE_HEADER_TOKENS = 48
"""What a read-back page's first line costs."""


def corrected(counter: TokenCounter, text: str) -> int:
    """What `text` costs the serving model: the tokenizer's count times the profile's correction."""
    return math.ceil(counter.count_text(text) * counter.tokenizer_profile.correction)


def is_processed(part: Any) -> bool:
    """Whether a stage already replaced the part (recorded in its metadata, never read from its text)."""
    ours = part_metadata(part).get(MARKER_KEY)
    return isinstance(ours, dict) and 'artifact_id' in ours


def tool_return_text(part: ToolReturnPart) -> tuple[str, str, tuple[Any, ...]]:
    """The text the model sees for a tool return (JSON for structured content), its media type, its files."""
    content = part.content
    if isinstance(content, str):
        return content, 'text/plain', ()
    if isinstance(content, (list, tuple)) and any(is_media(i) for i in content):
        files = tuple(i for i in content if is_media(i))
        rest = [i for i in content if not is_media(i) and not isinstance(i, CACHE_POINTS)]
        if all(isinstance(i, str) for i in rest):
            return '\n'.join(rest), 'text/plain', files
        return json_text(rest), 'application/json', files
    try:
        text = part.model_response_str()
    except Exception:
        text = json_text(content)
    return text, 'application/json', ()


def call_hints(messages: Sequence[ModelMessage]) -> dict[str, str]:
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


@dataclass(frozen=True, kw_only=True)
class Reducible:
    """One piece of the newest request whose content may be shortened: a tool return, or a text of the
    user's message."""

    part_index: int
    item_index: int | None
    """The text's index in a user message's content list; None when the part's content is the text."""
    text: str
    """What the model sees of it."""
    tokens: int
    """What the text costs (corrected)."""
    tool_name: str | None
    """The tool that returned it; None for the user's message."""
    tool_call_id: str | None
    media_type: str
    files: tuple[Any, ...] = ()
    """Files a tool returned beside its text: kept after the reduced text."""
    hint: str = ''
    """The string arguments of the call it answers: added to the question passages are chosen by."""
    page: Page | None = None
    """The read-back page it is (its original is stored already: it is cut shorter, not stored again)."""

    @property
    def source(self) -> str:
        return f'tool {self.tool_name!r}' if self.tool_name is not None else "the user's message"


def reducible_items(
    request: ModelRequest, counter: TokenCounter, hints: dict[str, str] | None = None
) -> list[Reducible]:
    """The pieces of `request` a fit may shorten: unprocessed tool returns with text and the user's texts
    (never our notes). `hints`: `call_hints` of the response the request answers."""
    items: list[Reducible] = []

    def add(part_index: int, item_index: int | None, text: str, **fields: Any) -> None:
        tokens = corrected(counter, text)
        items.append(
            Reducible(part_index=part_index, item_index=item_index, text=text, tokens=tokens, **fields)
        )

    for p_index, part in enumerate(request.parts):
        if isinstance(part, ToolReturnPart) and not is_processed(part):
            text, media_type, files = tool_return_text(part)
            if text:
                add(
                    p_index,
                    None,
                    text,
                    tool_name=part.tool_name,
                    tool_call_id=part.tool_call_id,
                    media_type=media_type,
                    files=files,
                    hint=(hints or {}).get(part.tool_call_id, ''),
                    page=Page.of(part),
                )
        elif isinstance(part, UserPromptPart):
            content = part.content
            texts: list[tuple[int | None, object]] = (
                [(None, content)] if isinstance(content, str) else list(enumerate(content))
            )
            for i_index, value in texts:
                if isinstance(value, str) and value and sealed_kind(value) is None:
                    add(p_index, i_index, value, tool_name=None, tool_call_id=None, media_type='text/plain')
    return items


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


# ---- the plan: pure ---------------------------------------------------------------------------------------


def water_level(sizes: Sequence[int], room: int) -> int:
    """The largest `level` with `sum(min(size, level)) <= room`: pieces over it are cut to it, the others stay
    whole (the largest of `sizes` when they all fit; 0 when `room` holds nothing)."""
    if room <= 0 or not sizes:
        return 0
    ordered = sorted(sizes)
    remaining = room
    for index, size in enumerate(ordered):
        share = remaining // (len(ordered) - index)
        if size > share:
            return share
        remaining -= size
    return ordered[-1]


@dataclass(frozen=True)
class FitPlan:
    """Which pieces to reduce, and to how many tokens each."""

    caps: dict[int, int]
    """Piece index -> the tokens its replacement may use, for each piece reduced on its own."""
    group: tuple[int, ...] = ()
    """Pieces (tool returns) stored together behind one note; the first carries the note."""
    group_tokens: int = 0
    """The tokens the group's note may use."""

    @property
    def empty(self) -> bool:
        return not self.caps and not self.group


def plan_fit(items: Sequence[Reducible], room: int) -> FitPlan:
    """The reductions that bring `items` within `room` tokens: the largest first, to one shared level; when
    that level leaves no room for a note per piece, the tool returns are grouped behind one note."""
    sizes = [item.tokens for item in items]
    if sum(sizes) <= room:
        return FitPlan({})
    level = water_level(sizes, room)
    if level >= STUB_TOKENS:
        return FitPlan({i: level for i, size in enumerate(sizes) if size > level})
    group = tuple(
        i for i, item in enumerate(items) if item.tool_name is not None and item.tokens > POINTER_TOKENS
    )
    if len(group) < 2:
        return FitPlan({i: STUB_TOKENS for i, size in enumerate(sizes) if size > STUB_TOKENS})
    grouped = set(group)
    rest = [i for i in range(len(items)) if i not in grouped]
    left = room - POINTER_TOKENS * len(group)
    # the group's note shares what is left with the pieces that are not grouped (the user's texts)
    level = max(water_level([*(sizes[i] for i in rest), sum(sizes[i] for i in group)], left), STUB_TOKENS)
    caps = {i: level for i in rest if sizes[i] > level}
    return FitPlan(caps, group, min(level, sum(sizes[i] for i in group)))


# ---- texts -------------------------------------------------------------------------------------------------


def _lost_note(stored: bool) -> str:
    return '' if stored else ' | the original could not be stored: what is not shown here is lost'


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


_PROMPT_HEAD_SHARE = 0.25
"""The share of a reduced user message given to its beginning; its passages most relevant to its question
(its last lines) get the rest."""


def reduced_text(
    item: Reducible, artifact_id: str, max_tokens: int, query: str, counter: TokenCounter, stored: bool
) -> str:
    """What stands for `item` within `max_tokens`: a header naming the stored original, then its passages most
    relevant to `query` (a user's message: its beginning, then the passages relevant to its last lines)."""
    if item.tool_name is None:
        query = _last_lines(item.text)
        showing = 'showing its beginning, then its passages most relevant to its last paragraph'
    else:
        shown = ' '.join(query.split())[:200]
        showing = f'showing the passages most relevant to {shown!r}' if shown else 'showing its beginning'
    head = (
        f'{ARTIFACT_MARKER} {artifact_id} | {item.source}, {len(item.text):,} characters, '
        f'~{item.tokens:,} tokens, more than this request has room for | {showing} | '
        f"{readback_tool()}(artifact_id='{artifact_id}', offset=0, query=...) reads the rest"
        f'{_lost_note(stored)}]\n'
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


def group_data(items: Sequence[Reducible]) -> bytes:
    """What a group stores: one JSON line per tool return, in order (`#`, tool, call id, content)."""
    lines = (
        json.dumps(
            {'#': n, 'tool': i.tool_name, 'tool_call_id': i.tool_call_id, 'content': i.text},
            ensure_ascii=False,
        )
        for n, i in enumerate(items, 1)
    )
    return utf8('\n'.join(lines))


def group_note(
    items: Sequence[Reducible],
    data: bytes,
    artifact_id: str,
    max_tokens: int,
    query: str,
    counter: TokenCounter,
    stored: bool,
) -> str:
    """The note the first grouped return carries: what the group holds, how to read it, and a preview."""
    chars = sum(len(i.text) for i in items)
    tokens = sum(i.tokens for i in items)
    head = (
        f'[#1] {ARTIFACT_MARKER} {artifact_id} | the {len(items):,} tool returns of this request marked '
        f'[#1] to [#{len(items)}] ({chars:,} characters, ~{tokens:,} tokens) are more than it has room for: '
        f'they are stored together, one JSON line each ("#", "tool", "tool_call_id", "content") | '
        f"{readback_tool()}(artifact_id='{artifact_id}', query=...) finds any of them, offset=... pages "
        f'through{_lost_note(stored)}]\n'
    )
    return passages_within(data.decode('utf-8', 'replace'), head, query, max_tokens, counter)


# ---- applying ----------------------------------------------------------------------------------------------

_Place = tuple[int, 'int | None']
"""Where a reduced text goes: the part's index, and the item's index in a user message's content list."""
_Replacement = tuple[str, dict[str, Any], tuple[Any, ...]]
"""The text replacing a piece, the marker recorded in a tool return's metadata, the files kept after it."""


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
    """`messages` with the newest request's content reduced to at most `room` tokens (every call keeps its
    return); `messages` itself when it fits or nothing can be cut. What the store cannot keep is cut only as
    far as `most` (what the request can carry once the window drops what it may) requires."""
    request = messages[-1]
    if not isinstance(request, ModelRequest):
        return messages
    counter = context.counter
    hints = call_hints(messages[-2:-1])
    if large_content([request]):
        items = await context.off_loop(reducible_items, request, counter, hints)
    else:
        items = reducible_items(request, counter, hints)
    fit = _Fit(items, context, query=query, stage=stage)
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
    items = fit.items
    target = room - (counter.count_message(request) - sum(item.tokens for item in items))
    plan = FitPlan({})
    current = request
    for _ in range(_PASSES):
        plan = plan_fit(items, target)
        if plan.empty:
            return None, request
        current = _replaced(request, await fit.replacements(plan))
        after = counter.count_message(current)
        if after <= room:
            break
        target -= after - room  # the texts came out larger than planned: plan for less
    return plan, current


class _Fit:
    """The reductions of one request's pieces: each original stored once, its text rendered per plan."""

    def __init__(
        self, items: Sequence[Reducible], context: HistoryContext, *, query: str, stage: str
    ) -> None:
        self.items = items
        self.context = context
        self.query = query
        self.stage = stage
        self.stored: dict[int, tuple[str, bool]] = {}
        """Piece index -> its artifact id and whether the store kept it."""
        self.group: tuple[bytes, str, bool] | None = None
        """The grouped pieces' data, artifact id, and whether the store kept it."""
        self.texts: dict[int, str] = {}
        """Piece index -> its text in the latest plan (the group's note under the first grouped piece)."""

    async def replacements(self, plan: FitPlan) -> dict[_Place, _Replacement]:
        out: dict[_Place, _Replacement] = {}
        self.texts = {}
        for index, cap in plan.caps.items():
            item = self.items[index]
            text, artifact_id, strategy = await self._piece(index, cap)
            self.texts[index] = text
            marker = {'artifact_id': artifact_id, 'original_tokens': item.tokens, 'strategy': strategy}
            out[(item.part_index, item.item_index)] = (text, marker, item.files)
        if plan.group:
            out.update(await self._grouped(plan))
        return out

    async def _piece(self, index: int, cap: int) -> tuple[str, str, str]:
        """One piece within `cap` tokens: its text, the artifact it names, how it was reduced. A read-back
        page is cut shorter (its artifact is stored already); anything else is stored first."""
        item = self.items[index]
        counter = self.context.counter
        if item.page is not None:
            self.stored[index] = (item.page.artifact_id, True)
            return _repaged(item, item.page, cap, counter), item.page.artifact_id, 'page'
        artifact_id, stored = await self._stored(index)
        query = f'{self.query} {item.hint}'.strip()
        render = functools.partial(reduced_text, item, artifact_id, cap, query, counter, stored)
        text = await self.context.off_loop(render) if _large(item) else render()
        return text, artifact_id, 'extract'

    async def _stored(self, index: int) -> tuple[str, bool]:
        found = self.stored.get(index)
        if found is None:
            item = self.items[index]
            context = self.context
            keyed = functools.partial(_keyed, context, item.text)
            data, artifact_id = await context.off_loop(keyed) if _large(item) else keyed()
            tool = {'tool_name': item.tool_name or ''}
            stored = await store_original(context, artifact_id, data, item.media_type, item.source, tool)
            found = self.stored[index] = (artifact_id, stored)
        return found

    async def _grouped(self, plan: FitPlan) -> dict[_Place, _Replacement]:
        context = self.context
        grouped = [self.items[i] for i in plan.group]
        if self.group is None:
            data = await context.off_loop(group_data, grouped)
            artifact_id = await context.off_loop(context.artifact_id, data)
            source = f'{len(grouped)} tool returns of one request'
            ndjson, no_tool = 'application/x-ndjson', {'tool_name': ''}
            stored = await store_original(context, artifact_id, data, ndjson, source, no_tool)
            self.group = (data, artifact_id, stored)
        data, artifact_id, stored = self.group
        render = functools.partial(
            group_note, grouped, data, artifact_id, plan.group_tokens, self.query, context.counter, stored
        )
        note = await context.off_loop(render)
        self.texts[plan.group[0]] = note
        out: dict[_Place, _Replacement] = {}
        for number, item in enumerate(grouped, 1):
            marker = {'artifact_id': artifact_id, 'original_tokens': item.tokens, 'strategy': 'group'}
            text = note if number == 1 else f'[#{number}]'
            out[(item.part_index, item.item_index)] = (text, marker, item.files)
        return out

    def unstored(self, plan: FitPlan) -> bool:
        """Whether an original the plan cuts could not be stored."""
        pieces = any(not self.stored[i][1] for i in plan.caps if i in self.stored)
        return pieces or (bool(plan.group) and self.group is not None and not self.group[2])

    def report(self, plan: FitPlan, *, reason: str) -> None:
        """The events of the final plan: one per reduced piece (and group), and what could not be stored."""
        context = self.context
        count = context.counter.count_text
        for index in plan.caps:
            item = self.items[index]
            artifact_id, stored = self.stored[index]
            after = count(self.texts[index])
            strategy = 'extract' if item.page is None else 'page'
            report_artifact(context, artifact_id, item.source, strategy, item.tokens, after, reason)
            if item.tool_name is None:
                context.warn(
                    'user_prompt_reduced',
                    f"the user's message ({item.tokens:,} tokens) is more than the request has room for: "
                    f'stored as {artifact_id}; the model sees its passages most relevant to its question and '
                    'how to read it',
                    artifact_id=artifact_id,
                    tokens=item.tokens,
                )
            if not stored:
                self._lost([item], f'{item.source} was cut to fit the request and could not be stored')
        if plan.group and self.group is not None:
            grouped = [self.items[i] for i in plan.group]
            _, artifact_id, stored = self.group
            before = sum(i.tokens for i in grouped)
            after = count(self.texts[plan.group[0]]) + (len(grouped) - 1) * POINTER_TOKENS
            source = f'{len(grouped)} tool returns'
            report_artifact(
                context, artifact_id, source, 'group', before, after, f'{reason}; stored together'
            )
            if not stored:
                self._lost(grouped, f'{source} were cut to fit the request and could not be stored')

    def _lost(self, items: Sequence[Reducible], reason: str) -> None:
        """`ContentLost` naming the calls (or the user message) of which only what is shown is left."""
        parts: list[Any] = [
            ToolReturnPart(tool_name=i.tool_name, content='', tool_call_id=i.tool_call_id or '')
            if i.tool_name is not None
            else UserPromptPart(content='')
            for i in items
        ]
        what = 'content cut to fit the request'
        self.context.lost(self.stage, 'content_cut', reason, [make_request(parts)], what=what)


def _repaged(item: Reducible, page: Page, cap: int, counter: TokenCounter) -> str:
    """A read-back page cut to `cap` tokens, its first line saying where the next page starts."""
    body = page.body(item.text)
    chars = int(max(cap - _PAGE_HEADER_TOKENS, 1) * len(body) / max(corrected(counter, body), 1))

    def render(size: int) -> str:
        shorter, kept = page.shorter(body, size)
        return shorter.text(kept, room=cap)

    return shrunk_to_fit(render, chars, cap, functools.partial(corrected, counter))


def _large(item: Reducible) -> bool:
    return len(item.text) > OFF_LOOP_CHARS


def _keyed(context: HistoryContext, text: str) -> tuple[bytes, str]:
    """The bytes a store keeps of `text`, and its id in the run's scope."""
    data = utf8(text)
    return data, context.artifact_id(data)


async def store_original(
    context: HistoryContext,
    artifact_id: str,
    data: bytes,
    media_type: str,
    source: str,
    metadata: dict[str, str] | None = None,
    *,
    what: str = '',
    consequence: str = '',
) -> bool:
    """Store one original in the run's scope; False (with an `artifact_store_failed` warning naming `what`
    and the `consequence`) when the store refuses or fails, or there is none."""
    store = context.store
    if store is None:
        return False
    try:
        await store.put(
            artifact_id, data, media_type=media_type, source=source, metadata=metadata, scope=context.scope
        )
    except Exception as exc:  # StoreError, a quota, or a backend that raises something else
        context.warn(
            'artifact_store_failed',
            f'could not store {what}{artifact_id[:16]} ({type(exc).__name__}: {exc}){consequence}',
            artifact_id=artifact_id,
        )
        return False
    return True


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


def marked_return(part: ToolReturnPart, text: str, files: Sequence[Any], marker: dict[str, Any]) -> Any:
    """`part` with `text` (then `files`) as its content and `marker` in our metadata."""
    content: Any = [text, *files] if files else text
    return with_part_metadata(dataclasses.replace(part, content=content), {MARKER_KEY: marker})


def _replaced(request: ModelRequest, replacements: dict[_Place, _Replacement]) -> ModelRequest:
    """`request` with each piece replaced: a tool return's content (its marker in metadata), or a user's text
    sealed as ours (a user prompt part has no metadata)."""
    parts = list(request.parts)
    for (p_index, i_index), (text, marker, files) in replacements.items():
        part = parts[p_index]
        if isinstance(part, ToolReturnPart):
            parts[p_index] = marked_return(part, text, files, marker)
        elif isinstance(part, UserPromptPart):
            items: Any = seal('artifact', text)
            if i_index is not None:
                items = [*part.content[:i_index], items, *part.content[i_index + 1 :]]
            parts[p_index] = dataclasses.replace(part, content=items)
    return dataclasses.replace(request, parts=parts)
