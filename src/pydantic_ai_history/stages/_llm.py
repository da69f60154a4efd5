"""One LLM sub-call of a stage: a plain `Agent` run under a timeout, its usage added to the run's usage.

The compactor's summarizer, the artifact summaries and the artifact planner all make such calls; their cost
belongs to the run that triggered them, so it is added to that run's `RunUsage` (best effort: a usage object
of another shape is left alone rather than failing the stage).
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import anyio

from .._compat import result_usage

__all__ = ('add_usage', 'run_agent')

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
) -> tuple[OutputT, Any]:
    """Run a one-off `Agent(model, output_type=, instructions=)` on `prompt`: its output and its `RunUsage`.

    Raises `TimeoutError` after `timeout` seconds and whatever the run raises; the call's usage is added to
    `usage` (the outer run's, when there is one) only when it succeeds.
    """
    from pydantic_ai import Agent

    agent: Agent[None, OutputT] = Agent(model, output_type=output_type, instructions=instructions)
    with anyio.fail_after(timeout):
        result = await agent.run(prompt, model_settings=model_settings)
    run_usage = result_usage(result)
    add_usage(usage, run_usage)
    return result.output, run_usage


def add_usage(usage: Any, extra: Any) -> None:
    """Add a sub-call's `RunUsage` to the outer run's, where the run exposes one with `incr`."""
    if usage is None or not hasattr(usage, 'incr'):
        return
    try:
        usage.incr(extra)
    except Exception:  # a usage object of another shape: accounting is best effort, the stage goes on
        logger.debug('could not add a sub-call usage to the run usage', exc_info=True)
