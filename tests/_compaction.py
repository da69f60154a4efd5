"""Helpers for compactor tests: a recording stub summarizer, long real histories, agents on both majors."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from _history import call, conversations, load_conversation, result, system_user
from pydantic_ai_history import (
    CompactionSettings,
    Compactor,
    ContextLimits,
    ContextPolicy,
    HistoryContext,
    HistoryEvent,
    PinPredicate,
    SummarizerSettings,
)
from pydantic_ai_history._compat import pydantic_ai_version
from pydantic_ai_history.budget.model_info import ModelInfo
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.tokens import TokenCounter

MAJOR = int(pydantic_ai_version().split('.')[0])
HAS_MESSAGE_METADATA = 'metadata' in {f.name for f in dataclasses.fields(ModelRequest)}
COUNTER = TokenCounter('gpt-4o')
WORDS = 'the quick brown fox jumps over the lazy dog while the cat sleeps '
SYSTEM = 'You are a careful assistant.'
TASK = 'Migrate the billing database to Postgres 16 without downtime; keep the old replica until Friday.'


def text(tokens: int, tag: str = '') -> str:
    return (f'{tag} ' if tag else '') + WORDS * max(tokens // 13, 1)


def tool_loop(units: int, tokens: int = 1_000, *, task: str = TASK, tag: str = 'step') -> list[ModelMessage]:
    """system+task, then `units` tool rounds (a call, a return of about `tokens` tokens); ends on a return."""
    messages: list[ModelMessage] = [system_user(SYSTEM, task)]
    for i in range(units):
        messages.append(call('fetch', f'{tag}{i}', {'page': i}))
        messages.append(result('fetch', f'{tag}{i}', text(tokens, f'{tag.upper()}-{i:03d}')))
    return messages


def context(**kwargs: Any) -> tuple[HistoryContext, list[HistoryEvent]]:
    events: list[HistoryEvent] = []
    kwargs.setdefault('cache', MemoryCache())
    window = kwargs.pop('context_window', None)
    if 'limits' not in kwargs:
        policy = ContextPolicy(context_window=window or UNBOUNDED_WINDOW)
        kwargs['limits'] = policy.resolve(ModelInfo('openai:gpt-4o', None, 'unknown'))
    return HistoryContext(counter=TokenCounter('gpt-4o'), emit_event=events.append, **kwargs), events


@dataclasses.dataclass
class StubSummarizer:
    """A summarizer `FunctionModel` that records every prompt it is sent.

    `behaviour(prompt, call_number)` returns the summary text, raises, or returns an awaitable (to hang).
    """

    behaviour: Callable[[str, int], Any] | None = None
    prompts: list[str] = dataclasses.field(default_factory=list)
    instructions: list[str] = dataclasses.field(default_factory=list)
    settings: list[Any] = dataclasses.field(default_factory=list)
    """The `model_settings` each request arrived with."""
    input_tokens: int = 1_000
    output_tokens: int = 100

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, model_name='stub-summarizer')

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        prompt = '\n'.join(
            p.content for p in request.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        self.prompts.append(prompt)
        self.instructions.append(getattr(request, 'instructions', None) or '')
        self.settings.append(info.model_settings)
        if self.behaviour is None:
            text = default_summary(prompt, self.calls)
        else:
            text = self.behaviour(prompt, self.calls)
            if hasattr(text, '__await__'):
                text = await text
        return ModelResponse(
            parts=[TextPart(text)],
            usage=RequestUsage(input_tokens=self.input_tokens, output_tokens=self.output_tokens),
            model_name='stub-summarizer',
        )


def prompt_block(prompt: str, name: str) -> str:
    """The body of a summarizer prompt's `<name-NONCE ...>` block (`messages`, `previous_summary`, ...)."""
    match = re.search(rf'<{name}-([0-9a-f]+)[^>\n]*>\n(.*?)\n</{name}-\1>', prompt, re.DOTALL)
    assert match is not None, f'no {name} block in the prompt'
    return match.group(2)


def transcript_records(text: str) -> list[tuple[str, str | None, str]]:
    """The `(role, tool, body)` of each framed record of a rendered transcript, in order.

    Parsed the way the summarizer is told to read it: the transcript's nonce is the one its first record opens
    with (content cannot come first), and a record ends only at the closing tag with that nonce.
    """
    first = re.match(r'\s*<msg-([0-9a-f]+) role=', text)
    if first is None:
        return []
    nonce = first.group(1)
    pattern = rf'<msg-{nonce} role="([a-z_]+)"(?: tool="([^"]*)")?>\n(.*?)\n</msg-{nonce}>'
    return [(m.group(1), m.group(2), m.group(3)) for m in re.finditer(pattern, text, re.DOTALL)]


def default_summary(prompt: str, number: int) -> str:
    return (
        f'## Goal and constraints\nsummary number {number}\n## Decisions\nnone\n'
        '## Artifacts and files\nnone\n## Errors and resolutions\nnone\n## Current state\nworking\n'
        '## Next steps\ncontinue\n## Open questions\nnone'
    )


async def hang(seconds: float = 3600) -> str:
    await anyio.sleep(seconds)
    return 'too late'


def joined_conversations(fixtures_dir: Path, *, min_tokens: int) -> list[ModelMessage]:
    """The real fixture conversations joined (repeated as needed) into one history above `min_tokens`.

    The first keeps its system prompt; later ones join as new user turns. Ends with the current request.
    """
    paths = conversations(fixtures_dir)
    history: list[ModelMessage] = []
    round_ = 0
    while COUNTER.count_messages(history) <= min_tokens:
        for path in paths:
            messages = load_conversation(path)
            if history:
                first = messages[0]
                assert isinstance(first, ModelRequest)
                parts = [p for p in first.parts if not isinstance(p, SystemPromptPart)]
                if round_:
                    parts.append(UserPromptPart(f'(repeat {round_} of this task)'))
                messages = [ModelRequest(parts=parts), *messages[1:]]
            history.extend(messages)
            if COUNTER.count_messages(history) > min_tokens:
                break
        round_ += 1
    return history


def agent_with(model: Any, processor: Any, **kwargs: Any) -> Agent[None, str]:
    """An `Agent` using `processor`: a capability on 2.x, a history processor on 1.x."""
    if MAJOR >= 2:
        capabilities = [processor.capability(), *kwargs.pop('capabilities', ())]
        return Agent(model, capabilities=capabilities, **kwargs)
    return Agent(model, history_processors=[processor], **kwargs)


def user_texts(messages: Sequence[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]


# ---- stage-level setup: the compactor's own settings plus what its context supplies ----------------------

_CONTEXT_SIDE = {
    'max_tokens': ('policy', 'max_tokens'),
    'target_tokens': ('policy', 'target_tokens'),
    'summarizer_model': ('summarizer', 'model'),
    'summarizer_settings': ('summarizer', 'model_settings'),
    'summarizer_instructions': ('summarizer', 'instructions'),
    'summarizer_timeout': ('summarizer', 'timeout'),
    'summarizer_input_tokens': ('summarizer', 'max_input_tokens'),
}
UNBOUNDED_WINDOW = 1_000_000_000
"""The window of a test context that sets none: the policy defaults then give the 120,000 / 40,000 limits."""


@dataclasses.dataclass(frozen=True)
class CompactorSetup:
    """A stage-level compactor test's configuration in one call: the compactor's own `CompactionSettings`,
    and the context policy, summarizer settings and pin rules its `HistoryContext` carries."""

    settings: CompactionSettings
    policy: ContextPolicy
    summarizer: SummarizerSettings
    pin: PinPredicate | None = None
    keep_first_user_message: bool = True

    def __getattr__(self, name: str) -> Any:
        for part in ('settings', 'policy', 'summarizer'):
            target = object.__getattribute__(self, part)
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(name)

    def resolve(self, context_window: int | None) -> ContextLimits:
        """The limits a context with `context_window` (None: unknown) gets under this setup's policy."""
        policy = dataclasses.replace(self.policy, context_window=context_window or UNBOUNDED_WINDOW)
        return policy.resolve(ModelInfo('openai:gpt-4o', None, 'unknown'))

    def configure(self, context: HistoryContext) -> HistoryContext:
        window = context.limits.model_window
        return dataclasses.replace(
            context,
            limits=self.resolve(None if window >= UNBOUNDED_WINDOW else window),
            summarizer=self.summarizer,
            pin=self.pin,
            keep_first_user_message=self.keep_first_user_message,
        )


def compaction_setup(
    *, pin: PinPredicate | None = None, keep_first_user_message: bool = True, **kwargs: Any
) -> CompactorSetup:
    """`CompactorSetup` from one keyword list: trigger/target and summarizer keywords go to their homes."""
    homes: dict[str, dict[str, Any]] = {'policy': {}, 'summarizer': {}, 'settings': {}}
    for name, value in kwargs.items():
        home, field_name = _CONTEXT_SIDE.get(name, ('settings', name))
        homes[home][field_name] = value
    return CompactorSetup(
        CompactionSettings(**homes['settings']),
        ContextPolicy(**homes['policy']),
        SummarizerSettings(**homes['summarizer']),
        pin,
        keep_first_user_message,
    )


class SetupCompactor:
    """A `Compactor` whose context is configured by a `CompactorSetup` (stage-level tests)."""

    name = 'compactor'

    def __init__(self, setup: CompactorSetup | CompactionSettings | None = None) -> None:
        if setup is None or isinstance(setup, CompactionSettings):
            setup = CompactorSetup(setup or CompactionSettings(), ContextPolicy(), SummarizerSettings())
        self.setup = setup
        self.compactor = Compactor(setup.settings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compactor, name)

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        return await self.compactor(messages, self.setup.configure(context))

    async def compact_history(
        self, messages: Sequence[ModelMessage], context: HistoryContext, *, focus: str | None = None
    ) -> list[ModelMessage]:
        return await self.compactor.compact_history(messages, self.setup.configure(context), focus=focus)
