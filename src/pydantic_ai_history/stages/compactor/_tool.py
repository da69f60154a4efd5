"""The `compact_context` tool: the model asks for a compaction at a natural break in its task.

A size trigger does not know where the task is: it fires in the middle of a step, or long after a phase whose
details are no longer needed. The model often knows that moment. With `HistoryProcessor(compaction_tool=True)`
(off by default: a run without it sends the same tools and prompts as before) the model gets a
`compact_context(focus=...)` tool. The tool compacts nothing itself: it answers that the compaction is
scheduled, and on the next request, whose newest message carries that answer, the processor compacts the
history as at the trigger (stubs or a summary, as deep), with the model's focus, before the model sees it.
The call and its answer stay in the verbatim tail, so the model sees that it asked.

The request is read from the history, not from state the tool left behind: the same in durable workflow code
and on replay, on whichever worker the tool ran. The tool is in the tool list from the first request (a tool
appearing later would rewrite the whole cached prefix); its definition is what it costs every request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from ..._compat import (
    TOOLS_HAVE_METADATA,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from ...pipeline._context import MARKER_KEY, CompactionRequest

__all__ = (
    'COMPACTION_TOOL_METADATA',
    'COMPACT_CONTEXT_TOOL',
    'CompactionTool',
    'compaction_toolset',
    'compaction_toolset_id',
    'requested_compaction',
)

COMPACT_CONTEXT_TOOL = 'compact_context'
"""The tool's default name (harness's `CompactOnRequest` uses the same)."""
COMPACTION_TOOL_METADATA = {MARKER_KEY: 'compaction'}
"""The metadata of the tool's definition (where pydantic-ai's tools have metadata): how the processor tells it
from an app's tool of the same name."""
SCHEDULED = 'Compaction scheduled: older messages will be summarized before your next turn.'
"""What the tool answers (the compaction itself comes with the next request)."""
_MAX_FOCUS_CHARS = 2_000
"""The most of the model's focus the summarizer is given (it reads the focus beside the transcript)."""


@dataclass(frozen=True, kw_only=True)
class CompactionTool:
    """The `compact_context` tool's settings (`HistoryProcessor(compaction_tool=CompactionTool(...))`)."""

    name: str = COMPACT_CONTEXT_TOOL
    """The tool's name; rename it when the app has a tool of its own with that name."""
    min_tokens: int | None = None
    """The model's request is declined while the history is under this many tokens. None: the policy's
    target (a compaction of a history already at its target rewrites the cached prefix for little room)."""

    def __post_init__(self) -> None:
        if self.min_tokens is not None and self.min_tokens < 0:
            raise ValueError(f'CompactionTool.min_tokens must not be negative, got {self.min_tokens!r}')


def compaction_toolset_id(capability_id: str | None) -> str:
    """The tool's toolset id for a processor with `capability_id`: stable (durable engines need one)."""
    return f'{capability_id or "pydantic_ai_history"}_compaction'


async def compact_context(focus: str | None = None) -> str:
    """Compact the conversation before your next turn, to free room for the work ahead.

    Call it when a phase of the task is done and its details are no longer needed word for word. Older
    messages are then summarized (their full text stays retrievable); the newest stay as they are.

    Args:
        focus: what the summary must keep: the plan, and the exact ids, paths and figures you still need.
    """
    return SCHEDULED


def compaction_toolset(tool: CompactionTool, *, toolset_id: str) -> AbstractToolset[Any]:
    """A toolset with the one tool, named `tool.name`, marked as ours where tools have metadata."""
    toolset: FunctionToolset[Any] = FunctionToolset(id=toolset_id)
    if TOOLS_HAVE_METADATA:
        toolset.add_function(compact_context, name=tool.name, metadata=dict(COMPACTION_TOOL_METADATA))
    else:  # pydantic-ai 1.0
        toolset.add_function(compact_context, name=tool.name)
    return toolset


def requested_compaction(messages: Sequence[ModelMessage], tool: CompactionTool) -> CompactionRequest | None:
    """The model's compaction request, when the newest request answers a call of the tool; else None."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return None
    answered = [
        p.tool_call_id for p in last.parts if isinstance(p, ToolReturnPart) and p.tool_name == tool.name
    ]
    if not answered:
        return None
    return CompactionRequest(focus=_focus(messages, answered[-1]), min_tokens=tool.min_tokens)


def _focus(messages: Sequence[ModelMessage], call_id: str) -> str | None:
    """The `focus` argument of the call `call_id` (the newest response that has it), cut to a bound."""
    for message in reversed(messages):
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
                try:
                    focus = part.args_as_dict().get('focus')
                except Exception:  # arguments that are not JSON: no focus, the compaction goes on
                    return None
                if not isinstance(focus, str):
                    return None
                return focus.strip()[:_MAX_FOCUS_CHARS] or None
    return None
