"""Durable execution on DBOS: the history processor under pydantic-ai's `DBOSDurability`.

The agent reads eight pages of customer records with a tool inside a DBOS workflow; its history outgrows the
trigger and is compacted. Every side effect of the processor (the summarizer's LLM call, the store write of a
spilled original, the cache) is a DBOS step named after the capability id, `pydantic_ai_history`, recorded in
the system database beside the model requests and tool calls, and read back instead of done again when DBOS
recovers the workflow after a crash. At the end the example lists the steps DBOS recorded
(`DBOS.list_workflow_steps`) and the summaries as their steps returned them.

System database: SQLite in a temporary directory, removed at the end. For a real deployment set
`DBOS_SYSTEM_DATABASE_URL` (e.g. a Postgres URL, or `sqlite:///path/dbos.sqlite`), `HISTORY_STORE` to a
directory every process sees, and one `HISTORY_SECRET` for all of them.

Models: offline, scripted `FunctionModel`s; set `OPENAI_API_KEY` (and optionally `EXAMPLE_MODEL`) for a real
model, as in the other examples.

Needs pydantic-ai 2.x: pip install "pydantic-ai-slim[dbos]>=2"
Run: python examples/durable_dbos.py
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from _local import local_agent_model, local_summarizer, real_model_name, records, tool_loop
from pydantic_ai import Agent
from pydantic_ai.usage import UsageLimits

from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor
from pydantic_ai_history.store import DirectoryStore

try:
    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from pydantic_ai.durable_exec.dbos import DBOSDurability
except ImportError as missing:  # pydantic-ai 1.x has no DBOSDurability; or dbos is not installed
    UNAVAILABLE: str | None = f'{missing}'
else:
    UNAVAILABLE = None

AGENT_NAME = 'durable_dbos'
CAPABILITY_STEP = f'{AGENT_NAME}__capability__pydantic_ai_history.'
"""How DBOS names the capability's steps: `<agent>__capability__<capability id>.<operation>`."""
PAGES = 8


def build_agent(store: Path, secret: str) -> Agent[None, str]:
    """The agent: the history processor, spilling to a store every process sees, and `DBOSDurability`."""
    model_name = real_model_name()
    history = create_history_processor(
        policy=ContextPolicy(context_window=16_000, max_tokens=2_000, target_tokens=700),
        summarizer=SummarizerSettings(model=model_name or local_summarizer()),
        store=DirectoryStore(store, secret=secret),
    )
    agent: Agent[None, str] = Agent(
        model_name or local_agent_model(tool_loop('lookup_customers', lambda i: {'page': i}, PAGES), 16_000),
        name=AGENT_NAME,
        instructions='Go through the customer records page by page with lookup_customers.',
        capabilities=[history, DBOSDurability()],
    )

    @agent.tool_plain
    def lookup_customers(page: int) -> str:
        """One page of customer records."""
        return records(page, 40)

    return agent


def step_report(steps: list[Any]) -> None:
    counts = Counter(step['function_name'] for step in steps)
    print(f'Steps DBOS recorded for the workflow ({len(steps)} in all):')
    for name, count in sorted(counts.items()):
        print(f'  {count:3d}  {name}')
    requests = sum(n for name, n in counts.items() if name.startswith(f'{AGENT_NAME}__model.request'))
    summaries = [s for s in steps if s['function_name'] == f'{CAPABILITY_STEP}compaction_summary']
    stored = counts[f'{CAPABILITY_STEP}store_write']
    print(
        f'{requests} model requests, {len(summaries)} compaction summaries, {stored} originals stored, '
        'each as a step'
    )
    for number, step in enumerate(summaries, 1):
        result = step['output']
        usage = result.usage_delta
        print(
            f'Summary {number}, as its step {step["function_id"]} returned it '
            f'({usage.input_tokens:,} tokens in, {usage.output_tokens:,} out): {result.value!r}'
        )


async def main(workdir: Path) -> None:
    store = Path(os.environ.get('HISTORY_STORE') or workdir / 'artifacts')
    secret = os.environ.get('HISTORY_SECRET') or secrets.token_hex(32)
    database = os.environ.get('DBOS_SYSTEM_DATABASE_URL') or f'sqlite:///{workdir / "dbos.sqlite"}'
    config: DBOSConfig = {
        'name': 'history_example',
        'system_database_url': database,
        'log_level': 'WARNING',
        'enable_otlp': False,
    }
    DBOS(config=config)
    agent = build_agent(store, secret)  # before launch: DBOS registers the agent's steps when it is built

    @DBOS.workflow()
    async def customer_review(prompt: str) -> str:
        result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=40))
        return result.output

    DBOS.launch()
    try:
        workflow_id = f'customer-review-{secrets.token_hex(4)}'
        where = database if database.startswith('sqlite') else 'the configured system database'
        print(f'DBOS launched on {where}')
        with SetWorkflowID(workflow_id):
            output = await customer_review('List every overdue customer, page by page.')
        print(f'Workflow {workflow_id} finished; the answer: {output}')
        step_report(await DBOS.list_workflow_steps_async(workflow_id))
    finally:
        DBOS.destroy()


if __name__ == '__main__':
    if UNAVAILABLE is not None:
        print(
            'This example needs pydantic-ai 2.x with DBOS support '
            f'(pip install "pydantic-ai-slim[dbos]>=2"): {UNAVAILABLE}'
        )
    else:
        workdir = Path(tempfile.mkdtemp(prefix='history-dbos-'))
        try:
            asyncio.run(main(workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
