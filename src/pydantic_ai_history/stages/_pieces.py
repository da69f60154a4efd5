"""The pieces of a request, the plan that makes them fit, and the one way a piece is replaced: pure, no
store, no events.

A *piece* is anything a request carries that can be made smaller: a tool return's text, a text of the user's
message, a file (an image, a document) in either. Each knows what it costs (images by the provider's pixel
pricing, as `TokenCounter` counts them) and how it may be reduced: a text is cut to the passages relevant to
the question, a file is stored and replaced by one line naming it, tiny pieces are stored together behind one
note. `plan_fit` decides which, against one room; `_request_fit` stores the originals (`HistoryContext.
store_original`, the one store path) and applies the plan with `replace_pieces`, as the artifact stage and the
compactor's stubs do.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._compat import CACHE_POINTS, is_media, media_type_of, part_metadata, with_part_metadata
from ..messages._marks import MARKER_KEY, part_kinds, sealed_kind
from ..messages._nesting import json_text, value_too_deep
from ..readback._pages import Page
from ..tokens import TokenCounter

STUB_TOKENS = 120
"""Below this level a text is not worth a note of its own (the note and its id cost about this much)."""
POINTER_TOKENS = 6
"""What a grouped tool return keeps: `[#123]` and its framing share."""
MEDIA_STUB_TOKENS = 90
"""What the line standing for a stored file costs (its id, what it was, how to read it back)."""
PROMPT_SHARE = 0.5
"""The most of the request's room a reduced text of the user's keeps: the run's next steps (tool calls and
their returns, which cannot be made smaller than their framing) need the rest."""

NOT_STORED = ''
"""The artifact id a marker records when no original is stored (the store refused it, or there is none to
store): the part counts as processed, and nothing may point the model to a read-back of it."""

PieceKind = Literal['tool', 'user', 'media']
"""A tool return's text, a text of the user's message, or a file (in either)."""


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
class Piece:
    """One thing the newest request carries that can be made smaller."""

    kind: PieceKind
    """A tool return's text, a text of the user's message, or a file."""
    part_index: int
    """The part that carries it."""
    item_index: int | None
    """Its index in the part's content list; None when the part's content is the text (a tool return's text,
    which stands for all its non-file items, always has None)."""
    tokens: int
    """What it costs the serving model (corrected; a file by the provider's pricing)."""
    text: str = ''
    """What the model sees of it ('' for a file)."""
    media: Any = None
    """The file itself (`BinaryContent` or a URL) when it is one."""
    media_type: str = 'text/plain'
    tool_name: str | None = None
    """The tool that returned it; None for the user's message."""
    tool_call_id: str | None = None
    hint: str = ''
    """The string arguments of the call it answers: added to the question passages are chosen by."""
    page: Page | None = None
    """The read-back page it is (its original is stored already: it is cut shorter, not stored again)."""
    question: bool = False
    """The user's current question (the last text of the user's message): never grouped away."""

    @property
    def source(self) -> str:
        """Where it came from, as the notes and events say it."""
        where = f'tool {self.tool_name!r}' if self.tool_name is not None else "the user's message"
        return f'a file ({self.media_type or "unknown type"}) from {where}' if self.kind == 'media' else where


def request_pieces(
    request: ModelRequest, counter: TokenCounter, hints: dict[str, str] | None = None
) -> list[Piece]:
    """The pieces of `request` a fit may reduce, in order: the texts and files of unprocessed tool returns and
    of the user's message (never our notes). `hints`: `call_hints` of the response the request answers."""
    pieces: list[Piece] = []
    kinds = part_kinds(request)
    for p_index, (part, kind) in enumerate(zip(request.parts, kinds, strict=True)):
        if isinstance(part, ToolReturnPart):
            hint = (hints or {}).get(part.tool_call_id, '')
            pieces.extend(_tool_pieces(p_index, part, counter, hint, text=not is_processed(part)))
        elif isinstance(part, UserPromptPart) and kind is None:
            pieces.extend(_user_pieces(p_index, part, counter))
    texts = [i for i, p in enumerate(pieces) if p.kind == 'user']
    if texts:  # the user's question is the last thing they wrote
        last = texts[-1]
        pieces[last] = dataclasses.replace(pieces[last], question=True)
    return pieces


def _tool_pieces(
    p_index: int, part: ToolReturnPart, counter: TokenCounter, hint: str, *, text: bool
) -> list[Piece]:
    """The text (unless `text` is False: a stage reduced it already) and the files of a tool return."""
    pieces: list[Piece] = []
    body, media_type, _ = tool_return_text(part) if text else ('', '', ())
    if body:
        pieces.append(
            Piece(
                kind='tool',
                part_index=p_index,
                item_index=None,
                text=body,
                tokens=corrected(counter, body),
                media_type=media_type,
                tool_name=part.tool_name,
                tool_call_id=part.tool_call_id,
                hint=hint,
                page=Page.of(part),
            )
        )
    if isinstance(part.content, (list, tuple)):
        for i_index, item in enumerate(part.content):
            if is_media(item):
                pieces.append(
                    _media_piece(p_index, i_index, item, counter, part.tool_name, part.tool_call_id)
                )
    return pieces


def _user_pieces(p_index: int, part: UserPromptPart, counter: TokenCounter) -> list[Piece]:
    content = part.content
    items: list[tuple[int | None, object]] = (
        [(None, content)] if isinstance(content, str) else list(enumerate(content))
    )
    pieces: list[Piece] = []
    for i_index, value in items:
        if isinstance(value, str) and value and sealed_kind(value) is None:
            tokens = corrected(counter, value)
            pieces.append(
                Piece(kind='user', part_index=p_index, item_index=i_index, text=value, tokens=tokens)
            )
        elif i_index is not None and is_media(value):
            pieces.append(_media_piece(p_index, i_index, value, counter, None, None))
    return pieces


def _media_piece(
    p_index: int, i_index: int, item: Any, counter: TokenCounter, tool: str | None, call_id: str | None
) -> Piece:
    return Piece(
        kind='media',
        part_index=p_index,
        item_index=i_index,
        tokens=counter.count_part(UserPromptPart(content=[item])),
        media=item,
        media_type=media_type_of(item),
        tool_name=tool,
        tool_call_id=call_id,
    )


# ---- the plan ----------------------------------------------------------------------------------------------


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
    """Which pieces to reduce, and how."""

    caps: dict[int, int]
    """Piece index -> the tokens its replacement may use, for each text reduced on its own."""
    group: tuple[int, ...] = ()
    """Texts stored together behind one note, carried by the first; the other tool returns keep a pointer,
    the other user texts go (the note stands for them)."""
    group_tokens: int = 0
    """The tokens the group's note may use."""
    stubbed: tuple[int, ...] = ()
    """Files stored and replaced by a line that names them."""

    @property
    def empty(self) -> bool:
        return not self.caps and not self.group and not self.stubbed


def plan_fit(pieces: Sequence[Piece], room: int) -> FitPlan:
    """The reductions that bring `pieces` within `room` tokens. Files keep their share of the room (the
    first ones whole, the rest stored); the texts share what is left to one level, the largest cut first; a
    reduced text of the user's keeps at most `PROMPT_SHARE` of the room; when the level leaves no room for a
    note per text, the tiny ones (all but the user's question) are stored together behind one note."""
    if sum(p.tokens for p in pieces) <= room:
        return FitPlan({})
    stubbed, text_room = _files_plan(pieces, room)
    texts = [i for i, p in enumerate(pieces) if p.kind != 'media']
    most = max(int(room * PROMPT_SHARE), STUB_TOKENS)
    caps = {i: most for i in texts if pieces[i].kind == 'user' and pieces[i].tokens > most}
    sizes = {i: min(pieces[i].tokens, caps.get(i, pieces[i].tokens)) for i in texts}
    if sum(sizes.values()) <= text_room:
        return FitPlan(caps, stubbed=stubbed)
    level = water_level(list(sizes.values()), text_room)
    if level >= STUB_TOKENS:
        caps.update({i: level for i, size in sizes.items() if size > level})
        return FitPlan(caps, stubbed=stubbed)
    return _grouped_plan(pieces, sizes, text_room, stubbed)


def _capped(
    pieces: Sequence[Piece], sizes: dict[int, int], indices: Sequence[int], level: int
) -> dict[int, int]:
    """The caps of the pieces at `indices` that are larger than `level` (their own cap when lower)."""
    return {i: min(sizes[i], level) for i in indices if pieces[i].tokens > min(sizes[i], level)}


def _files_plan(pieces: Sequence[Piece], room: int) -> tuple[tuple[int, ...], int]:
    """The files to store and the room left for the texts. The files get what the texts leave, and at least
    half the room when they need it (texts can be cut, a file can only be kept or stored); the first ones stay
    whole, the later ones past that share are stored, each leaving a line (a file cheaper than its line
    stays)."""
    files = [i for i, p in enumerate(pieces) if p.kind == 'media']
    if not files:
        return (), room
    file_tokens = sum(pieces[i].tokens for i in files)
    text_tokens = sum(p.tokens for p in pieces) - file_tokens
    share = max(room - text_tokens, min(file_tokens, room // 2))
    kept = 0
    stubbed: list[int] = []
    remaining = len(files)
    for index in files:
        remaining -= 1
        size = pieces[index].tokens
        if size <= MEDIA_STUB_TOKENS or (
            not stubbed and kept + size + MEDIA_STUB_TOKENS * remaining <= share
        ):
            kept += size
        else:
            stubbed.append(index)
    return tuple(stubbed), room - kept - MEDIA_STUB_TOKENS * len(stubbed)


def _grouped_plan(
    pieces: Sequence[Piece], sizes: dict[int, int], room: int, stubbed: tuple[int, ...]
) -> FitPlan:
    """Too many texts for a note each: the tool returns worth a pointer and the user's texts but the question
    go into one group; the group's note shares what is left with the texts that are not grouped."""
    group = tuple(
        i
        for i in sizes
        if (pieces[i].kind == 'tool' and pieces[i].tokens > POINTER_TOKENS)
        or (pieces[i].kind == 'user' and not pieces[i].question)
    )
    if len(group) < 2:
        return FitPlan(_capped(pieces, sizes, list(sizes), STUB_TOKENS), stubbed=stubbed)
    grouped = set(group)
    rest = [i for i in sizes if i not in grouped]
    pointers = sum(1 for i in group[1:] if pieces[i].kind == 'tool')
    left = room - POINTER_TOKENS * pointers
    total = sum(pieces[i].tokens for i in group)
    level = max(water_level([*(sizes[i] for i in rest), total], left), STUB_TOKENS)
    return FitPlan(_capped(pieces, sizes, rest, level), group, min(level, total), stubbed)


# ---- replacing ---------------------------------------------------------------------------------------------

Place = tuple[int, int, 'int | None']
"""Where a piece is: its message, its part, its index in the part's content list (None: the part's text)."""


@dataclass(frozen=True)
class Replacement:
    """What takes a piece's place."""

    text: str | None
    """The text standing for it, as sent (sealed by the caller where it goes into the user's message); None:
    it goes (a grouped text of the user's that the group's note stands for)."""
    marker: dict[str, Any] = field(default_factory=dict)
    """What a tool return records in its metadata (the artifact id, the tokens it had, the strategy)."""


def stored_marker(artifact_id: str, tokens: int, strategy: str) -> dict[str, Any]:
    """What a replaced tool return records: where its original is stored, what it cost, how it was cut."""
    return {'artifact_id': artifact_id, 'original_tokens': tokens, 'strategy': strategy}


def replace_pieces(
    messages: Sequence[ModelMessage], replacements: Mapping[Place, Replacement]
) -> list[ModelMessage]:
    """New messages with every replacement in place (nothing mutated): a tool return's text or a file, a text
    or a file of the user's; a user prompt part left with nothing goes."""
    by_part: dict[tuple[int, int], dict[int | None, Replacement]] = {}
    for (m_index, p_index, i_index), replacement in replacements.items():
        by_part.setdefault((m_index, p_index), {})[i_index] = replacement
    return with_parts(
        messages,
        {(m, p): replaced_part(messages[m].parts[p], changes) for (m, p), changes in by_part.items()},
    )


def with_parts(
    messages: Sequence[ModelMessage], new_parts: Mapping[tuple[int, int], Any]
) -> list[ModelMessage]:
    """New messages with the part at each (request, part) index replaced (nothing mutated); None: it goes."""
    result = list(messages)
    for m_index in {m for m, _ in new_parts}:
        request = result[m_index]
        assert isinstance(request, ModelRequest)
        parts = [new_parts.get((m_index, p), part) for p, part in enumerate(request.parts)]
        result[m_index] = dataclasses.replace(request, parts=[p for p in parts if p is not None])
    return result


def replaced_part(part: Any, changes: Mapping[int | None, Replacement]) -> Any | None:
    """`part` with its pieces replaced (None when nothing is left of a user prompt part)."""
    if isinstance(part, ToolReturnPart):
        return _return_replaced(part, changes)
    if isinstance(part, UserPromptPart):
        content = _user_content(part.content, changes)
        return None if content is None else dataclasses.replace(part, content=content)
    return part


def marked_return(part: ToolReturnPart, text: str, files: Sequence[Any], marker: dict[str, Any]) -> Any:
    """`part` with `text` (then `files`) as its content and `marker` in our metadata."""
    content: Any = [text, *files] if files else text
    return with_part_metadata(dataclasses.replace(part, content=content), {MARKER_KEY: marker})


def _return_replaced(part: ToolReturnPart, changes: Mapping[int | None, Replacement]) -> Any:
    """A tool return with its text (item None) and files (by index) replaced. The text's change carries the
    marker; files alone leave the part's own marker as it is (or none): a marker names where the *text* is
    stored, and a file's line names its own."""
    content = part.content
    items = list(content) if isinstance(content, (list, tuple)) else [content]
    kept = [changes[i].text if i in changes else item for i, item in enumerate(items)]
    text = changes.get(None)
    if text is not None:
        files = [new for new, item in zip(kept, items, strict=True) if is_media(item)]
        return marked_return(part, text.text or '', files, text.marker)
    return dataclasses.replace(part, content=kept)


def _user_content(content: Any, changes: Mapping[int | None, Replacement]) -> Any:
    """A user prompt part's content with its texts and files replaced; None when nothing is left of it."""
    if isinstance(content, str):
        return changes[None].text if None in changes else content
    items = [changes[i].text if i in changes else item for i, item in enumerate(content)]
    kept = [item for i, item in enumerate(items) if i not in changes or changes[i].text is not None]
    return kept or None


def too_deep_returns(request: ModelRequest) -> dict[int, Replacement]:
    """Part index -> what replaces a tool return whose value nests deeper than `MAX_PARSE_DEPTH` (no
    provider's serializer takes it: pydantic's stops near 255 levels): its JSON text down to that depth, the
    deeper part named. Only structured values are walked (a string is sent as it is)."""
    return {
        p_index: Replacement(json_text(part.content), {'artifact_id': NOT_STORED, 'strategy': 'cut_deep'})
        for p_index, part in enumerate(request.parts)
        if isinstance(part, ToolReturnPart)
        and isinstance(part.content, (dict, list, tuple))
        and value_too_deep(part.content)
    }
