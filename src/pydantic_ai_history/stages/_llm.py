"""One LLM sub-call of a stage under a timeout, its usage added to the run's usage.

The compactor's summarizer, the artifact summaries and the artifact planner all make such calls; their cost
belongs to the run that triggered them, so it is added to that run's `RunUsage` (best effort: a usage object
of another shape is left alone rather than failing the stage). Text answers go through pydantic-ai's direct
model request: an `Agent` run checks every prompt for look-alike framing tags, which on a 300 KB transcript
costs about ten times the request itself; a structured answer (the artifact plan) needs the `Agent`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from .._compat import instrumentation_of, instrumented_agent_options, result_usage

if TYPE_CHECKING:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from .._context import HistoryContext, StageOperations
    from .._operations import TextPurpose
    from .._summarizer_settings import ModelRef
    from ..files import FileResult, FileSettings
    from ..tokens import TokenizerProfile
    from .artifacts._models import ArtifactPlan

__all__ = (
    'InlineOperations',
    'add_usage',
    'convert_in_thread',
    'operations_of',
    'run_agent',
    'run_plan',
    'run_text',
)

logger = logging.getLogger('pydantic_ai_history.stages')

OutputT = TypeVar('OutputT')


async def run_agent(
    model: Any,
    prompt: str,
    *,
    instructions: str,
    output_type: type[OutputT],
    timeout: float,
    usage: Any = None,
    model_settings: Any = None,
    instrument: InstrumentationSettings | None = None,
) -> tuple[OutputT, Any]:
    """Run a one-off `Agent(model, output_type=, instructions=)` on `prompt`: its output and its `RunUsage`.

    Raises `TimeoutError` after `timeout` seconds and whatever the run raises; the call's usage is added to
    `usage` (the outer run's, when there is one) only when it succeeds. `instrument`: the outer run's
    instrumentation, so the call's spans join its trace (None: pydantic-ai's default).
    """
    from pydantic_ai import Agent

    agent: Agent[None, OutputT] = Agent(
        model, output_type=output_type, instructions=instructions, **instrumented_agent_options(instrument)
    )
    with anyio.fail_after(timeout):
        result = await agent.run(prompt, model_settings=model_settings)
    run_usage = result_usage(result)
    add_usage(usage, run_usage)
    return result.output, run_usage


async def run_text(
    model: Any,
    prompt: str,
    *,
    instructions: str,
    timeout: float,
    usage: Any = None,
    model_settings: Any = None,
    instrument: InstrumentationSettings | None = None,
) -> str:
    """One model request (`prompt` with `instructions`) answered in text: the text of its answer.

    Raises `TimeoutError` after `timeout` seconds and whatever the request raises; its usage is added to
    `usage` (the outer run's, when there is one) when it succeeds. `instrument`: the outer run's
    instrumentation, so the request is a chat span in its trace (None: pydantic-ai's default).
    """
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart

    request = ModelRequest(parts=[UserPromptPart(content=prompt)], instructions=instructions)
    with anyio.fail_after(timeout):
        response = await model_request(model, [request], model_settings=model_settings, instrument=instrument)
    add_usage(usage, response.usage, requests=1)
    return ''.join(p.content for p in response.parts if isinstance(p, TextPart))


def add_usage(usage: Any, extra: Any, *, requests: int = 0) -> None:
    """Add a sub-call's usage to the outer run's `RunUsage`, where the run exposes one with `incr`.

    `requests` counts the model requests a `RequestUsage` stands for (a `RunUsage` carries its own count).
    """
    if usage is None or not hasattr(usage, 'incr'):
        return
    try:
        usage.incr(extra)
        if requests:
            usage.requests += requests
    except Exception:  # a usage object of another shape: accounting is best effort, the stage goes on
        logger.debug('could not add a sub-call usage to the run usage', exc_info=True)


class InlineOperations:
    """A stage's side effects run in place with the models the stage resolved: for a stage used on its own."""

    def __init__(self, context: HistoryContext) -> None:
        self._context = context

    async def request_text(
        self, purpose: TextPurpose, prompt: str, *, model: ModelRef, instructions: str, timeout: float
    ) -> str:
        return await run_text(
            model, prompt, instructions=instructions, timeout=timeout, **self._run_options()
        )

    async def request_plan(
        self, prompt: str, *, model: ModelRef, instructions: str, timeout: float
    ) -> ArtifactPlan:
        return await run_plan(
            model, prompt, instructions=instructions, timeout=timeout, **self._run_options()
        )

    def _run_options(self) -> dict[str, Any]:
        """What every LLM call of the stage takes from the run: its usage, the summarizer's model settings and
        the run's instrumentation (so the call is a span of the run's trace)."""
        context = self._context
        return {
            'usage': context.usage,
            'model_settings': context.summarizer.model_settings,
            'instrument': instrumentation_of(context.run_context),
        }

    async def convert_file(
        self,
        data: bytes,
        *,
        media_type: str,
        name: str | None,
        model_name: str | None,
        settings: FileSettings,
    ) -> FileResult:
        return await convert_in_thread(
            data,
            media_type=media_type,
            name=name,
            model_name=model_name,
            profile=self._context.counter.profile,
            settings=settings,
        )


async def run_plan(
    model: Any,
    prompt: str,
    *,
    instructions: str,
    timeout: float,
    usage: Any,
    model_settings: Any,
    instrument: InstrumentationSettings | None = None,
) -> ArtifactPlan:
    """The artifact planner's one structured call: its `ArtifactPlan`."""
    from .artifacts._models import ArtifactPlan

    plan, _ = await run_agent(
        model,
        prompt,
        instructions=instructions,
        output_type=ArtifactPlan,
        timeout=timeout,
        usage=usage,
        model_settings=model_settings,
        instrument=instrument,
    )
    return plan


async def convert_in_thread(
    data: bytes,
    *,
    media_type: str,
    name: str | None,
    model_name: str | None,
    profile: TokenizerProfile | None,
    settings: FileSettings,
) -> FileResult:
    """Read an attached file in a worker thread (and, for documents, a worker process under its limits)."""
    from ..tokens import TokenCounter

    counter = TokenCounter(model_name, profile=profile)  # a counter of its own: it is used in the thread

    def read() -> FileResult:
        from ..files import read_file  # the readers load on first use: here, off the event loop

        return read_file(
            data, media_type=media_type, name=name, settings=settings, count_tokens=counter.count_text
        )

    return await anyio.to_thread.run_sync(read)


def operations_of(context: HistoryContext) -> StageOperations:
    """Where the stage's side effects run: the processor's operations within a run, else in place."""
    return context.operations if context.operations is not None else InlineOperations(context)
