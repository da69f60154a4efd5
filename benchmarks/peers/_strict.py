"""A strict simulated provider shared by every package under comparison (needs pydantic-ai + tiktoken only).

It renders each request roughly as OpenAI Chat would receive it (pydantic-ai's own string renderings of tool
calls and returns, the tool definitions, the instructions, a few tokens per message), counts it with the real
o200k tokenizer, reports that count as `usage.input_tokens`, and *records* (never raises) every request
over its context window and every broken tool pairing, so a run always goes to the end and can be scored.

The same file is imported in every package's virtual environment, so all three are judged by one ruler.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
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
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

__all__ = ('Encoder', 'StrictProvider', 'count_history', 'part_text')

# Framing, fitted to the gpt-4o Chat requests recorded with their real prompt_tokens in
# ../shared/fixtures/token_calibration: a request of one user message costs its text + 7, of system + user its
# text + 11 (4 per message + 3 to prime the reply), and one tool call with its result 7 more than their text.
MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3
TOOL_CALL_OVERHEAD = 4
TOOL_RETURN_OVERHEAD = 3


class Encoder:
    """o200k counts memoized by content (the provider recounts the same strings on every request)."""

    def __init__(self, encoding: str = 'o200k_base') -> None:
        import tiktoken

        self._enc = tiktoken.get_encoding(encoding)
        self._memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if not text:
            return 0
        n = self._memo.get(text)
        if n is None:
            n = len(self._enc.encode_ordinary(text))
            if len(self._memo) > 200_000:
                self._memo.clear()
            self._memo[text] = n
        return n


def part_text(part: Any) -> str:
    """A part's text as the provider receives it (pydantic-ai's own renderings where it has them).

    Tool call ids are left out: OpenAI's recorded prompt_tokens (fixtures/token_calibration) are lower than
    the ids' own token count would allow (e.g. 65 prompt tokens for 35 tokens of text plus 38 of ids).
    """
    if isinstance(part, ToolCallPart):
        return f'{part.tool_name} {part.args_as_json_str()}'
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, RetryPromptPart):
        return part.model_response()
    if isinstance(part, (SystemPromptPart, TextPart, ThinkingPart)):
        return part.content
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            return part.content
        return '\n'.join(
            item if isinstance(item, str) else str(getattr(item, 'content', '')) for item in part.content
        )
    content = getattr(part, 'content', None)  # CompactionPart and other text-carrying parts
    return content if isinstance(content, str) else ''


def count_history(messages: Sequence[ModelMessage], encode: Callable[[str], int]) -> int:
    """Tokens of the request a history makes, without tools or instructions (the accuracy truth)."""
    total = REPLY_PRIMING
    for message in messages:
        total += MESSAGE_OVERHEAD
        for part in message.parts:
            total += encode(part_text(part))
            if isinstance(part, ToolCallPart):
                total += TOOL_CALL_OVERHEAD
            elif isinstance(part, ToolReturnPart):
                total += TOOL_RETURN_OVERHEAD
    return total


@dataclass
class Record:
    input_tokens: int
    messages: int
    over: bool
    pairing_error: str | None


@dataclass
class StrictProvider:
    """The function behind a `FunctionModel`: counts, records overflows, answers with `respond`."""

    respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse]
    context_window: int
    encode: Encoder = field(default_factory=Encoder)
    requests: list[Record] = field(default_factory=list)
    counting_seconds: float = 0.0

    def model(self, model_name: str = 'gpt-4o') -> FunctionModel:
        try:
            return FunctionModel(self, model_name=model_name, profile={'context_window': self.context_window})  # type: ignore[arg-type]
        except TypeError:
            return FunctionModel(self, model_name=model_name)

    def count(self, messages: Sequence[ModelMessage], info: AgentInfo | None) -> int:
        total = count_history(messages, self.encode)
        if info is not None:
            instructions = getattr(info, 'instructions', None)
            if isinstance(instructions, str):
                total += self.encode(instructions)
            for tool in [*info.function_tools, *info.output_tools]:
                total += self.encode(
                    json.dumps(
                        {
                            'name': tool.name,
                            'description': tool.description,
                            'parameters': tool.parameters_json_schema,
                        }
                    )
                )
        return total

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started = time.perf_counter()
        tokens = self.count(messages, info)
        self.counting_seconds += time.perf_counter() - started
        self.requests.append(
            Record(tokens, len(messages), tokens > self.context_window, pairing_error(messages))
        )
        response = self.respond(messages, info)
        output = sum(self.encode(part_text(p)) for p in response.parts)
        response.usage = RequestUsage(input_tokens=tokens, output_tokens=output)
        return response

    @property
    def overflows(self) -> int:
        return sum(r.over for r in self.requests)


def _call_ids(message: ModelMessage) -> list[str]:
    return [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]


def _return_ids(message: ModelMessage) -> list[str]:
    return [
        p.tool_call_id
        for p in message.parts
        if isinstance(p, ToolReturnPart) or (isinstance(p, RetryPromptPart) and p.tool_name is not None)
    ]


def pairing_error(messages: Sequence[ModelMessage]) -> str | None:
    """What OpenAI/Anthropic would answer with a 400 for, or None."""
    if not messages:
        return 'empty request'
    if isinstance(messages[0], ModelResponse):
        return 'history starts with a model response'
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            following = messages[index + 1] if index + 1 < len(messages) else None
            answered = set(_return_ids(following)) if isinstance(following, ModelRequest) else set()
            missing = [c for c in _call_ids(message) if c not in answered]
            if missing:
                return f'tool calls without results: {missing[:3]}'
        else:
            previous = messages[index - 1] if index > 0 else None
            called = set(_call_ids(previous)) if isinstance(previous, ModelResponse) else set()
            orphans = [c for c in _return_ids(message) if c not in called]
            if orphans:
                return f'tool results without calls: {orphans[:3]}'
    return None
