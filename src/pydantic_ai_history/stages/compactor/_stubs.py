"""The cheap tier of a compaction event: old tool outputs and attachments become stubs into the store.

Each large tool output and file outside the verbatim tail is stored and replaced by a stub naming what it was
and the id `read_artifact` returns it from: nothing is lost, and the summarizer is called only when the
stubbed history still does not fit. Equal content gets one id (keyed content hashes), so repeats get shorter
stubs. Planning is pure (`plan_stubs`), storing the one effect (`store_stubbed`); a part whose original could
not be stored keeps its content.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..._compat import is_media, part_metadata
from ...context._context import ARTIFACT_MARKER, HistoryContext
from ...messages._marks import MARKER_KEY, part_kinds, readback_tool, seal, unseal
from ...messages._utf8 import utf8
from ...tokens import TokenCounter
from .._pieces import Replacement, replace_pieces, stored_marker, tool_return_text

STUB_STRATEGY = 'stub'
"""The `strategy` our metadata records on a tool return the cheap tier stubbed (never stubbed again)."""

_STUB_OPENING = f'{ARTIFACT_MARKER} stored]'
_CALL_CHARS = 160
"""The call as the stub shows it (`name(arg=value, ...)`) is cut to this many characters."""


@dataclass(frozen=True)
class Stub:
    """One part (or one file in a user prompt) to replace with a stub, and its original to store first."""

    message: int
    part: int
    item: int | None
    """Index of the file in a user prompt's content list; None when the stub replaces the part's content."""
    artifact_id: str
    data: bytes | None
    """The original to store; None when it is already stored (a repeat, or an artifact stage's original)."""
    media_type: str
    call: str
    """What it was, as the stub and the store's metadata say: the call that returned it, or the file."""
    text: str
    """What stands in the history instead."""
    tokens_before: int
    tokens_after: int


def plan_stubs(
    messages: Sequence[ModelMessage],
    spans: Iterable[tuple[int, int]],
    *,
    counter: TokenCounter,
    make_id: Callable[[bytes], str],
    min_tokens: int,
    head_chars: int,
) -> list[Stub]:
    """Stubs for the tool outputs and files in `spans` that cost at least `min_tokens` and more than their
    stub. Pure: ids come from `make_id` (the store's keyed id)."""
    calls = _calls(messages)
    last_index = _last_call_of_each_key(messages, calls)
    planner = _Planner(counter, make_id, min_tokens, head_chars, calls, last_index)
    for start, end in spans:
        for index in range(start, end):
            message = messages[index]
            if isinstance(message, ModelRequest):
                planner.request(index, message)
    return planner.stubs


def apply_stubs(messages: Sequence[ModelMessage], stubs: Sequence[Stub]) -> list[ModelMessage]:
    """New messages with each stub in place; nothing mutated."""
    return replace_pieces(messages, {(s.message, s.part, s.item): _replacement(s) for s in stubs})


async def store_stubbed(stubs: Sequence[Stub], context: HistoryContext) -> bool:
    """Store each stub's original; False (one `artifact_store_failed` warning) at the first failure: the
    stubs must not be applied then."""
    for stub in stubs:
        if stub.data is not None and not await context.store_original(
            stub.artifact_id,
            stub.data,
            media_type=stub.media_type,
            source=stub.call,
            metadata={'call': stub.call, 'stored_by': 'compaction'},
            consequence=': old tool outputs stay in the history',
        ):
            return False
    return context.store is not None


# ---- planning -------------------------------------------------------------------------------------------


def _calls(messages: Sequence[ModelMessage]) -> dict[str, ToolCallPart]:
    """Tool call id -> the call (the last one with that id: pydantic-ai pairs a return with the latest)."""
    calls: dict[str, ToolCallPart] = {}
    for message in messages:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    calls[part.tool_call_id] = part
    return calls


def _call_key(call: ToolCallPart | None, tool_name: str) -> str:
    if call is None:
        return ''
    args = (
        call.args if isinstance(call.args, str) else json.dumps(call.args or {}, sort_keys=True, default=str)
    )
    return f'{tool_name}\0{args}'


def _last_call_of_each_key(
    messages: Sequence[ModelMessage], calls: dict[str, ToolCallPart]
) -> dict[str, int]:
    last: dict[str, int] = {}
    for index, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    key = _call_key(calls.get(part.tool_call_id), part.tool_name)
                    if key:
                        last[key] = index
    return last


def describe_call(call: ToolCallPart | None, tool_name: str) -> str:
    """`name(arg=value, ...)`, cut to a readable length."""
    if call is None:
        return f'{tool_name}(...)'
    try:
        args = call.args_as_dict()
    except Exception:
        args = {}
    shown = ', '.join(f'{k}={v!r}' for k, v in args.items()) if args else ''
    text = f'{tool_name}({shown})'
    return text if len(text) <= _CALL_CHARS else text[: _CALL_CHARS - 4] + '...)'


def _head(text: str, chars: int) -> str:
    words = ' '.join(text[: chars * 4].split())
    return words if len(words) <= chars and len(text) <= chars * 4 else words[:chars].rstrip() + '...'


@dataclass
class _Planner:
    counter: TokenCounter
    make_id: Callable[[bytes], str]
    min_tokens: int
    head_chars: int
    calls: dict[str, ToolCallPart]
    last_index: dict[str, int]
    stubs: list[Stub] = dataclasses.field(default_factory=list)
    seen: set[str] = dataclasses.field(default_factory=set)

    def request(self, index: int, message: ModelRequest) -> None:
        for p_index, (part, kind) in enumerate(zip(message.parts, part_kinds(message), strict=True)):
            if isinstance(part, ToolReturnPart):
                self.tool_return(index, p_index, part)
            elif (
                isinstance(part, UserPromptPart) and kind is None and isinstance(part.content, (list, tuple))
            ):
                self.user_files(index, p_index, part.content)

    def tool_return(self, index: int, p_index: int, part: ToolReturnPart) -> None:
        ours = part_metadata(part).get(MARKER_KEY)
        if isinstance(ours, dict) and ours.get('strategy') == STUB_STRATEGY:
            return
        if isinstance(part.content, (list, tuple)) and any(is_media(i) for i in part.content):
            return  # files a tool returned stay with their call (a later version may store them too)
        tokens = self.counter.count_part(part)
        if tokens < self.min_tokens:
            return
        call = self.calls.get(part.tool_call_id)
        described = describe_call(call, part.tool_name)
        key = _call_key(call, part.tool_name)
        again = bool(key) and self.last_index.get(key, index) > index
        text, media_type, _ = tool_return_text(part)  # files were ruled out above
        if part.tool_name == readback_tool():  # already in the store: the same call reads it again
            stub = f'{_STUB_OPENING} {described} returned {len(text):,} characters from the store: '
            stub += 'the same call reads them again.'
            after = self.counter.count_part(dataclasses.replace(part, content=stub))
            self.add(Stub(index, p_index, None, '', None, media_type, described, stub, tokens, after))
            return
        if isinstance(ours, dict) and isinstance(ours.get('artifact_id'), str) and ours['artifact_id']:
            # the artifact stage stored the original under this id before it reduced the part
            artifact_id, data, size = ours['artifact_id'], None, _size(ours, text)
        else:
            data = utf8(text)
            artifact_id, size = self.make_id(data), f'{len(text):,} characters'
        repeat = artifact_id in self.seen
        if repeat:
            data = None
        stub = _tool_stub(described, size, artifact_id, text, self.head_chars, repeat=repeat, again=again)
        after = self.counter.count_part(dataclasses.replace(part, content=stub))
        self.add(Stub(index, p_index, None, artifact_id, data, media_type, described, stub, tokens, after))

    def user_files(self, index: int, p_index: int, content: Sequence[Any]) -> None:
        for i_index, item in enumerate(content):
            if isinstance(item, BinaryContent):
                data, media_type = item.data, item.media_type
                tokens = self.counter.count_part(UserPromptPart(content=[item]))
                described = f'attached file {getattr(item, "identifier", None) or media_type}'
                size = f'{len(data):,} bytes, {media_type}'
                head = ''
            elif isinstance(item, str) and (body := unseal('artifact', item)) is not None:
                # a document the artifact stage converted to text (its original is stored under its own id)
                tokens = self.counter.count_part(UserPromptPart(content=[item]))
                data, media_type = utf8(body), 'text/markdown'
                described = 'the text of an attached file'
                size = f'{len(body):,} characters'
                head = body
            else:
                continue
            if tokens < self.min_tokens:
                continue
            artifact_id = self.make_id(data)
            repeat = artifact_id in self.seen
            stub = seal('artifact', _file_stub(described, size, artifact_id, head, self.head_chars, repeat))
            after = self.counter.count_part(UserPromptPart(content=[stub]))
            stored = None if repeat else data
            self.add(
                Stub(index, p_index, i_index, artifact_id, stored, media_type, described, stub, tokens, after)
            )

    def add(self, stub: Stub) -> None:
        """Keep `stub` when it costs less than what it replaces; only then is its original stored, so only
        then may a later copy point back to it as a repeat."""
        if stub.tokens_after < stub.tokens_before:
            self.stubs.append(stub)
            if stub.artifact_id:  # a read-back's stub stores nothing: the same call reads it again
                self.seen.add(stub.artifact_id)


def _size(ours: dict[str, Any], text: str) -> str:
    original = ours.get('original_tokens')
    return f'~{original:,} tokens' if isinstance(original, int) else f'{len(text):,} characters'


def _read_hint(artifact_id: str) -> str:
    return f'{readback_tool()}(artifact_id="{artifact_id}", query=...) returns it exactly'


def _tool_stub(
    described: str, size: str, artifact_id: str, text: str, head_chars: int, *, repeat: bool, again: bool
) -> str:
    if repeat:
        same = f'returned the same {size} as an earlier call'
        return f'{_STUB_OPENING} {described} {same}: {_read_hint(artifact_id)}.'
    note = ' (the same call was made again later)' if again else ''
    stub = f'{_STUB_OPENING} {described} returned {size}{note}: {_read_hint(artifact_id)}.'
    if again or head_chars <= 0:
        return stub
    return f'{stub}\nIt began: {_head(text, head_chars)}'


def _file_stub(described: str, size: str, artifact_id: str, head: str, head_chars: int, repeat: bool) -> str:
    same = ' (the same file as earlier)' if repeat else ''
    stub = f'{_STUB_OPENING} {described}{same} ({size}): {_read_hint(artifact_id)}.'
    if not head or repeat or head_chars <= 0:
        return stub
    return f'{stub}\nIt began: {_head(head, head_chars)}'


def _replacement(stub: Stub) -> Replacement:
    """What stands for a stubbed part (its marker in metadata) or file (its stub sealed already)."""
    if stub.item is not None:
        return Replacement(stub.text)
    return Replacement(stub.text, stored_marker(stub.artifact_id, stub.tokens_before, STUB_STRATEGY))
