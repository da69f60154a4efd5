"""Hypothesis strategies for PydanticAI histories, valid and broken, on every supported pydantic-ai version.

A valid history is built the way an agent run grows one: an opening request (system prompts, a user prompt,
maybe a small image or PDF), then rounds of model responses (text, signed or unsigned thinking, native tool
call + return pairs, 0-3 parallel function tool calls) each followed by the request that answers every call
(tool returns, approvals denied or granted, or retry prompts naming the tool, in any order) or by a new user
turn. As in pydantic-ai's own tests, the returns of one response are sometimes split over two requests
(deferred tools, a human-approval resume), sometimes come after an intervening text response, and the history
sometimes ends on a live frontier: a response whose approval is still pending, then a new prompt. It always
ends with a request: the current one. Every user prompt and tool return carries a unique marker
(`MARK-...`), so a test can check that content is kept or retrievable.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history import validate_history
from pydantic_ai_history._compat import (
    COMPACTION_REQUEST_PART,
    NATIVE_TOOL_CALL_PARTS,
    NATIVE_TOOL_RETURN_PARTS,
    RETRY_FEEDBACK_PART,
)

__all__ = (
    'MARKER',
    'RELIABILITY',
    'broken_histories',
    'dump',
    'error_count',
    'errors',
    'histories',
    'markers_in',
    'needs_repair',
    'text_of',
)

RELIABILITY = settings(
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""No example database (runs do not depend on earlier ones), no deadline (the first example loads the
tokenizer); each test sets its own moderate `max_examples`."""

MARKER = re.compile(r'MARK-[a-z0-9]+-\d+')

_WORDS = tuple(
    ' '.join(
        (
            'the agent reads a file and the tool returns rows of data while a user asks about',
            'latency deploy config 2024 error retry json {"id": 17, "ok": true} 東京 données naïve def',
            'SELECT * FROM orders WHERE status = shipped; path/to/module.py:42 0x7ffe 3.14159 -- ok',
        )
    ).split(' ')
)


def _pick(names: tuple[str, ...]) -> Any:
    """The non-deprecated class among the version's native (builtin) tool part names."""
    by_name = {cls.__name__: cls for cls in names}  # type: ignore[attr-defined]
    return (
        by_name.get('NativeToolCallPart')
        or by_name.get('NativeToolReturnPart')
        or next(iter(by_name.values()))
    )


NATIVE_CALL: Any = _pick(NATIVE_TOOL_CALL_PARTS)  # type: ignore[arg-type]
NATIVE_RETURN: Any = _pick(NATIVE_TOOL_RETURN_PARTS)  # type: ignore[arg-type]
_RETRIED_OUTCOME = 'retried' in str(ToolReturnPart.__dataclass_fields__.get('outcome', ''))
"""2.x records a tool retry as `ToolReturnPart(outcome='retried')` besides `RetryPromptPart`."""


def _png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new('RGB', (48, 32), (200, 30, 90)).save(buffer, format='PNG')
    return buffer.getvalue()


PNG = _png()
PDF = (
    b'%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n'
    b'2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n'
    b'3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 10 10]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n'
)

# Sizes in words: mostly small, sometimes a page, rarely a large tool output.
_sizes = st.one_of(
    st.integers(1, 40),
    st.integers(40, 400),
    st.integers(134, 1_000).map(lambda n: n * 3),
)


def _text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return ' '.join(rng.choice(_WORDS) for _ in range(words))


class _Ids:
    """Unique tool call ids and markers within one history."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.n = 0

    def next(self, kind: str) -> str:
        self.n += 1
        return f'{kind}-{self.tag}-{self.n}'

    def marker(self, kind: str) -> str:
        self.n += 1
        return f'MARK-{self.tag}{kind}-{self.n}'


@st.composite
def _body(draw: st.DrawFn, ids: _Ids, kind: str) -> str:
    seed = draw(st.integers(0, 2**16))
    return f'{ids.marker(kind)} {_text(seed, draw(_sizes))}'


@st.composite
def _user_prompt(draw: st.DrawFn, ids: _Ids, files: bool) -> UserPromptPart:
    text = draw(_body(ids, 'u'))
    attachment = draw(st.sampled_from(['none', 'none', 'image', 'pdf'])) if files else 'none'
    if attachment == 'image':
        return UserPromptPart(content=[text, BinaryContent(data=PNG, media_type='image/png')])
    if attachment == 'pdf':
        return UserPromptPart(content=[text, BinaryContent(data=PDF, media_type='application/pdf')])
    return UserPromptPart(content=text)


@st.composite
def _response(draw: st.DrawFn, ids: _Ids, calls: int) -> ModelResponse:
    parts: list[Any] = []
    thinking = draw(st.sampled_from(['none', 'none', 'plain', 'signed']))
    if thinking != 'none':
        parts.append(
            ThinkingPart(
                content=_text(draw(st.integers(0, 999)), draw(st.integers(3, 120))),
                signature=f'sig-{ids.next("th")}' if thinking == 'signed' else None,
            )
        )
    if draw(st.integers(0, 4)) == 0:
        call_id = ids.next('native')
        parts.append(NATIVE_CALL(tool_name='web_search', args={'query': 'weather'}, tool_call_id=call_id))
        results = [_text(draw(st.integers(0, 999)), 30)]
        parts.append(
            NATIVE_RETURN(tool_name='web_search', content={'results': results}, tool_call_id=call_id)
        )
    if calls == 0 or draw(st.booleans()):
        parts.append(TextPart(content=_text(draw(st.integers(0, 999)), draw(_sizes))))
    for _ in range(calls):
        args = draw(st.sampled_from(['dict', 'json', 'none']))
        parts.append(
            ToolCallPart(
                tool_name=draw(st.sampled_from(['search', 'read_file', 'run_sql'])),
                args={'q': _text(len(parts), 4)}
                if args == 'dict'
                else ('{"path": "a.py"}' if args == 'json' else None),
                tool_call_id=ids.next('call'),
            )
        )
    usage = RequestUsage(input_tokens=draw(st.integers(0, 60_000)), output_tokens=draw(st.integers(1, 500)))
    return ModelResponse(parts=parts, usage=usage, model_name='gpt-4o')


@st.composite
def _returns(draw: st.DrawFn, ids: _Ids, response: ModelResponse) -> ModelRequest:
    parts: list[Any] = []
    for call in response.parts:
        if not isinstance(call, ToolCallPart):
            continue
        outcome = draw(st.sampled_from(['text', 'text', 'dict', 'retry', 'retried', 'denied']))
        body = draw(_body(ids, 't'))
        if outcome in {'retried', 'denied'} and _RETRIED_OUTCOME:
            parts.append(
                ToolReturnPart(
                    tool_name=call.tool_name, content=body, tool_call_id=call.tool_call_id, outcome=outcome
                )
            )
        elif outcome in {'retry', 'retried'}:
            parts.append(
                RetryPromptPart(content=body, tool_name=call.tool_name, tool_call_id=call.tool_call_id)
            )
        elif outcome == 'dict':
            content = {'rows': [{'id': i, 'text': body if i == 0 else 'x'} for i in range(3)]}
            parts.append(
                ToolReturnPart(tool_name=call.tool_name, content=content, tool_call_id=call.tool_call_id)
            )
        else:
            parts.append(
                ToolReturnPart(tool_name=call.tool_name, content=body, tool_call_id=call.tool_call_id)
            )
    return ModelRequest(parts=draw(st.permutations(parts)))


@st.composite
def _user_turn(draw: st.DrawFn, ids: _Ids, files: bool, compaction: bool) -> ModelRequest:
    parts: list[Any] = []
    if compaction and COMPACTION_REQUEST_PART is not None and draw(st.integers(0, 5)) == 0:
        parts.append(COMPACTION_REQUEST_PART(content='Earlier: ' + _text(draw(st.integers(0, 999)), 60)))
    if draw(st.integers(0, 7)) == 0:
        # an output-validation retry: a retry that answers no tool call (2.x also has `RetryFeedbackPart`)
        if RETRY_FEEDBACK_PART is not None and draw(st.booleans()):
            from pydantic_ai.messages import RetryInfo  # type: ignore[attr-defined]

            parts.append(
                RETRY_FEEDBACK_PART(
                    content='output did not validate', retry=RetryInfo(cause='validation_error')
                )
            )
        else:
            parts.append(RetryPromptPart(content='output did not validate, try again'))
    else:
        parts.append(draw(_user_prompt(ids, files)))
    return ModelRequest(parts=parts)


@st.composite
def histories(
    draw: st.DrawFn,
    *,
    max_rounds: int = 10,
    files: bool = True,
    compaction: bool = True,
    tag: str = 'h',
) -> list[ModelMessage]:
    """A valid history ending with the current request; `tag` goes into every marker and call id."""
    ids = _Ids(tag)
    first: list[Any] = [
        SystemPromptPart(content=f'You are helpful. {_text(s, 25)}') for s in range(draw(st.integers(0, 2)))
    ]
    first.append(draw(_user_prompt(ids, files)))
    messages: list[ModelMessage] = [ModelRequest(parts=first)]
    for _ in range(draw(st.integers(0, max_rounds))):
        calls = draw(st.sampled_from([0, 1, 1, 1, 2, 3]))
        response = draw(_response(ids, calls))
        messages.append(response)
        if calls:
            messages.extend(draw(_answers(ids, response)))
        else:
            messages.append(draw(_user_turn(ids, files, compaction)))
    if draw(st.integers(0, 7)) == 0:
        messages.extend(draw(_pending_approval(ids, files)))
    return messages


@st.composite
def _answers(draw: st.DrawFn, ids: _Ids, response: ModelResponse) -> list[ModelMessage]:
    """The request(s) answering a response's calls: one request; or, as pydantic-ai writes them, the returns
    split over two requests (a deferred-tool or approval resume), or given after an intervening response."""
    returns = draw(_returns(ids, response))
    shape = draw(st.sampled_from(['one'] * 6 + ['split', 'intervening']))
    if shape == 'split' and len(returns.parts) >= 2:
        k = draw(st.integers(1, len(returns.parts) - 1))
        return [ModelRequest(parts=returns.parts[:k]), ModelRequest(parts=returns.parts[k:])]
    if shape == 'intervening':
        interim = ModelResponse(
            parts=[TextPart(content=_text(draw(st.integers(0, 999)), 12))], model_name='gpt-4o'
        )
        return [interim, returns]
    return [returns]


@st.composite
def _pending_approval(draw: st.DrawFn, ids: _Ids, files: bool) -> list[ModelMessage]:
    """A run that ended with `DeferredToolRequests` (one call answered, one waiting for approval), then a new
    prompt: the pending call is the live frontier pydantic-ai leaves open."""
    response = draw(_response(ids, 2))
    returns = draw(_returns(ids, response))
    return [response, ModelRequest(parts=returns.parts[:1]), draw(_user_turn(ids, files, False))]


# ---- broken input ------------------------------------------------------------------------------------------


def _corruptions(messages: list[ModelMessage]) -> list[str]:
    found = ['starts_with_response', 'empty_message']
    if any(
        isinstance(m, ModelResponse) and any(isinstance(p, ToolCallPart) for p in m.parts) for m in messages
    ):
        found += ['orphan_return', 'dangling_call', 'duplicate_id']
    return found


@st.composite
def broken_histories(draw: st.DrawFn, *, max_rounds: int = 8) -> list[ModelMessage]:
    """A history with 1-3 invariant violations: orphan returns, dangling calls, duplicate ids, empty
    messages, or a response first. The last message is still a request."""
    messages = list(draw(histories(max_rounds=max_rounds, files=False)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(_corruptions(messages)))
        with_calls = [
            i
            for i, m in enumerate(messages)
            if isinstance(m, ModelResponse) and any(isinstance(p, ToolCallPart) for p in m.parts)
        ]
        if kind == 'starts_with_response':
            messages.insert(0, ModelResponse(parts=[TextPart(content='a reply whose request is lost')]))
        elif kind == 'empty_message':
            at = draw(st.integers(0, len(messages) - 1))
            messages.insert(at, draw(st.sampled_from([ModelRequest(parts=[]), ModelResponse(parts=[])])))
        elif kind == 'orphan_return':
            # drop a call from its response: its return (in the next request) answers nothing
            i = draw(st.sampled_from(with_calls))
            response = messages[i]
            calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
            drop = draw(st.sampled_from(calls))
            messages[i] = replace(response, parts=[p for p in response.parts if p is not drop])
        elif kind == 'dangling_call':
            i = draw(st.sampled_from(with_calls))
            if i + 1 < len(messages):
                request = messages[i + 1]
                keep = draw(st.integers(0, max(len(request.parts) - 1, 0)))
                messages[i + 1] = replace(request, parts=list(request.parts)[:keep])
            else:  # the response is last: add the current request without its returns
                messages.append(ModelRequest(parts=[UserPromptPart(content='go on')]))
        else:  # duplicate_id: two calls in one response share an id
            i = draw(st.sampled_from(with_calls))
            response = messages[i]
            call = next(p for p in response.parts if isinstance(p, ToolCallPart))
            twin = replace(call, tool_name='search')
            messages[i] = replace(response, parts=[*response.parts, twin])
    if not isinstance(messages[-1], ModelRequest) or not messages[-1].parts:
        messages.append(ModelRequest(parts=[UserPromptPart(content='MARK-cur-0 the current question')]))
    assume(error_count(messages) > 0)  # rarely a corruption cancels out (a dropped return of a dropped call)
    return messages


# ---- checks ------------------------------------------------------------------------------------------------


def dump(messages: Sequence[ModelMessage]) -> bytes:
    """The history serialized: equal bytes before and after means nothing was mutated."""
    return ModelMessagesTypeAdapter.dump_json(list(messages))


def errors(messages: Sequence[ModelMessage], **kwargs: Any) -> list[str]:
    return [str(v) for v in validate_history(messages, **kwargs) if v.severity == 'error']


def error_count(messages: Sequence[ModelMessage]) -> int:
    return len(errors(messages))


def needs_repair(messages: Sequence[ModelMessage]) -> bool:
    """Whether pydantic-ai's pre-send repair (2.x: drop orphan results, answer dangling calls but the live
    frontier's) would change `messages`; False on versions without it."""
    import pydantic_ai.messages as pai_messages

    drop = getattr(pai_messages, '_drop_orphaned_tool_results', None)
    repair = getattr(pai_messages, '_repair_dangling_tool_calls', None)
    if drop is None or repair is None:
        return False
    history = list(messages)
    repaired = repair(drop(history), repair_last_response=False)
    return len(repaired) != len(history) or any(a is not b for a, b in zip(repaired, history, strict=True))


def text_of(value: Any) -> str:
    """Every string inside messages, parts, contents, dicts and lists (binary data excluded), joined."""
    out: list[str] = []
    _collect(value, out)
    return '\n'.join(out)


def _collect(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, (bytes, bytearray, BinaryContent)):
        return
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, out)
    elif hasattr(value, 'parts'):
        _collect(list(value.parts), out)
        instructions = getattr(value, 'instructions', None)
        if isinstance(instructions, str):
            out.append(instructions)
    elif hasattr(value, 'content'):
        _collect(value.content, out)
        args = getattr(value, 'args', None)
        if args is not None:
            _collect(args, out)
    elif hasattr(value, 'args'):
        _collect(value.args, out)


def markers_in(value: Any) -> set[str]:
    return set(MARKER.findall(text_of(value)))
