"""Our tools beside the run's toolset instead of inside it.

pydantic-ai combines an agent's toolsets in a `CombinedToolset`, which asks its members concurrently, in an
anyio task group, whenever it has more than one: for the run, and at every step for the toolsets, the tools
and the instructions. An agent with tools of its own and our read-back toolset pays that task group seven
times in a small run: half of what the capability added to it. Our toolset only reads the run's context, so
asking it after the others loses nothing: `OwnToolsBeside` asks the run's other toolsets as pydantic-ai
combined them, then ours, in the same task.

Only the shape pydantic-ai assembles is rearranged (its `prepare_tools` dispatch around the combined
toolsets, as `get_wrapper_toolset` receives it, durable leaves swapped in or not), and only when exactly one
member holds our tools and nothing else; any other shape is left as it is. Our tools are then outside that
dispatch: another capability's `prepare_tools` does not see them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import (
    AbstractToolset,
    CombinedToolset,
    PreparedToolset,
    ToolsetTool,
    WrapperToolset,
)

from .._compat import TOOLS_HAVE_TOOLSET_ID
from ._agent_checks import clash_error

if TYPE_CHECKING:
    from typing_extensions import Self


@dataclass(kw_only=True)
class _OwnTool(ToolsetTool[Any]):
    """One of our tools as `OwnToolsBeside` lists it: the tool our toolset listed, to call it with."""

    source_tool: ToolsetTool[Any]
    """The tool as our toolset listed it."""


@dataclass
class OwnToolsBeside(WrapperToolset[Any]):
    """The run's toolsets (`wrapped`), then ours (`own`), asked one after the other."""

    own: AbstractToolset[Any] = field(kw_only=True)
    """The toolset that holds our tools (its leaves durable-wrapped or not, as the run's)."""

    _entered: bool = field(init=False, default=False)
    """Whether both parts were entered (and so are left when the run leaves this toolset)."""

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        return self._with(await self.wrapped.for_run(ctx), await self.own.for_run(ctx))

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        return self._with(await self.wrapped.for_run_step(ctx), await self.own.for_run_step(ctx))

    def _with(self, wrapped: AbstractToolset[Any], own: AbstractToolset[Any]) -> OwnToolsBeside:
        """This toolset, or a new one holding what its two parts became for the run or the step (built
        directly: `dataclasses.replace` reads every field's definition, at every step)."""
        return self if wrapped is self.wrapped and own is self.own else OwnToolsBeside(wrapped, own=own)

    # Entered and left as pydantic-ai's combined toolset enters its members, without an `AsyncExitStack`:
    # two parts, at every step, where the stack's bookkeeping cost more than the parts' own.
    async def __aenter__(self) -> Self:
        await self.wrapped.__aenter__()
        try:
            await self.own.__aenter__()
        except BaseException as exc:
            await self.wrapped.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._entered = True
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        if not self._entered:
            return None
        self._entered = False
        try:
            await self.own.__aexit__(*args)
        finally:
            await self.wrapped.__aexit__(*args)
        return None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        own = await self.own.get_tools(ctx)
        if not own:
            return tools
        merged = dict(tools)
        for name, tool in own.items():
            if name in tools:
                raise clash_error(name, tools[name].toolset.label)
            tool_def = tool.tool_def
            if TOOLS_HAVE_TOOLSET_ID and tool_def.toolset_id is None and tool.toolset.id is not None:
                tool_def = replace(tool_def, toolset_id=tool.toolset.id)  # as a combined toolset stamps it
            merged[name] = _OwnTool(
                toolset=tool.toolset,
                tool_def=tool_def,
                max_retries=tool.max_retries,
                args_validator=tool.args_validator,
                args_validator_func=tool.args_validator_func,
                source_tool=tool,
            )
        return merged

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if not isinstance(tool, _OwnTool):
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        # the definition as handed over (a wrapper outside may have changed it), with the toolset id ours had
        tool_def = tool.tool_def
        if TOOLS_HAVE_TOOLSET_ID:
            tool_def = replace(tool_def, toolset_id=tool.source_tool.tool_def.toolset_id)
        return await self.own.call_tool(name, tool_args, ctx, replace(tool.source_tool, tool_def=tool_def))

    def apply(self, visitor: Callable[[AbstractToolset[Any]], None]) -> None:
        self.wrapped.apply(visitor)
        self.own.apply(visitor)

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return replace(
            self, wrapped=self.wrapped.visit_and_replace(visitor), own=self.own.visit_and_replace(visitor)
        )


def own_tools_beside(toolset: AbstractToolset[Any], own_ids: Collection[str]) -> AbstractToolset[Any] | None:
    """`toolset` (as `get_wrapper_toolset` receives it) with the one member whose every toolset carries one
    of `own_ids` taken out of the combined toolsets and asked beside them; None for any other shape."""
    if not isinstance(toolset, PreparedToolset) or not isinstance(toolset.wrapped, CombinedToolset):
        return None
    combined = toolset.wrapped
    if len(combined.toolsets) < 2:  # ours alone, or none: asked without a task group already
        return None
    own = [member for member in combined.toolsets if _only_ours(member, own_ids)]
    if len(own) != 1:
        return None
    # the others stay combined, even one alone (which it asks without a task group): it stamps their ids
    others = replace(combined, toolsets=[member for member in combined.toolsets if member is not own[0]])
    return OwnToolsBeside(replace(toolset, wrapped=others), own=own[0])


def _only_ours(toolset: AbstractToolset[Any], own_ids: Collection[str]) -> bool:
    """Whether every toolset under `toolset` that lists tools itself carries one of `own_ids`."""
    ids: list[str | None] = []

    def collect(found: AbstractToolset[Any]) -> None:
        if not isinstance(
            found, WrapperToolset
        ):  # a wrapper (ours, or pydantic-ai's owner) lists none itself
            ids.append(found.id)

    toolset.apply(collect)
    return bool(ids) and all(found in own_ids for found in ids)
