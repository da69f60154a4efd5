"""The history processor under a real DBOS engine (SQLite system database): an agent with `DBOSDurability` and
the processor runs a tool loop whose large returns are spilled to a `DirectoryStore` and whose history is
compacted by a `FunctionModel` summarizer.

- the run completes, and the processor's LLM calls are DBOS steps named after the capability id;
- a process that dies mid-run (`os._exit` inside the main model) is recovered by a second process on the
  same SQLite file without repeating one recorded model or summarizer call, keeping the recorded summary;
- `read_artifact` reads back the original of a spilled tool return inside the workflow;
- an attached CSV (`BinaryContent`) is converted and the workflow completes in time;
- with an `event_stream_handler` on `DBOSDurability`, the processor's `CapabilityEvent`s reach it, each
  handed over in a step.

The app (agent, workflow, scripted models, the call log shared across processes) is `_dbos_app.py`.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip('dbos')
pytest.importorskip('pydantic_ai.durable_exec.dbos', exc_type=ImportError)

from dbos import DBOS

sys.path.insert(0, str(Path(__file__).parent))
import _dbos_app as app_module
from _dbos_app import CAPABILITY_ID, PAGES, App, build, fetch_logs_text, prompt_for, start
from pydantic_ai import CapabilityEvent

from pydantic_ai_history import ArtifactProcessed, BackgroundSummaryStarted, CompactionResult
from pydantic_ai_history.events import (
    CompactionFinishedEvent,
    CompactionStartedEvent,
    ContextUsageEvent,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
SRC = HERE.parent.parent / 'src'
SUMMARY = re.compile(r'SUMMARY-\d+ \(pid \d+\)')
RUN_TIMEOUT = 60.0
CRASH_AT = 8
"""The main model's call that kills the first process: the loop's one compaction comes before call 7."""


@pytest.fixture
async def launched(tmp_path: Path) -> AsyncIterator[Callable[..., App]]:
    """`launched(scenario, folder)`: DBOS on `tmp_path/<folder>/dbos.sqlite` with the app registered, launched."""
    built: list[App] = []

    def launch(scenario: str = 'loop', folder: str | None = None, **options: Any) -> App:
        app = build(tmp_path / (folder or scenario), scenario, **options)
        DBOS.launch()
        built.append(app)
        return app

    try:
        yield launch
    finally:
        DBOS.destroy(destroy_registry=True)


@contextmanager
def hard_timeout(seconds: float) -> Iterator[None]:
    """A hang that blocks the event loop escapes `asyncio.wait_for`: dump every thread's stack and exit."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


async def run_workflow(app: App, workflow_id: str, scenario: str = 'loop') -> list[dict]:
    with hard_timeout(RUN_TIMEOUT + 30):
        output = await asyncio.wait_for(start(app, workflow_id, prompt_for(scenario)), RUN_TIMEOUT)
    return json.loads(output)


def final_text(messages: list[dict]) -> str:
    return ''.join(p.get('content', '') for p in messages[-1]['parts'] if p.get('part_kind') == 'text')


async def step_names(workflow_id: str) -> list[str]:
    return [s['function_name'] for s in await DBOS.list_workflow_steps_async(workflow_id)]


# ---- 1, 2: the loop completes; the summarizer ran as a DBOS step --------------------------------------------


@pytest.mark.parametrize('background', [False, True], ids=['blocking', 'background_start'])
async def test_tool_loop_spills_compacts_and_summarizes_in_dbos_steps(
    launched: Callable[..., App], background: bool
) -> None:
    # with `background_start`, durable workflow code starts no background work: the summary is made at the
    # trigger, as one step, exactly as without it
    app = launched('loop', background=background)
    # workflow ids (and with them DBOS's run ids) of their own: a processor claims each run step it serves
    workflow_id = 'loop-background' if background else 'loop-1'
    messages = await run_workflow(app, workflow_id)
    assert not [e for e in app.events if isinstance(e, BackgroundSummaryStarted)]

    assert final_text(messages) == 'Root cause: the ledger service timed out.'
    assert [r['n'] for r in app.log.records('model')] == list(range(1, PAGES + 2))
    spilled = [e for e in app.events if isinstance(e, ArtifactProcessed)]
    compactions = [e for e in app.events if isinstance(e, CompactionResult)]
    assert len(spilled) == PAGES, 'every fetch_logs return was reduced and its original stored'
    assert any(e.method == 'llm' for e in compactions), compactions
    summaries = app.log.records('summary')
    assert len(summaries) == sum(c.summarizer_calls for c in compactions) >= 1

    steps = await step_names(workflow_id)
    print(f'\nDBOS steps of {workflow_id}: {steps}')
    ours = [name for name in steps if CAPABILITY_ID in name]
    outside = [(r['workflow_id'], r['step_id'], r['where']) for r in summaries if r['step_id'] is None]
    assert not outside, (
        f'the summarizer ran in workflow code, not in a step (workflow, step, caller): {outside}; '
        f'the steps were {sorted(set(steps))}'
    )
    assert ours, f'no step of the {CAPABILITY_ID!r} capability; the steps were {sorted(set(steps))}'
    # the summary was produced inside one of the capability's steps: its recorded output carries the text
    outputs = {
        s['function_name']: repr(s['output'])
        for s in await DBOS.list_workflow_steps_async(workflow_id)
        if CAPABILITY_ID in s['function_name']
    }
    assert any(summaries[0]['text'] in out for out in outputs.values()), (
        f'no {CAPABILITY_ID} step recorded the summary {summaries[0]["text"]!r}: {sorted(outputs)}'
    )


# ---- events: the processor's capability events reach the event stream handler, through a step -----------


async def test_capability_events_reach_the_event_stream_handler(launched: Callable[..., App]) -> None:
    app = launched('loop', 'events', stream_events=True)
    messages = await run_workflow(app, 'events-1')
    assert final_text(messages) == 'Root cause: the ledger service timed out.'

    ours = [
        e for e in app.streamed if isinstance(e, CapabilityEvent) and e.kind.startswith(f'{CAPABILITY_ID}.')
    ]
    kinds = [e.kind for e in ours]
    usage = [e for e in ours if isinstance(e, ContextUsageEvent)]
    model_calls = len(app.log.records('model'))
    assert model_calls == PAGES + 1
    assert len(usage) == model_calls, kinds
    assert len({e.run_id for e in usage}) == 1, [e.run_id for e in usage]
    started = [e for e in ours if isinstance(e, CompactionStartedEvent)]
    finished = [e for e in ours if isinstance(e, CompactionFinishedEvent)]
    compactions = [e for e in app.events if isinstance(e, CompactionResult)]
    assert started, kinds
    assert len(started) == len(finished) == len(compactions), kinds
    assert kinds.index(started[0].kind) < kinds.index(finished[0].kind), kinds
    assert [e.summary for e in finished] == [c.summary for c in compactions]
    # each event was handed to the handler inside a DBOS step of the agent
    steps = await step_names('events-1')
    handler_steps = [name for name in steps if 'event_stream_handler' in name]
    assert len(handler_steps) >= len(ours), sorted(set(steps))


# ---- 3: crash recovery in a second process -------------------------------------------------------------------


def _script(command: str, workdir: Path, workflow_id: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        'PYTHONPATH': os.pathsep.join([str(SRC), str(HERE), os.environ.get('PYTHONPATH', '')]),
        **env,
    }
    return subprocess.run(
        [sys.executable, str(HERE / '_dbos_app.py'), command, str(workdir), workflow_id],
        env=environ,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def _result(proc: subprocess.CompletedProcess[str]) -> list[dict]:
    assert proc.returncode == 0, (
        f'exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}'
    )
    return json.loads(proc.stdout.split('RESULT:\n', 1)[1])


@pytest.mark.parametrize('background', [False, True], ids=['blocking', 'background_start'])
async def test_recovery_in_a_new_process_repeats_no_recorded_call(
    tmp_path: Path, launched: Callable[..., App], background: bool
) -> None:
    suffix = 'background' if background else '1'
    # the uninterrupted run: what the crashed-and-recovered one must add up to
    reference = launched('loop', 'reference', background=background)
    reference_messages = await run_workflow(reference, f'reference-{suffix}')
    reference_models = len(reference.log.records('model'))
    reference_summaries = len(reference.log.records('summary'))

    workdir = tmp_path / 'crash'
    env = {'HISTORY_DBOS_BACKGROUND': '1'} if background else {}
    crashed = await asyncio.to_thread(
        _script, 'run', workdir, f'crash-{suffix}', HISTORY_DBOS_CRASH_AT=str(CRASH_AT), **env
    )
    assert crashed.returncode == 1, f'the first process should die in model call {CRASH_AT}: {crashed.stderr}'
    log = app_module.CallLog(workdir / 'calls.jsonl')
    before = log.records()
    first_pid = before[0]['pid']
    recorded_summaries = [r['text'] for r in before if r['kind'] == 'summary']
    assert [r['n'] for r in before if r['kind'] == 'model'] == list(range(1, CRASH_AT))
    assert recorded_summaries, 'the crash comes after at least one compaction'

    recovered = await asyncio.to_thread(_script, 'recover', workdir, f'crash-{suffix}', **env)
    messages = _result(recovered)
    after = [r for r in log.records() if r['pid'] != first_pid]
    repeated_models = [r['n'] for r in after if r['kind'] == 'model' and r['n'] < CRASH_AT]
    repeated_summaries = [(r['text'][:20], r['step_id'], r['where']) for r in after if r['kind'] == 'summary']
    models = log.records('model')

    final_summaries = SUMMARY.findall(json.dumps(messages))
    recorded = {SUMMARY.match(t).group() for t in recorded_summaries}
    # every check, so one run reports all that recovery got wrong
    problems = {
        'final answer differs from the uninterrupted run': final_text(messages)
        != final_text(reference_messages),
        f'summarizer called again on recovery (text, step, caller): {repeated_summaries}': bool(
            repeated_summaries
        ),
        f'recorded model calls repeated on recovery: {repeated_models}': bool(repeated_models),
        f"model calls {[r['n'] for r in models]} are not the uninterrupted run's 1..{reference_models}": (
            [r['n'] for r in models] != list(range(1, reference_models + 1))
        ),
        f'{len(log.records("summary"))} summarizer calls in all, the uninterrupted run made {reference_summaries}': (
            len(log.records('summary')) != reference_summaries
        ),
        f"the final history's summary {final_summaries} is not the one recorded before the crash {sorted(recorded)}": (
            not final_summaries or not set(final_summaries) <= recorded
        ),
    }
    failed = [problem for problem, bad in problems.items() if bad]
    assert not failed, '\n'.join(failed)


# ---- 4: read_artifact inside the workflow -------------------------------------------------------------------


async def test_read_artifact_reads_back_the_spilled_original(launched: Callable[..., App]) -> None:
    app = launched('readback')
    messages = await run_workflow(app, 'readback-1', 'readback')

    assert final_text(messages) == 'Read it back.'
    reads = [r['read_return'] for r in app.log.records('model') if r.get('read_return')]
    assert len(reads) == 1
    assert not reads[0].startswith('Error'), reads[0]
    assert any(fetch_logs_text(page)[:3_000] in reads[0] for page in range(PAGES)), reads[0][:500]
    print(f'\nDBOS steps of readback-1: {await step_names("readback-1")}')


# ---- 5: an attached CSV -------------------------------------------------------------------------------------


async def test_attached_csv_completes(launched: Callable[..., App]) -> None:
    app = launched('csv')
    messages = await run_workflow(app, 'csv-1', 'csv')

    assert final_text(messages).startswith('The CSV has ')
    assert [e.strategy for e in app.events if isinstance(e, ArtifactProcessed)] == ['convert']
    (call,) = app.log.records('model')
    assert 'City0' in call['request_text'], 'the model saw the converted table'
    print(f'\nDBOS steps of csv-1: {await step_names("csv-1")}')
