"""The `compact_context` tool: the model asks for a compaction at a natural break in its task.

A size trigger does not know where the task is; the model often does. With
`HistoryProcessor(compaction_tool=True)` the tool only answers that compaction is scheduled; the next request,
which carries that answer, compacts as at the trigger with the model's focus. The request is read from the
history, not from tool state, so it is the same on replay and on any worker. The tool is listed from the first
request: one appearing later would rewrite the whole cached prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from .._compat import TOOLS_HAVE_METADATA
from ..context._context import CompactionRequest
from ..context._focus import MAX_MODEL_FOCUS_CHARS, ModelFocus
from ..messages._marks import MARKER_KEY

COMPACT_CONTEXT_TOOL = 'compact_context'
"""The tool's default name (harness's `CompactOnRequest` uses the same)."""
COMPACTION_TOOL_METADATA = {MARKER_KEY: 'compaction'}
"""How the processor tells the tool from an app's tool of the same name (where tools have metadata)."""
SCHEDULED = 'Compaction scheduled: older messages will be summarized before your next turn.'
"""What the tool answers (the compaction itself comes with the next request)."""


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


def _focus(messages: Sequence[ModelMessage], call_id: str) -> ModelFocus | None:
    """The model's focus, marked as its words (`ModelFocus`: data for the summarizer, never an instruction)
    and bounded to `MAX_MODEL_FOCUS_CHARS`."""
    calls = (p for m in reversed(messages) if isinstance(m, ModelResponse) for p in m.parts)
    call = next((p for p in calls if isinstance(p, ToolCallPart) and p.tool_call_id == call_id), None)
    try:
        focus = call.args_as_dict().get('focus') if call is not None else None
    except Exception:  # arguments that are not JSON: no focus, the compaction goes on
        return None
    text = focus.strip()[:MAX_MODEL_FOCUS_CHARS] if isinstance(focus, str) else ''
    return ModelFocus(text) if text else None
