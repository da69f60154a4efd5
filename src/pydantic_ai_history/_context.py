"""What a stage receives for one processing call, and the interface every stage implements."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ._compat import ModelMessage
from ._marks import MARKER_KEY
from .events import ContentLost, HistoryEvent, HistoryWarning
from .tokens import TokenCounter, TokenEstimate

if TYPE_CHECKING:
    from pydantic_ai import RunContext

    from .cache import SummaryCache
    from .store import ArtifactStore

__all__ = ('MARKER_KEY', 'HistoryContext', 'HistoryStage', 'ScopeKey', 'default_scope')

logger = logging.getLogger('pydantic_ai_history')

ScopeKey = Callable[['RunContext[Any]'], str]
"""Maps a run's `RunContext` to the scope its artifacts are stored and read back in (a tenant, a user)."""


def default_scope(ctx: RunContext[Any] | None) -> str:
    """The conversation id where pydantic-ai has one, else the id of the run that began the history.

    pydantic-ai resolves `conversation_id` from the explicit argument or the saved history, so a
    conversation's runs share it. Without one (older 1.x), the oldest `run_id` on the history's messages
    names the chain of runs that continued it; pydantic-ai 1.0 has neither, and every run shares `''`.
    """
    if ctx is None:
        return ''
    conversation = getattr(ctx, 'conversation_id', None)
    if isinstance(conversation, str) and conversation:
        return f'conversation:{conversation}'
    for message in getattr(ctx, 'messages', None) or ():
        run_id = getattr(message, 'run_id', None)
        if isinstance(run_id, str) and run_id:
            return f'run:{run_id}'
    run_id = getattr(ctx, 'run_id', None)
    return f'run:{run_id}' if isinstance(run_id, str) and run_id else ''


@dataclass
class HistoryContext:
    """Per-call context shared by the stages: counting, window, cache, store, events."""

    counter: TokenCounter
    context_window: int | None
    model: Any = None
    """The run's model (a pydantic-ai `Model`), used as the default summarizer and planner."""
    run_context: Any = None
    """The `RunContext` of the request (None outside a run), for custom stages that need the run's deps."""
    run_id: str | None = None
    cache: SummaryCache | None = None
    store: ArtifactStore | None = None
    emit_event: Callable[[HistoryEvent], None] = field(default=lambda event: None)
    usage: Any = None
    """The run's `RunUsage`, to which LLM calls made by stages add their own usage."""
    tool_definitions: tuple[Any, ...] = ()
    """The request's tool definitions, where known (the capability passes them); counted in estimates."""
    scope: str = ''
    """The scope (conversation or tenant) this run's artifacts are stored and read back in."""

    _last_estimate: tuple[Sequence[ModelMessage], int, TokenEstimate] | None = field(
        default=None, init=False, repr=False
    )

    def estimate(self, messages: Sequence[ModelMessage]) -> TokenEstimate:
        """The anchored estimate of `messages`, computed once per list while stages pass it on unchanged."""
        last = self._last_estimate
        if last is not None and last[0] is messages and last[1] == len(messages):
            return last[2]
        estimate = self.counter.estimate(messages, tool_definitions=self.tool_definitions)
        self._last_estimate = (messages, len(messages), estimate)
        return estimate

    def artifact_id(self, data: bytes) -> str:
        """The id `data` is stored under in this run's scope: keyed by the store, unguessable from content."""
        if self.store is None:
            from .store import artifact_id

            return artifact_id(data)
        return self.store.artifact_id(data, scope=self.scope)

    def warn(self, code: str, message: str, **details: Any) -> None:
        logger.warning('%s: %s', code, message)
        self.emit_event(HistoryWarning(run_id=self.run_id, code=code, message=message, details=details))

    def lost(self, stage: str, code: str, reason: str, messages: Sequence[ModelMessage]) -> None:
        """Say at error level (log and `ContentLost` event) that `messages` left the history with no home."""
        calls, prompts = _contents(messages)
        shown = ', '.join(calls[:20]) + (f' and {len(calls) - 20} more' if len(calls) > 20 else '')
        message = (
            f'{stage}: {len(messages)} message(s) removed with no copy in the history or the store '
            f'({reason}); '
            f'{prompts} user prompt(s), tool calls: {shown or "none"}'
        )
        logger.error('%s: %s', code, message)
        self.emit_event(
            ContentLost(
                run_id=self.run_id,
                code=code,
                message=message,
                stage=stage,
                messages=len(messages),
                tool_calls=tuple(calls),
                user_prompts=prompts,
            )
        )


def _contents(messages: Sequence[ModelMessage]) -> tuple[list[str], int]:
    """The tool calls (`name#id`, each once, in order) and the number of user prompts among `messages`."""
    calls: dict[str, None] = {}
    prompts = 0
    for message in messages:
        for part in message.parts:
            call_id = getattr(part, 'tool_call_id', None)
            name = getattr(part, 'tool_name', None)
            if isinstance(call_id, str) and isinstance(name, str):
                calls[f'{name}#{call_id}'] = None
            elif getattr(part, 'part_kind', '') == 'user-prompt':
                prompts += 1
    return list(calls), prompts


class HistoryStage(Protocol):
    """One step of the flow: messages in, messages out. Never mutates its input."""

    name: str

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]: ...
