"""Histories of 100 to 20,000 messages built from the real conversations in ../shared/fixtures/conversations.

The conversations are joined back to back (later system prompts dropped, each closed by a short answer) until
the wanted length, which ends with a request (pydantic-ai's history always does). Each repetition of the pool
tags its texts with the repetition number, so no text repeats across repetitions: a cold count has to
tokenize all of it, as it would in a real long run. Every response carries the usage a provider reports
(its input = the o200k count of its prefix), as in a history saved from real runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

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
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history.tokens import TokenCounter

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
CONVERSATIONS = SHARED / 'fixtures' / 'conversations'
SIZES = (100, 1_000, 5_000, 20_000)


def _conversations() -> list[list[ModelMessage]]:
    out = []
    for path in sorted(CONVERSATIONS.glob('*.json')):
        messages = list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
        while messages and isinstance(messages[-1], ModelResponse):
            messages.pop()  # SWE runs end with an unanswered call
        if len(messages) >= 3:
            out.append(messages)
    return out


def _tag(part: Any, tag: str) -> Any:
    if isinstance(part, (TextPart, SystemPromptPart)) or (
        isinstance(part, (UserPromptPart, ToolReturnPart)) and isinstance(part.content, str)
    ):
        return dataclasses.replace(part, content=f'{part.content}\n{tag}')
    if isinstance(part, ToolCallPart):
        return dataclasses.replace(part, tool_call_id=f'{part.tool_call_id}-{tag}')
    if isinstance(part, ToolReturnPart):
        return dataclasses.replace(part, content={'result': part.content, 'tag': tag})
    return part


def _retag(message: ModelMessage, tag: str) -> ModelMessage:
    parts = [_tag(p, tag) for p in message.parts]
    if isinstance(message, ModelResponse):
        # a tool return's id follows its call's (tagged above)
        return dataclasses.replace(message, parts=parts)
    fixed = [
        dataclasses.replace(p, tool_call_id=f'{p.tool_call_id}-{tag}')
        if isinstance(p, ToolReturnPart) and not p.tool_call_id.endswith(tag)
        else p
        for p in parts
    ]
    return dataclasses.replace(message, parts=fixed)


def build(size: int, *, usage: bool = True) -> list[ModelMessage]:
    """`size` messages (give or take one, so it ends with a request), with provider usage on responses."""
    pool = _conversations()
    joined: list[ModelMessage] = []
    repetition = 0
    while len(joined) < size:
        tag = f'[run {repetition}]'
        for messages in pool:
            for index, message in enumerate(messages):
                if joined and index == 0 and isinstance(message, ModelRequest):
                    parts = [p for p in message.parts if not isinstance(p, SystemPromptPart)]
                    message = ModelRequest(parts=parts)
                joined.append(_retag(message, tag) if repetition else message)
            joined.append(ModelResponse(parts=[TextPart(f'Done with that task. {tag}')], model_name='gpt-4o'))
            if len(joined) >= size:
                break
        repetition += 1
    end = size
    while not isinstance(joined[end - 1], ModelRequest):
        end += 1 if end < len(joined) else -1
    history = joined[:end]
    if usage:
        history = with_usage(history)
    return history


def with_usage(history: list[ModelMessage]) -> list[ModelMessage]:
    """Each response's usage as a provider reports it: input = its prefix's count (+ 120 of instructions)."""
    counter = TokenCounter('gpt-4o')
    out: list[ModelMessage] = []
    prefix = 0
    for message in history:
        if isinstance(message, ModelResponse):
            usage = RequestUsage(input_tokens=prefix + 120, output_tokens=20)
            message = dataclasses.replace(message, usage=usage)
        prefix += counter.count_message(message)
        out.append(message)
    return out


def texts(history: list[ModelMessage]) -> list[str]:
    """Every text the provider tokenizes (contents, tool names, arguments), for the raw-tiktoken floor."""
    from pydantic_ai_history._compat import json_text

    out: list[str] = []
    for message in history:
        for part in message.parts:
            content = getattr(part, 'content', None)
            if isinstance(content, str):
                out.append(content)
            elif content is not None:
                out.append(json_text(content))
            if isinstance(part, (ToolCallPart, ToolReturnPart)):
                out.append(part.tool_name)
            if isinstance(part, ToolCallPart):
                out.append(part.args if isinstance(part.args, str) else json_text(part.args or {}))
    return out
