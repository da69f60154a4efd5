"""Calibrate `TokenCounter` against the prompt token counts providers really reported.

Each row of `token_calibration/pydantic_ai_cassettes_prompt_tokens.jsonl` is one recorded request (OpenAI
Chat, OpenAI Responses or Anthropic `count_tokens`) in its provider wire format with the provider's own
`prompt_tokens`. We turn the wire request back into PydanticAI messages (the inverse of pydantic-ai's own
mapping: system/developer -> `SystemPromptPart`, user -> `UserPromptPart`, assistant -> `ModelResponse`,
tool results -> `ToolReturnPart`, provider-run tools -> native tool parts), estimate it the way the processor
does (`TokenCounter.estimate` plus `count_tool_definitions` for function tools) and report the signed
relative error `(estimate - real) / real`.

Categories:
- `tool-free`: no tool definitions in the request (tool calls in the history are still allowed);
- `tools`: function tool definitions only;
- `native-tools`: provider-run tools (web search, code interpreter, MCP, tool search, memory) whose hidden
  system prompts no client can count; reported, never used for tuning;
- `opaque`: requests carrying encrypted reasoning or compaction items, whose size is not in the text.

Run: `TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache python benchmarks/calibrate_tokens.py [path.jsonl]`.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import messages as _m
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition

from pydantic_ai_history.tokens import TokenCounter

DEFAULT_PATH = (
    Path(__file__).resolve().parents[2]
    / 'shared/fixtures/token_calibration/pydantic_ai_cassettes_prompt_tokens.jsonl'
)

_NativeCall: Any = getattr(_m, 'NativeToolCallPart', None) or _m.BuiltinToolCallPart
_NativeReturn: Any = getattr(_m, 'NativeToolReturnPart', None) or _m.BuiltinToolReturnPart

_NATIVE_ITEMS = {
    'web_search_call',
    'code_interpreter_call',
    'mcp_call',
    'mcp_list_tools',
    'tool_search_call',
    'tool_search_output',
    'additional_tools',
    'file_search_call',
    'image_generation_call',
}


@dataclass(frozen=True)
class Row:
    api: str
    model: str
    prompt_tokens: int
    messages: list[ModelMessage]
    tools: list[ToolDefinition]
    category: str
    cassette: str


def load_rows(path: Path = DEFAULT_PATH) -> list[Row]:
    """Every recorded request as PydanticAI messages and tool definitions."""
    rows: list[Row] = []
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        messages, opaque, native_items = _to_messages(raw)
        tools, native_tools = _tool_definitions(raw.get('tools') or [])
        if opaque:
            category = 'opaque'
        elif native_tools or native_items:
            category = 'native-tools'
        elif tools:
            category = 'tools'
        else:
            category = 'tool-free'
        rows.append(
            Row(
                raw['api'],
                raw['model'],
                int(raw['prompt_tokens']),
                messages,
                tools,
                category,
                raw['cassette'],
            )
        )
    return rows


def counter_model_name(row: Row) -> str:
    provider = 'anthropic' if row.api.startswith('anthropic') else 'openai'
    return f'{provider}:{row.model}'


def estimate_row(row: Row, counter: TokenCounter | None = None) -> int:
    """Our estimate of the request: the messages (anchor-free) plus the function tool definitions."""
    counter = counter or TokenCounter(counter_model_name(row))
    return counter.estimate(row.messages).total + counter.count_tool_definitions(row.tools)


def relative_errors(rows: Sequence[Row]) -> list[tuple[Row, int, float]]:
    counters: dict[str, TokenCounter] = {}
    out: list[tuple[Row, int, float]] = []
    for row in rows:
        name = counter_model_name(row)
        counter = counters.setdefault(name, TokenCounter(name))
        estimate = estimate_row(row, counter)
        out.append((row, estimate, (estimate - row.prompt_tokens) / row.prompt_tokens))
    return out


# ---- wire format -> PydanticAI messages ---------------------------------------------------------------


def _text_of(content: Any) -> str:
    if content is None:
        return ''
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return '\n\n'.join(_text_of(block) for block in content)
    if isinstance(content, dict):
        for key in ('text', 'thinking', 'output', 'content'):
            if key in content:
                return _text_of(content[key])
    return json.dumps(content)


class _Builder:
    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.request: list[Any] = []
        self.response: list[Any] = []
        self.call_names: dict[str, str] = {}

    def add_request_part(self, part: Any) -> None:
        if self.response:
            self.messages.append(ModelResponse(parts=self.response))
            self.response = []
        self.request.append(part)

    def add_response_part(self, part: Any) -> None:
        if self.request:
            self.messages.append(ModelRequest(parts=self.request))
            self.request = []
        self.response.append(part)

    def finish(self) -> list[ModelMessage]:
        if self.response:
            self.messages.append(ModelResponse(parts=self.response))
        if self.request:
            self.messages.append(ModelRequest(parts=self.request))
        return self.messages


def _to_messages(raw: dict[str, Any]) -> tuple[list[ModelMessage], bool, bool]:
    """(messages, opaque, native items) for one wire request."""
    builder = _Builder()
    opaque = native = False
    for key in ('instructions', 'system'):
        if raw.get(key):
            builder.add_request_part(SystemPromptPart(content=_text_of(raw[key])))
    items = raw.get('messages') if raw.get('messages') is not None else raw.get('input') or []
    if isinstance(items, str):
        items = [{'role': 'user', 'content': items}]
    for item in items:
        kind = item.get('type')
        role = item.get('role')
        if kind in {'reasoning', 'compaction'}:
            if item.get('encrypted_content'):
                opaque = True
            summary = _text_of(item.get('summary') or '')
            if summary:
                builder.add_response_part(ThinkingPart(content=summary))
        elif kind == 'function_call':
            builder.call_names[item['call_id']] = item['name']
            builder.add_response_part(
                ToolCallPart(
                    tool_name=item['name'], args=item.get('arguments') or '{}', tool_call_id=item['call_id']
                )
            )
        elif kind == 'function_call_output':
            name = builder.call_names.get(item['call_id'], 'tool')
            builder.add_request_part(
                ToolReturnPart(
                    tool_name=name, content=_text_of(item.get('output')), tool_call_id=item['call_id']
                )
            )
        elif kind in _NATIVE_ITEMS:
            native = True
            body = {k: v for k, v in item.items() if k not in {'type', 'id', 'status', 'call_id'}}
            builder.add_response_part(
                _NativeCall(tool_name=kind, args=body, tool_call_id=item.get('id') or kind)
            )
        elif role in {'system', 'developer'}:
            builder.add_request_part(SystemPromptPart(content=_text_of(item.get('content'))))
        elif role == 'user':
            _user_item(builder, item.get('content'))
        elif role == 'assistant':
            _assistant_item(builder, item)
        elif role == 'tool':
            name = builder.call_names.get(item.get('tool_call_id', ''), 'tool')
            builder.add_request_part(
                ToolReturnPart(
                    tool_name=name, content=_text_of(item.get('content')), tool_call_id=item['tool_call_id']
                )
            )
        else:
            raise ValueError(f'unknown wire item {item!r:.200}')
    return builder.finish(), opaque, native


def _user_item(builder: _Builder, content: Any) -> None:
    if not isinstance(content, list):
        builder.add_request_part(UserPromptPart(content=_text_of(content)))
        return
    texts: list[str] = []
    for block in content:
        if block.get('type') == 'tool_result':  # Anthropic returns live in the user turn
            if texts:
                builder.add_request_part(UserPromptPart(content='\n\n'.join(texts)))
                texts = []
            call_id = block['tool_use_id']
            builder.add_request_part(
                ToolReturnPart(
                    tool_name=builder.call_names.get(call_id, 'tool'),
                    content=_text_of(block.get('content')),
                    tool_call_id=call_id,
                )
            )
        else:
            texts.append(_text_of(block))
    if texts:
        builder.add_request_part(UserPromptPart(content='\n\n'.join(texts)))


def _assistant_item(builder: _Builder, item: dict[str, Any]) -> None:
    content = item.get('content')
    blocks = content if isinstance(content, list) else [content] if content else []
    for block in blocks:
        if isinstance(block, dict) and block.get('type') == 'tool_use':
            builder.call_names[block['id']] = block['name']
            builder.add_response_part(
                ToolCallPart(tool_name=block['name'], args=block.get('input') or {}, tool_call_id=block['id'])
            )
        elif isinstance(block, dict) and block.get('type') == 'thinking':
            builder.add_response_part(
                ThinkingPart(content=block.get('thinking', ''), signature=block.get('signature'))
            )
        else:
            builder.add_response_part(TextPart(content=_text_of(block)))
    for call in item.get('tool_calls') or []:
        function = call['function']
        builder.call_names[call['id']] = function['name']
        builder.add_response_part(
            ToolCallPart(
                tool_name=function['name'], args=function.get('arguments') or '{}', tool_call_id=call['id']
            )
        )
    if not builder.response:  # an assistant turn with nothing in it still takes a message slot
        builder.add_response_part(TextPart(content=''))


def _tool_definitions(tools: list[dict[str, Any]]) -> tuple[list[ToolDefinition], bool]:
    """Function tools as `ToolDefinition`s, and whether provider-run tools were present."""
    defs: list[ToolDefinition] = []
    native = False
    for tool in tools:
        spec = tool.get('function', tool)
        schema = spec.get('parameters') or spec.get('input_schema')
        if (tool.get('type', 'function') != 'function' and 'input_schema' not in tool) or schema is None:
            native = True
            continue
        defs.append(
            ToolDefinition(
                name=spec['name'], description=spec.get('description') or None, parameters_json_schema=schema
            )
        )
    return defs, native


# ---- report -------------------------------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(errors: Sequence[float]) -> dict[str, float]:
    absolute = [abs(e) for e in errors]
    return {
        'n': len(errors),
        'median_signed': statistics.median(errors),
        'median_abs': statistics.median(absolute),
        'p90_abs': _quantile(absolute, 0.9),
        'max_abs': max(absolute),
    }


def groups(results: Sequence[tuple[Row, int, float]]) -> Iterator[tuple[str, list[float]]]:
    by: dict[str, list[float]] = defaultdict(list)
    for row, _, error in results:
        by[f'{row.api} / {row.category}'].append(error)
        family = 'anthropic' if row.api.startswith('anthropic') else 'openai'
        by[f'ALL {family} / {row.category}'].append(error)
    yield from sorted(by.items())


def main(argv: Sequence[str] = ()) -> None:
    paths = [a for a in argv if not a.startswith('-')]
    path = Path(paths[0]) if paths else DEFAULT_PATH
    results = relative_errors(load_rows(path))
    header = f'{"group":42} {"n":>4} {"median":>8} {"|median|":>9} {"|p90|":>8} {"|max|":>8}'
    print(header)
    print('-' * len(header))
    for name, errors in groups(results):
        s = summarize(errors)
        print(
            f'{name:42} {s["n"]:>4} {s["median_signed"]:>+8.1%} {s["median_abs"]:>9.1%} '
            f'{s["p90_abs"]:>8.1%} {s["max_abs"]:>8.1%}'
        )
    if '-v' in argv:
        for row, estimate, error in sorted(results, key=lambda r: r[2]):
            print(
                f'{error:+7.1%} {estimate:>6} {row.prompt_tokens:>6} {row.api:24} {row.model:22} '
                f'{row.category:12} {row.cassette[-70:]}'
            )


if __name__ == '__main__':
    main(sys.argv[1:])
