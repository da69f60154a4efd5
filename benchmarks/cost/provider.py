"""The ruler: a strict simulated provider that counts, rejects, records and bills every request.

It reuses the peers' ruler (`benchmarks/peers/_strict.py`: o200k, pydantic-ai's own renderings of tool calls
and returns, OpenAI Chat framing fitted to recorded `prompt_tokens`, the instructions sent once) and renders
each request as `pricing.Block`s in prompt order (tools, instructions, messages), so the same count is both
the usage it reports and what it bills. It does not raise on a request over its window or with broken tool
pairing (as a provider's 400 would): it records the rejection, bills nothing for it, and answers anyway, so
every run goes to the end and later requests stay comparable.

`pydantic_ai_history.testing.StrictProvider` is not used: it raises (ending the run at the first
rejection), and counts `ModelRequest.instructions` once per request in the history, while pydantic-ai sends
only the newest request's instructions (every request of a run carries them), so it over-counts by the
instructions' size times the number of requests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from peers._strict import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    TOOL_CALL_OVERHEAD,
    TOOL_RETURN_OVERHEAD,
    Encoder,
    pairing_error,
    part_text,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from .pricing import Billed, Block, BreakpointCache, automatic_billing, common_prefix

__all__ = ('CostProvider', 'RequestRecord', 'breakpoints', 'render')


def render(messages: Sequence[ModelMessage], info: AgentInfo | None, encode: Encoder) -> list[Block]:
    """A request as blocks in prompt order: tool definitions, instructions, messages, reply priming."""
    blocks: list[Block] = []
    if info is not None:
        for tool in [*info.function_tools, *info.output_tools]:
            text = json.dumps(
                {
                    'name': tool.name,
                    'description': tool.description,
                    'parameters': tool.parameters_json_schema,
                }
            )
            blocks.append(Block(('tool', text), encode(text), text))
        instructions = getattr(info, 'instructions', None)
        if isinstance(instructions, str) and instructions:
            blocks.append(Block(('instructions', instructions), encode(instructions), instructions))
    for message in messages:
        role = 'request' if isinstance(message, ModelRequest) else 'response'
        blocks.append(Block(('header', role), MESSAGE_OVERHEAD, content=False))
        for part in message.parts:
            text = part_text(part)
            framing = (
                TOOL_CALL_OVERHEAD
                if isinstance(part, ToolCallPart)
                else TOOL_RETURN_OVERHEAD
                if isinstance(part, ToolReturnPart)
                else 0
            )
            key = (type(part).__name__, text, getattr(part, 'tool_call_id', None))
            blocks.append(Block(key, encode(text) + framing, text))
    blocks.append(Block(('priming',), REPLY_PRIMING, content=False))
    return blocks


def breakpoints(
    messages: Sequence[ModelMessage], info: AgentInfo | None, blocks: Sequence[Block]
) -> list[int]:
    """Where Anthropic would put `cache_control` for this request (indices of the blocks they follow).

    As pydantic-ai's Anthropic adapter does with the unified `cache` setting (the `Caching` capability): after
    the last tool definition, after the instructions, and at the end of the last message unless the setting
    says `messages=False`; plus a `CachePoint` in a user prompt ends its part. No `cache` setting, none.
    """
    params = getattr(info, 'model_request_parameters', None)
    cache = getattr(params, 'cache', None)
    points: list[int] = []
    if cache:
        kinds = [b.key[0] if isinstance(b.key, tuple) else None for b in blocks]
        for kind in ('tool', 'instructions'):
            if kind in kinds:
                points.append(len(kinds) - 1 - kinds[::-1].index(kind))
        caches_messages = not (isinstance(cache, dict) and cache.get('messages') is False)
        last_part = max((i for i, b in enumerate(blocks) if b.content), default=None)
        if caches_messages and last_part is not None and last_part not in points:
            points.append(last_part)
    points.extend(_cache_points(messages, blocks))
    return sorted(set(points))


def _cache_points(messages: Sequence[ModelMessage], blocks: Sequence[Block]) -> list[int]:
    """Blocks that end a user prompt holding an explicit `CachePoint`."""
    try:
        from pydantic_ai.messages import CachePoint
    except ImportError:  # pragma: no cover
        return []
    marked = {
        id(part)
        for m in messages
        for part in m.parts
        if isinstance(part, UserPromptPart)
        and not isinstance(part.content, str)
        and any(isinstance(item, CachePoint) for item in part.content)
    }
    if not marked:
        return []
    parts = [part for m in messages for part in m.parts]
    part_blocks = [i for i, b in enumerate(blocks) if b.content and b.key[0] not in ('tool', 'instructions')]
    return [index for part, index in zip(parts, part_blocks, strict=False) if id(part) in marked]


@dataclass
class RequestRecord:
    """One request the provider received (rejected ones included)."""

    index: int
    tokens: int
    rejected: str | None
    common_tokens: int
    """The longest common prefix with the previous accepted request."""
    rewrite: bool
    """Something the previous accepted request already sent changed (a tool, the instructions, a message)."""
    rewrite_tokens: int
    """When `rewrite`: the tokens of this request after the first changed token."""
    automatic: Billed | None
    breakpoint: Billed | None
    output_tokens: int
    arrived: float
    """`time.perf_counter()` when the request arrived (before the model's own latency)."""
    answered: float = 0.0
    """When the response went back."""


IDLE_SECONDS = 1.0
"""How long a summarizer call waits for the run's next request before it concludes the run waits for it."""
REQUEST_SECONDS = 0.05
"""How long each model request leaves the event loop to other work in the cost runs: a real call waits on the
network for far longer, and work a package started meanwhile (in a task or a thread) goes on."""


@dataclass
class RequestClock:
    """Time counted in model requests, for the cost runs, where no second passes: a summarizer call lasts
    `requests` of the run's model requests when the run goes on meanwhile (a summary made in the background,
    as a network call lets the run go on), and answers at once when the run waits for it (no request comes
    within `IDLE_SECONDS`). Without it, a summary started in the background of a run that never yields to the
    event loop would be made only when a request had to wait for it."""

    requests: int = 0
    """Model requests a summarizer call lasts (0: it answers at once)."""
    count: int = 0
    """Model requests answered so far."""
    _ticked: asyncio.Event | None = None

    async def tick(self) -> None:
        """One model request: wake the summarizer calls waiting for it, and let other work run for
        `REQUEST_SECONDS`, as a network call would."""
        self.count += 1
        if self._ticked is not None:
            self._ticked.set()
            self._ticked = None
        await asyncio.sleep(REQUEST_SECONDS)

    async def wait(self) -> None:
        """Until `requests` more model requests were made, or none comes within `IDLE_SECONDS`."""
        due = self.count + self.requests
        while self.count < due:
            if self._ticked is None:
                self._ticked = asyncio.Event()
            try:
                await asyncio.wait_for(self._ticked.wait(), IDLE_SECONDS)
            except asyncio.TimeoutError:  # not the builtin on Python 3.10
                return


@dataclass
class CostProvider:
    """The function behind the main model's `FunctionModel` (use `.model()`)."""

    respond: Callable[[int], ModelResponse]
    """The scripted model: the response to the request with this index."""
    context_window: int
    encode: Encoder = field(default_factory=Encoder)
    model_seconds: float = 0.0
    """How long the model takes to answer (the latency run; 0 in the cost runs)."""
    model_name: str = 'gpt-4o'
    clock: RequestClock | None = None
    """The cost runs' time, in requests (the latency run sleeps instead)."""
    requests: list[RequestRecord] = field(default_factory=list)
    _previous: list[Block] = field(default_factory=list)
    """The newest accepted request."""
    _cache: BreakpointCache = field(default_factory=BreakpointCache)
    _token_ids: Callable[[str], Sequence[int]] | None = None

    def model(self) -> FunctionModel:
        profile: Any = {'context_window': self.context_window, 'supports_cache': True}
        return FunctionModel(self.__call__, model_name=self.model_name, profile=profile)

    @property
    def final_text(self) -> str:
        """Every block's text of the newest accepted request, joined: what the model saw last."""
        return '\n'.join(b.text for b in self._previous if b.text)

    def token_ids(self, text: str) -> Sequence[int]:
        if self._token_ids is None:
            import tiktoken

            self._token_ids = tiktoken.get_encoding('o200k_base').encode_ordinary
        return self._token_ids(text)

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        arrived = time.perf_counter()
        record = self.record(messages, info, arrived)
        if self.model_seconds:
            await asyncio.sleep(self.model_seconds)
        elif self.clock is not None:
            await self.clock.tick()
        response = self.respond(record.index)
        record.output_tokens = sum(self.encode(part_text(p)) for p in response.parts)
        response.usage = RequestUsage(input_tokens=record.tokens, output_tokens=record.output_tokens)
        record.answered = time.perf_counter()
        return response

    def record(
        self, messages: Sequence[ModelMessage], info: AgentInfo | None, arrived: float
    ) -> RequestRecord:
        """Count, check and bill one request (both cache models), and remember it."""
        blocks = render(messages, info, self.encode)
        tokens = sum(b.tokens for b in blocks)
        rejected = pairing_error(messages)
        if rejected is None and tokens > self.context_window:
            rejected = f'{tokens:,} tokens over the {self.context_window:,}-token window'
        record = RequestRecord(len(self.requests), tokens, rejected, 0, False, 0, None, None, 0, arrived)
        self.requests.append(record)
        if rejected is not None:  # a 400: nothing billed, nothing cached, nothing seen
            return record
        common = common_prefix(self._previous, blocks, self.token_ids)
        record.common_tokens = common.tokens
        # the previous request's own end (its reply priming) is never a prefix of the next one
        record.rewrite = bool(self._previous) and common.blocks < len(self._previous) - 1
        record.rewrite_tokens = tokens - common.tokens if record.rewrite else 0
        record.automatic = automatic_billing(tokens, common.tokens)
        record.breakpoint = self._cache.bill(blocks, breakpoints(messages, info, blocks))
        self._previous = blocks
        return record
