"""One contender at one window: the tool loop, then its bill, its rewrites, its facts and its step times."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from peers._strict import Encoder
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability, Caching
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.usage import UsageLimits

from .accounting import bill, readback_bill, step_latency
from .contenders import LABELS, build
from .facts import count_facts, named_ids
from .pricing import Prices
from .provider import CostProvider, RequestClock, render
from .summarizer import Summarizer
from .workload import Workload

__all__ = ('INSTRUCTIONS', 'PROMPT', 'RunConfig', 'run_one', 'versions')

INSTRUCTIONS = (
    'You are a data-quality auditor. Work through the sources one tool call at a time: search_docs for '
    'articles, call_api for API records, query_table for tables. For every source, note identifiers, amounts '
    'and file paths that look wrong or unusual, and keep them exact: the final report must quote them '
    'verbatim. Do not re-read a source you already read. When every source is read, answer with the report.'
)
PROMPT = (
    'Audit the Q3 data exports. Read every source the tools give you, in order, and at the end list every '
    'audit note (order ids, disputed amounts, export paths) with the source it came from.'
)


@dataclass(frozen=True)
class RunConfig:
    contender: str
    window: int
    steps: int
    model_seconds: float = 0.0
    summarizer_seconds: float = 0.0
    summary_requests: int = 0
    """The cost runs: model requests a summarizer call lasts while the run goes on (`RequestClock`)."""
    id_secret: bytes | None = None
    """Our store's secret, and a fixed conversation id (the same artifact ids, and so the same costs, on every
    run); None: a fresh secret and conversation, as an app has."""


class _Probe(AbstractCapability[Any]):
    """Keeps the newest run context (for the read-backs after the run); changes nothing."""

    ctx: RunContext[Any] | None = None

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        self.ctx = ctx
        return request_context


def _tools(workload: Workload) -> list[Tool[Any]]:
    def output(step: int) -> Any:
        return workload.steps[step].output

    if workload.tools:  # a workload that declares its tools: each returns its step's output

        async def replay(step: int, **_: Any) -> Any:
            return output(step)

        return [
            Tool.from_schema(replay, spec.name, spec.description, spec.parameters) for spec in workload.tools
        ]

    async def search_docs(query: str, step: int) -> Any:
        """Search the document store and return the best article for `query`."""
        return output(step)

    async def call_api(query: str, step: int) -> Any:
        """Call the records API and return the matching records as JSON."""
        return output(step)

    async def query_table(query: str, step: int) -> Any:
        """Run a query against the exports warehouse and return the rows as CSV."""
        return output(step)

    return [Tool(f) for f in (search_docs, call_api, query_table)]


def _script(workload: Workload) -> Any:
    steps = workload.steps

    def respond(index: int) -> ModelResponse:
        if index < len(steps):
            step = steps[index]
            args = {'query': step.query} if step.args is None else step.args
            call = ToolCallPart(step.tool, {**args, 'step': index}, tool_call_id=f'call_{index:04d}')
            return ModelResponse(parts=[TextPart(f'Reading source {index} next.'), call], model_name='gpt-4o')
        return ModelResponse(parts=[TextPart(f'Report: {len(steps)} sources read.')], model_name='gpt-4o')

    return respond


async def run_one(config: RunConfig, workload: Workload, encode: Encoder, prices: Prices) -> dict[str, Any]:
    """Run the tool loop for one contender and measure it."""
    clock = RequestClock(config.summary_requests) if not config.model_seconds else None
    provider = CostProvider(
        _script(workload), config.window, encode, model_seconds=config.model_seconds, clock=clock
    )
    summarizer = Summarizer(
        partial(render, encode=encode), encode, seconds=config.summarizer_seconds, clock=clock
    )
    setup = build(config.contender, config.window, summarizer.model(), id_secret=config.id_secret)
    probe = _Probe()
    agent = Agent(
        provider.model(),
        instructions=workload.instructions or INSTRUCTIONS,
        tools=_tools(workload),
        capabilities=[*setup.capabilities, Caching(), probe],
    )
    error = None
    started = time.perf_counter()
    try:
        await agent.run(
            workload.prompt or PROMPT,
            usage_limits=UsageLimits(request_limit=None),
            # with a fixed secret, a fixed conversation too: ours' ids are keyed with both
            conversation_id=None if config.id_secret is None else 'bench-cost',
        )
    except Exception as exc:  # a contender that crashes the run is reported, not fatal to the benchmark
        error = f'{type(exc).__name__}: {exc}'[:300]
    wall = time.perf_counter() - started
    try:
        read = partial(setup.read, probe.ctx) if setup.read is not None else None
        search = partial(setup.search, probe.ctx) if setup.search is not None else None
        ids = named_ids(provider.final_text, setup.id_pattern) if setup.id_pattern is not None else []
        facts = await count_facts([f.text for f in workload.facts], provider.final_text, ids, read, search)
    finally:
        if setup.close is not None:
            await setup.close()
        for directory in setup.temporary:
            directory.cleanup()
    result = bill(provider.requests, summarizer.calls, prices)
    final = next((r.tokens for r in reversed(provider.requests) if r.rejected is None), 0)
    readbacks = readback_bill(
        final, list(zip(facts.one_read_away, facts.answers, strict=True)), encode, prices
    )
    for mode, cost in readbacks['cost'].items():  # a fact one read away is paid for by its read-back
        result[mode]['cost_without_readbacks'] = result[mode]['cost']
        result[mode]['cost'] = round(result[mode]['cost'] + cost, 4)
    result.update(
        readbacks=readbacks,
        contender=config.contender,
        workload=workload.name,
        label=LABELS[config.contender],
        window=config.window,
        steps=config.steps,
        wall_seconds=round(wall, 2),
        error=error,
        facts={
            'total': len(workload.facts),
            'in_context': len(facts.in_context),
            'one_read_away': len(facts.one_read_away),
            'ids_named': facts.ids_named,
        },
        latency=step_latency(provider.requests, summarizer.calls),
    )
    return result


def versions() -> dict[str, str]:
    out = {}
    for name in (
        'pydantic-ai-slim',
        'pydantic-ai-history',
        'pydantic-ai-harness',
        'summarization-pydantic-ai',
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = '-'
    return out
