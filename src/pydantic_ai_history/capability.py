"""The capability for pydantic-ai versions that have capabilities (late 1.x, 2.x)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._compat import AbstractCapability

if TYPE_CHECKING:
    from .processor import HistoryProcessor

__all__ = ('HistoryCapability',)

if AbstractCapability is None:  # pragma: no cover - guarded by HistoryProcessor.capability()
    raise ImportError('pydantic_ai_history.capability needs a pydantic-ai version with capabilities')


@dataclass
class HistoryCapability(AbstractCapability):  # type: ignore[misc]
    """Runs the processor before every model request and contributes the artifact read-back tool.

    The tool (in a toolset with the stable id `READBACK_TOOLSET_ID`) is offered only once the run's history
    holds a note that names it, so a run that never spills sends the tool list it would send without us.
    """

    processor: HistoryProcessor

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        parameters = getattr(request_context, 'model_request_parameters', None)
        tools = [*getattr(parameters, 'function_tools', ()), *getattr(parameters, 'output_tools', ())]
        before = request_context.messages
        messages = await self.processor.process(before, ctx=ctx, tool_definitions=tools)
        self.processor.readback_gate.observe(ctx, before, messages)
        request_context.messages = messages.copy()
        ctx.messages[:] = messages
        return request_context

    def get_toolset(self) -> Any:
        return self.processor.readback_toolset()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None
