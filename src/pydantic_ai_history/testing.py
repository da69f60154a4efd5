"""A strict simulated provider for tests: a `FunctionModel` that rejects what real providers reject.

It counts every request with the real tokenizer (independently of `TokenCounter`: its own wire-like
rendering of the messages, tool definitions and instructions), raises like a provider when the prompt
exceeds its context window or when tool calls and returns are not paired, and reports the count as
`usage.input_tokens`, as a real provider does. Use it in your own tests of agents with this package.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.usage import RequestUsage

from ._compat import NATIVE_TOOL_CALL_PARTS, NATIVE_TOOL_RETURN_PARTS, answered_call_id
from .messages.units import tool_call_ids
from .tokens import image_size, image_tokens
from .tokens._encodings import load_encoding
from .tokens._estimate import estimate_tokens_offline

logger = logging.getLogger('pydantic_ai_history.testing')

# 2.x profiles are TypedDicts with a `context_window` key; 1.x profiles are dataclasses without one
_PROFILE_HAS_CONTEXT_WINDOW = 'context_window' in ModelProfile.__annotations__
_CALLS: tuple[type[Any], ...] = (ToolCallPart, *NATIVE_TOOL_CALL_PARTS)
_RETURNS: tuple[type[Any], ...] = (ToolReturnPart, *NATIVE_TOOL_RETURN_PARTS)


class ProviderRejected(Exception):
    """What a provider's 400 would be: the request was invalid or too long."""


@dataclass(frozen=True)
class RequestRecord:
    """One request the provider received (rejected ones included, with the reason)."""

    input_tokens: int
    messages: int
    history: tuple[ModelMessage, ...] = ()
    """The messages exactly as the provider received them."""
    rejected: str | None = None
    """Why the provider refused the request, or None when it answered."""


Responder = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


@dataclass
class StrictProvider:
    """The provider behind a `FunctionModel`; call `.model()` to get the model.

    Args:
        respond: produces the response (the scripted behaviour of the agent under test).
        context_window: requests counting more tokens than this are rejected.
        encoding: the tiktoken encoding it counts with.
        model_name: the name the model reports (decides the processor's token profile).
    """

    respond: Responder
    context_window: int
    encoding: str = 'o200k_base'
    model_name: str = 'gpt-4o'
    requests: list[RequestRecord] = field(default_factory=list)

    def model(self) -> FunctionModel:
        """A `FunctionModel` backed by this provider, with `context_window` in its profile on 2.x."""
        profile: Any = {'context_window': self.context_window} if _PROFILE_HAS_CONTEXT_WINDOW else None
        # a bound method: pydantic-ai 1.x names the model after the function's `__name__`
        return FunctionModel(
            self.__call__, stream_function=self.stream, model_name=self.model_name, profile=profile
        )

    @property
    def peak_input_tokens(self) -> int:
        """The largest request it received, in its own count."""
        return max((r.input_tokens for r in self.requests), default=0)

    @property
    def rejected(self) -> list[RequestRecord]:
        """The requests it refused."""
        return [r for r in self.requests if r.rejected is not None]

    def count(self, messages: Sequence[ModelMessage], info: AgentInfo | None = None) -> int:
        """Tokens of a request as this provider counts them."""
        texts: list[str] = []
        images = _REPLY_PRIMING + _MESSAGE_OVERHEAD * len(messages)
        for message in messages:
            instructions = message.instructions if isinstance(message, ModelRequest) else None
            if isinstance(instructions, str):
                texts.append(instructions)
            for part in message.parts:
                text, part_images = _wire(part)
                texts.append(text)
                images += part_images + _framing(part)
        tools = [*info.function_tools, *info.output_tools] if info is not None else []
        texts.extend(
            json.dumps({'name': t.name, 'description': t.description, 'parameters': t.parameters_json_schema})
            for t in tools
        )
        return sum(map(self._count_text, texts)) + images

    @cached_property
    def _count_text(self) -> Callable[[str], int]:
        # The package's own loader (the encodings ship with it, so this needs no network); if even that
        # fails, the offline estimate, so a demo or test never dies on a missing tokenizer.
        try:
            encoding = load_encoding(self.encoding)
        except Exception as exc:
            logger.warning('%s is unavailable (%s); the simulated provider estimates', self.encoding, exc)
            return estimate_tokens_offline
        return lambda text: len(encoding.encode_ordinary(text))

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        """The same answer streamed (`run_stream`, `run_stream_events`): checked and recorded alike. The
        streamed usage is `FunctionModel`'s own estimate: a stream cannot carry the provider's count."""
        for index, part in enumerate(self(messages, info).parts):
            if isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                yield {
                    index: DeltaToolCall(name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id)
                }
            elif isinstance(part, TextPart):
                yield part.content

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tokens = self.count(messages, info)
        try:
            _check_pairing(messages)
            if tokens > self.context_window:
                raise ProviderRejected(
                    f"This model's maximum context length is {self.context_window} tokens. "
                    f'However, your messages resulted in {tokens} tokens.'
                )
        except ProviderRejected as exc:
            self.requests.append(RequestRecord(tokens, len(messages), tuple(messages), rejected=str(exc)))
            raise
        self.requests.append(RequestRecord(tokens, len(messages), tuple(messages)))
        response = self.respond(messages, info)
        output = sum(images + self._count_text(text) for text, images in map(_wire, response.parts))
        response.usage = RequestUsage(input_tokens=tokens, output_tokens=output)
        return response


# OpenAI chat framing, fitted to the real prompt_tokens in shared/fixtures/token_calibration: ids are not
# billed as text; each message costs 4 tokens of role markers, the reply is primed with 3, and each tool call
# or result adds a few tokens of structure.
_MESSAGE_OVERHEAD = 4
_REPLY_PRIMING = 3
_TOOL_CALL_OVERHEAD = 4
_TOOL_RETURN_OVERHEAD = 3


def _framing(part: Any) -> int:
    if isinstance(part, _CALLS):
        return _TOOL_CALL_OVERHEAD
    return _TOOL_RETURN_OVERHEAD if isinstance(part, _RETURNS) else 0


def _wire(part: Any) -> tuple[str, int]:
    """A part's text as a provider would receive it, and the image tokens it carries."""
    if isinstance(part, _CALLS):
        args = part.args if isinstance(part.args, str) else json.dumps(part.args)
        return f'{part.tool_name}{args}', 0
    if isinstance(part, _RETURNS):
        content, images = _content(part.content)
        return f'{part.tool_name}{content}', images
    if isinstance(part, RetryPromptPart):
        return part.model_response(), 0
    if isinstance(part, ThinkingPart):
        return part.content, 0
    value = getattr(part, 'content', None)
    return ('', 0) if value is None else _content(value)


def _content(content: Any) -> tuple[str, int]:
    if isinstance(content, str):
        return content, 0
    if isinstance(content, BinaryContent):
        if content.media_type.startswith('image/'):
            size = image_size(content.data) or (1024, 1024)
            return '', image_tokens(*size, 'openai')
        return content.data[:1_000_000].decode('latin-1'), 0  # a document sent raw is very expensive
    if isinstance(content, (list, tuple)):
        items = [_content(item) for item in content]
        return '\n'.join(text for text, _ in items), sum(n for _, n in items)
    try:
        return json.dumps(content, default=str), 0
    except (TypeError, ValueError):
        return str(content), 0


def _check_pairing(messages: Sequence[ModelMessage]) -> None:
    """Raise as OpenAI and Anthropic do on broken tool pairing or a history that opens with the model."""
    if not messages:
        raise ProviderRejected('messages: at least one message is required')
    if isinstance(messages[0], ModelResponse):
        raise ProviderRejected('messages: the first message must be from the user')
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            calls = tool_call_ids(message)
            following = messages[index + 1] if index + 1 < len(messages) else None
            answered = (
                {answered_call_id(p) for p in following.parts}
                if isinstance(following, ModelRequest)
                else set()
            )
            missing = [c for c in calls if c not in answered]
            if missing:
                raise ProviderRejected(
                    f'tool_use ids were found without tool_result blocks immediately after: {missing}'
                )
        else:
            previous = messages[index - 1] if index > 0 else None
            called = set(tool_call_ids(previous)) if isinstance(previous, ModelResponse) else set()
            for part in message.parts:
                call_id = answered_call_id(part)
                if call_id is not None and call_id not in called:
                    raise ProviderRejected(
                        "messages with role 'tool' must be a response to a preceding message with "
                        f"'tool_calls' (tool_call_id {call_id!r})"
                    )
