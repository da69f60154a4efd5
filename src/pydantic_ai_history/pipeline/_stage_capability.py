"""`StageCapability`: a stage that is a capability of its own (the built-in stages are), and what pydantic-ai
1.0 needs to call one as a history processor."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, overload

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage

from .._compat import HAS_CAPABILITIES
from ..context._context import HistoryContext, HistoryStage
from ._capability import HistoryCapability

_StageT = TypeVar('_StageT', bound='StageCapability')


@dataclass(kw_only=True, eq=False)
class StageCapability(HistoryCapability):
    """A stage that is a capability of its own: alone on an agent its pipeline is itself, with the shared
    settings its fields give; in a `HistoryProcessor` those are the processor's (a stage given one there is
    refused). Called with a `RunContext` it is a history processor; with a `HistoryContext`, a `HistoryStage`
    (`apply_stage`)."""

    name: str = 'stage'
    """The stage's name in events and logs."""
    _given_fields: frozenset[str] = field(init=False, repr=False, compare=False)
    """The keywords the stage was built with (`__new__` records them): a `HistoryProcessor` refuses a stage
    given a shared setting, which only the processor's own reads."""

    def __new__(cls: type[_StageT], *args: Any, **kwargs: Any) -> _StageT:
        stage = super().__new__(cls)
        stage._given_fields = frozenset(kwargs)
        return stage

    def _pipeline(self) -> list[HistoryStage]:
        return [self]

    async def apply_stage(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        """The stage's work on one request's history (the pipeline's guard checks what it returns)."""
        raise NotImplementedError

    @overload
    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage], /) -> list[ModelMessage]: ...

    @overload
    async def __call__(
        self, messages: list[ModelMessage], context: HistoryContext, /
    ) -> list[ModelMessage]: ...

    async def __call__(  # type: ignore[misc]  # pydantic-ai reads the first annotation: RunContext
        self, ctx: RunContext[Any], messages: list[ModelMessage] | HistoryContext, /
    ) -> list[ModelMessage]:
        if isinstance(messages, HistoryContext):  # a pipeline's call: (messages, context)
            return await self.apply_stage(cast('list[ModelMessage]', ctx), messages)
        return await super().__call__(ctx, messages)


def history_processor_annotations(cls: type[Any]) -> None:
    """pydantic-ai 1.0 passes `ctx` to a history processor by the callable's own `__annotations__` (an
    instance's are its class's), not `__call__`'s signature: there `__call__`'s stand in for the fields'."""
    if not HAS_CAPABILITIES:  # resolved here, where the names of `__call__`'s annotations are imported
        cls.__annotations__ = typing.get_type_hints(cls.__call__)
