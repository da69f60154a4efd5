"""A model that compacts like OpenAI Responses, for the provider-native compaction tests (no network).

`compact_messages` answers with an encrypted `CompactionPart` and real usage, and rejects a window whose tool
pairing is broken; every request drops what comes before the latest compaction item (pydantic-ai's own
`_trim_before_compaction`) and counts the item at the size the provider gave it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history._compat import is_compaction_response
from pydantic_ai_history.testing import ProviderRejected, StrictProvider

WINDOW = 16_000


def leading_compaction(messages: Sequence[ModelMessage]) -> tuple[list[ModelMessage], list[ModelResponse]]:
    """The messages as the wire has them once the compaction items are set apart (a provider renders those
    as opaque items of its own)."""
    rest: list[ModelMessage] = []
    items: list[ModelResponse] = []
    for message in messages:
        if isinstance(message, ModelResponse) and is_compaction_response(message):
            items.append(message)
        else:
            rest.append(message)
    return rest, items


@dataclass
class ResponsesLikeProvider:
    """A provider with a compaction endpoint: strict about pairing and size, opaque items of its own size."""

    steps: int
    context_window: int = WINDOW
    fail: bool = False
    item_tokens: int = 200
    strict: StrictProvider = field(init=False)
    requests: list[tuple[int, list[ModelMessage]]] = field(default_factory=list)
    compactions: list[list[ModelMessage]] = field(default_factory=list)
    tools: list[set[str]] = field(default_factory=list)
    """The function tools offered with each request."""
    sizes: dict[str, int] = field(default_factory=dict)
    done: int = 0
    _ids: Any = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.strict = StrictProvider(lambda m, i: ModelResponse(parts=[]), context_window=self.context_window)

    def _tokens(self, messages: Sequence[ModelMessage], info: AgentInfo | None, system: str) -> int:
        rest, items = leading_compaction(messages)
        for item in items:
            part = item.parts[0]
            key = (part.provider_details or {}).get('encrypted_content')
            if part.provider_name != system or key not in self.sizes:
                raise ProviderRejected('Invalid encrypted_content: the item is not from this provider')
        if rest and isinstance(rest[0], ModelResponse):
            raise ProviderRejected('messages: the first message after the item must be from the user')
        from pydantic_ai_history.testing import _check_pairing  # the strict provider's own pairing rules

        _check_pairing(rest or [ModelRequest(parts=[UserPromptPart(content='')])])
        item_cost = sum(self.sizes[i.parts[0].provider_details['encrypted_content']] for i in items)
        return self.strict.count(rest, info) + item_cost

    def answer(self, messages: list[ModelMessage], info: AgentInfo, system: str) -> ModelResponse:
        tokens = self._tokens(messages, info, system)
        self.requests.append((tokens, list(messages)))
        self.tools.append({t.name for t in info.function_tools})
        if tokens > self.context_window:
            raise ProviderRejected(f'maximum context length is {self.context_window}, got {tokens}')
        usage = RequestUsage(input_tokens=tokens, output_tokens=20)
        if self.done >= self.steps:
            self.done = 0
            return ModelResponse(parts=[TextPart('All pages read.')], usage=usage)
        self.done += 1
        call = ToolCallPart('fetch', {'n': self.done}, tool_call_id=f'call_{len(self.requests)}')
        return ModelResponse(parts=[call], usage=usage)

    def compact(self, messages: list[ModelMessage], system: str, model_name: str) -> ModelResponse:
        from pydantic_ai.messages import STANDING_PROMPT_PLANTED_KEY, CompactionPart

        self.compactions.append(list(messages))
        if self.fail:
            raise RuntimeError('503 Service Unavailable from /responses/compact')
        tokens = self._tokens(messages, None, system)  # rejects what /responses/compact rejects
        key = f'gAAAAB-{next(self._ids)}'
        self.sizes[key] = self.item_tokens
        part = CompactionPart(
            content=None,
            id=f'cmp_{key}',
            provider_name=system,
            provider_details={'encrypted_content': key, STANDING_PROMPT_PLANTED_KEY: True},
        )
        return ModelResponse(
            parts=[part],
            usage=RequestUsage(input_tokens=tokens, output_tokens=self.item_tokens),
            model_name=model_name,
            provider_name=system,
            provider_details={'compaction': True},
        )


def compacting_model(provider: ResponsesLikeProvider, *, window: int = WINDOW) -> FunctionModel:
    """A `FunctionModel` whose adapter behaves like OpenAI Responses around compaction."""
    from pydantic_ai.models import ModelRequestContext

    class CompactingModel(FunctionModel):
        compaction_requires_encrypted_content = True
        compaction_retains_standing_prompt = True
        _honors_compaction_boundaries = True

        async def request(self, messages: list[ModelMessage], *args: Any, **kwargs: Any) -> ModelResponse:
            return await super().request(self._trim_before_compaction(messages), *args, **kwargs)

        async def compact_messages(
            self, request_context: ModelRequestContext, *, instructions: str | None = None
        ) -> ModelResponse:
            window = self._trim_before_compaction(request_context.messages, standing_prompt_retained=False)
            return provider.compact(window, self.system, self.model_name)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return provider.answer(messages, info, 'function')

    return CompactingModel(answer, model_name='gpt-4o', profile={'context_window': window})
