"""Builders for test histories: real fixture conversations as processor input, and small messages."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history.messages.units import tool_call_ids


def load_conversation(path: Path) -> list[ModelMessage]:
    """A fixture conversation as a processor receives it: ending with the current `ModelRequest`.

    Many SWE runs end with a `ModelResponse` whose tool call never got its return (the run stopped there).
    We *append* the missing tool return rather than dropping the response: the history keeps all its real
    content, and its last unit (the call and its return) becomes the current request, as pydantic-ai would
    hand it to the processor after running the tool.
    """
    messages = list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
    last = messages[-1]
    if isinstance(last, ModelResponse):
        calls = [p for p in last.parts if isinstance(p, ToolCallPart)]
        if calls:
            messages.append(
                ModelRequest(
                    parts=[
                        ToolReturnPart(c.tool_name, 'the run ended before this tool returned', c.tool_call_id)
                        for c in calls
                    ]
                )
            )
        else:
            messages.append(ModelRequest(parts=[UserPromptPart('please continue')]))
    return messages


def conversations(fixtures_dir: Path) -> list[Path]:
    return sorted((fixtures_dir / 'conversations').glob('*.json'))


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def system_user(system: str, text: str) -> ModelRequest:
    return ModelRequest(parts=[SystemPromptPart(system), UserPromptPart(text)])


def reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def call(tool: str, call_id: str, args: dict[str, object] | None = None) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, args or {}, tool_call_id=call_id)])


def result(tool: str, call_id: str, content: object) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart(tool, content, call_id)])


def is_suffix_by_identity(tail: Sequence[ModelMessage], messages: Sequence[ModelMessage]) -> bool:
    """Whether `tail` is exactly the last `len(tail)` messages of `messages` (the same objects)."""
    if len(tail) > len(messages):
        return False
    return all(a is b for a, b in zip(tail, messages[len(messages) - len(tail) :], strict=False))


__all__ = [
    'call',
    'conversations',
    'is_suffix_by_identity',
    'load_conversation',
    'reply',
    'result',
    'system_user',
    'tool_call_ids',
    'user',
]
