"""What a stage receives for one processing call, and the interface every stage implements."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ._compat import ModelMessage
from .events import HistoryEvent, HistoryWarning
from .tokens import TokenCounter, TokenEstimate

if TYPE_CHECKING:
    from .cache import SummaryCache
    from .store import ArtifactStore

__all__ = ('ARTIFACT_MARKER', 'MARKER_KEY', 'HistoryContext', 'HistoryStage')

logger = logging.getLogger('pydantic_ai_history')

MARKER_KEY = 'pydantic_ai_history'
"""Metadata key under which this package marks the messages and parts it wrote."""

ARTIFACT_MARKER = '[pydantic-ai-history: artifact'
"""Opening of every text the artifact stage writes in place of an artifact; how processed content is
recognised where there is no metadata (user prompt content), and how the read-back tool knows it is needed."""


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

    def warn(self, code: str, message: str, **details: Any) -> None:
        logger.warning('%s: %s', code, message)
        self.emit_event(HistoryWarning(run_id=self.run_id, code=code, message=message, details=details))


class HistoryStage(Protocol):
    """One step of the flow: messages in, messages out. Never mutates its input."""

    name: str

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]: ...
