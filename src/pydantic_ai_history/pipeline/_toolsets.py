"""The tools the capability offers: `read_artifact` once a history holds something to read (sized to the
room of the request that carries it), `compact_context` when `compaction_tool` is on, and the check that no
other tool of the run takes their names."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage

from .._compat import TOOLS_HAVE_METADATA
from ..budget._room import read_room_tokens
from ..messages._marks import READBACK_TOOL_METADATA
from ._agent_checks import clash_error, is_ours, tool_name
from ._compaction_tool import (
    COMPACTION_TOOL_METADATA,
    compaction_toolset,
    compaction_toolset_id,
)
from ._request import RequestPath

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset

    from ..readback import ReadbackGate, ReadRoom


logger = logging.getLogger('pydantic_ai_history')


class Toolsets(RequestPath):
    """The capability's tools, mixed into `HistoryCapability`."""

    if TYPE_CHECKING:
        readback_gate: ReadbackGate
        _built_toolsets: dict[str, tuple[tuple[object, ...], AbstractToolset[Any]]]

    def _check_tool_names(self, tools: Sequence[ToolDefinition]) -> None:
        """A tool of the run named like one of ours fails the run, naming both (our tools carry a mark)."""
        owner = "one of this run's toolsets"
        if _named_not_ours(tools, self.readback_tool_name, READBACK_TOOL_METADATA):
            raise clash_error(self.readback_tool_name, owner)
        tool = self._tool
        if (
            tool is not None
            and TOOLS_HAVE_METADATA
            and _named_not_ours(tools, tool.name, COMPACTION_TOOL_METADATA)
        ):
            raise clash_error(tool.name, owner, compaction=True)

    def compaction_toolset(self) -> AbstractToolset[Any]:
        """The `compact_context` tool (`compaction_tool`) for `Agent(toolsets=...)` on pydantic-ai 1.0 (a
        capability offers it itself); its id is derived from the processor's `id`."""
        if self._tool is None:
            raise ValueError(
                'compaction_toolset() needs HistoryProcessor(compaction_tool=True) (or a CompactionTool): '
                'without it the model could ask for a compaction that nothing would run'
            )
        tool = self._tool
        return self._built(
            'compaction',
            (tool, self.id),
            lambda: compaction_toolset(tool, toolset_id=compaction_toolset_id(self.id)),
        )

    def readback_toolset(self) -> AbstractToolset[Any]:
        """A toolset with `read_artifact` (for `Agent(toolsets=...)` on 1.x), offered only once the run's
        history holds a note that names it (see `ReadbackGate`). Built once per processor (its function
        schema is the costly part of building an agent), and again only when a setting it reads changed."""
        from ..readback import readback_toolset, readback_toolset_id

        return self._built(
            'readback',
            (self.store, self.id, self.readback_tool_name),
            lambda: readback_toolset(
                self.store,
                scope=self.scope_of,
                gate=self.readback_gate,
                toolset_id=readback_toolset_id(self.id),
                room=self.read_room,
                tool_name=self.readback_tool_name,
            ),
        )

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        """The run's toolsets with ours asked beside them, not among them (see `_beside`): the same tools,
        without a task group per question when the agent has tools of its own."""
        from ..readback import readback_toolset_id
        from ._beside import own_tools_beside

        return own_tools_beside(toolset, (readback_toolset_id(self.id), compaction_toolset_id(self.id)))

    def _built(
        self, kind: str, settings: tuple[object, ...], build: Callable[[], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        """The toolset of `kind` built for these `settings` (compared by identity), built on first use."""
        known = self._built_toolsets.get(kind)
        if known is not None and all(a is b for a, b in zip(known[0], settings, strict=True)):
            return known[1]  # each kind is built from as many settings every time
        toolset = build()
        self._built_toolsets[kind] = (settings, toolset)
        return toolset

    def read_room(self, ctx: RunContext[Any]) -> ReadRoom | None:
        """What one `read_artifact` call may return: the room of the request that will carry it, shared by
        the reads the model made in parallel (None when it cannot be worked out: the read's `limit` alone)."""
        try:
            model = self.model if self.model is not None else ctx.model
            counter = self.counter_for(model)
            limits = self._serving_limits(ctx, model)
            tokens = read_room_tokens(
                ctx.messages,
                counter=counter,
                limits=limits,
                floor=self._artifact_settings().resolve_budget(limits),
                tool_name=self.readback_tool_name,
                keep_first_user_message=self.keep_first_user_message,
            )
        except Exception:  # a bound only: the read still answers within its limit
            logger.debug('could not work out the room of a read-back', exc_info=True)
            return None
        if tokens is None:
            return None
        correction = counter.tokenizer_profile.correction
        from ..readback import ReadRoom

        return ReadRoom(
            max_tokens=tokens, count_tokens=lambda text: math.ceil(counter.count_text(text) * correction)
        )

    async def _will_name_readback(self, ctx: Any, messages: Sequence[ModelMessage]) -> bool:
        """Whether a stage will certainly write a note naming `read_artifact` into this history."""
        stages = [s for s in self._stages if hasattr(s, 'will_name_readback')]
        if not stages or not messages:
            return False
        try:
            context = self.make_context(ctx=ctx)
            await context.prove_fits_off_loop(messages, below=self._far_below())
            with self._marks_scope():
                for stage in stages:
                    verdict = stage.will_name_readback(messages, context)  # type: ignore[attr-defined]
                    if await verdict if inspect.isawaitable(verdict) else verdict:
                        return True
        except Exception:  # a prediction only: the tool then comes with the next request
            logger.debug('could not predict a read-back note', exc_info=True)
        return False


def _named_not_ours(tools: Sequence[ToolDefinition], name: str, mark: Mapping[str, str]) -> bool:
    """Whether a tool of `tools` not carrying our `mark` is called `name` (asked on every request: the names
    are compared in C, and only a tool named like ours is looked at closer)."""
    return name in map(tool_name, tools) and any(t.name == name and not is_ours(t, mark) for t in tools)
