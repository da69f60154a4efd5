"""The DBOS app behind tests/durable/test_dbos.py: an agent with `DBOSDurability` and the history processor,
a workflow that runs it, and scripted `FunctionModel`s that log every call to a file shared across processes.

Importable (the in-process tests) and runnable as a script, for crash recovery:

    python _dbos_app.py run WORKDIR WORKFLOW_ID      # start the workflow; HISTORY_DBOS_CRASH_AT=n exits the
                                                     # process (os._exit(1)) when the main model makes call n
    python _dbos_app.py recover WORKDIR WORKFLOW_ID  # launch DBOS on the same SQLite file, recover, wait

Both print the workflow's result (the run's messages as JSON) on stdout after a `RESULT:` line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import traceback
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import (
    AgentStreamEvent,
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import UsageLimits

from pydantic_ai_history import (
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.store import DirectoryStore

AGENT_NAME = 'history_dbos'
WORKFLOW_NAME = 'history_dbos.run'
CAPABILITY_ID = 'pydantic_ai_history'
SECRET = 's' * 32

WINDOW, TRIGGER, TARGET = 16_000, 2_500, 900
"""A small policy: a fetch_logs return (~8K tokens) is spilled to the store by the artifact stage, and a few
of them take the history over the trigger, so the compactor summarizes."""
PAGES = 8
"""fetch_logs calls of the 'loop' scenario before the final answer: the main model makes PAGES + 1 calls."""
LINES_PER_PAGE = 200
ART_ID = re.compile(r'art_[0-9a-f]+')
CSV_TEXT = 'city,country,population\n' + ''.join(
    f'City{i},Country{i % 7},{1000 + i * 37}\n' for i in range(300)
)
PROMPT = 'Fetch the service logs page by page and find the root cause of the outage.'

_LEVELS = ('INFO', 'WARN', 'ERROR', 'DEBUG')
_SERVICES = ('billing', 'auth', 'gateway', 'search', 'ledger')


def fetch_logs_text(page: int) -> str:
    """About 8K tokens of log lines, different on every page and line (so no two pages deduplicate)."""
    return '\n'.join(
        f'2024-05-{page + 1:02d}T10:{i // 60 % 60:02d}:{i % 60:02d}Z {_LEVELS[(i * 7 + page) % 4]} '
        f'{_SERVICES[(i + page) % 5]}[{1000 + i}] page={page} line={i} request_id=r{page:02d}{i:04d} '
        f'latency_ms={(i * 37 + page * 11) % 997}'
        for i in range(LINES_PER_PAGE)
    )


# ---- the call log shared across processes ----------------------------------------------------------------


@dataclass
class CallLog:
    """One JSON line per model or summarizer call, appended (and fsynced) so it survives `os._exit`."""

    path: Path

    def append(self, **record: Any) -> None:
        with self.path.open('a') as f:
            f.write(json.dumps({**record, 'pid': os.getpid()}) + '\n')
            f.flush()
            os.fsync(f.fileno())

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return [r for r in rows if kind is None or r['kind'] == kind]


def dbos_position() -> dict[str, Any]:
    """Where a model call runs: the DBOS workflow and step (None in workflow code), and the innermost
    pydantic_ai_history frame that made it."""
    frames = [f for f in traceback.extract_stack() if f'{os.sep}pydantic_ai_history{os.sep}' in f.filename]
    where = None
    if frames:
        path = frames[-1].filename.rsplit(f'{os.sep}src{os.sep}', 1)[-1]
        where = f'{path}:{frames[-1].lineno} in {frames[-1].name}'
    return {'workflow_id': DBOS.workflow_id, 'step_id': DBOS.step_id, 'where': where}


# ---- the scripted models -----------------------------------------------------------------------------------


def _request_text(messages: Sequence[ModelMessage]) -> str:
    parts: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, 'content', None)
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(c for c in content if isinstance(c, str))
    return '\n'.join(parts)


def _latest_return(messages: Sequence[ModelMessage]) -> ToolReturnPart | None:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        return next((p for p in last.parts if isinstance(p, ToolReturnPart)), None)
    return None


@dataclass
class MainModel:
    """The agent's model. Its call number is global (the log's count + 1), so a recovering process goes on
    where the crashed one stopped. A call that crashes the process is not logged: it produced nothing."""

    log: CallLog
    scenario: str
    crash_at: int | None = None

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(self.log.records('model')) + 1
        if self.crash_at is not None and n == self.crash_at:
            os._exit(1)
        response = getattr(self, f'_{self.scenario}')(n, messages, info)
        latest = _latest_return(messages)
        self.log.append(
            kind='model',
            n=n,
            tools=sorted(t.name for t in info.function_tools),
            parts=[type(p).__name__ for p in response.parts],
            read_return=str(latest.content)
            if latest is not None and latest.tool_name == 'read_artifact'
            else None,
            request_text=_request_text(messages) if self.scenario == 'csv' else None,
        )
        return response

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        """The same answers streamed: a run with an event stream handler streams its model requests."""
        for index, part in enumerate(self(messages, info).parts):
            if isinstance(part, ToolCallPart):
                yield {
                    index: DeltaToolCall(
                        part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }
            elif isinstance(part, TextPart):
                yield part.content

    def _loop(self, n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if n <= PAGES:
            return ModelResponse(
                parts=[ToolCallPart('fetch_logs', {'page': n - 1}, tool_call_id=f'fetch_{n}')]
            )
        return ModelResponse(parts=[TextPart('Root cause: the ledger service timed out.')])

    def _readback(self, n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        latest = _latest_return(messages)
        if latest is not None and latest.tool_name == 'read_artifact':
            return ModelResponse(parts=[TextPart('Read it back.')])
        offered = {t.name for t in info.function_tools}
        found = ART_ID.findall(_request_text(messages))
        if found and 'read_artifact' in offered and n > 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        'read_artifact',
                        {'artifact_id': found[0], 'offset': 0, 'limit': 4_000},
                        tool_call_id='read',
                    )
                ]
            )
        if n > 4:
            return ModelResponse(
                parts=[TextPart(f'No artifact id to read (found {found}, offered {sorted(offered)}).')]
            )
        return ModelResponse(parts=[ToolCallPart('fetch_logs', {'page': n - 1}, tool_call_id=f'fetch_{n}')])

    def _csv(self, n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart(f'The CSV has {_request_text(messages).count("City")} city rows.')]
        )


@dataclass
class Summarizer:
    """The summarizer: logs each call, and answers a summary that names its call number and process, so a
    summary written again after recovery cannot pass for the recorded one."""

    log: CallLog

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # async, so it runs on the caller's stack (not in a thread) and `dbos_position` sees who called it
        n = len(self.log.records('summary')) + 1
        text = (
            f'SUMMARY-{n} (pid {os.getpid()}): the agent is fetching service logs page by page to find the '
            'root cause of the outage; pages read so far show ledger latency spikes.'
        )
        self.log.append(kind='summary', n=n, text=text, **dbos_position())
        return ModelResponse(parts=[TextPart(text)])


# ---- the app -------------------------------------------------------------------------------------------------


@dataclass
class App:
    workdir: Path
    agent: Agent[None, str]
    log: CallLog
    workflow: Any
    events: list[HistoryEvent] = field(default_factory=list)
    streamed: list[AgentStreamEvent] = field(default_factory=list)
    """What the agent's `event_stream_handler` received (with `build(..., stream_events=True)`)."""

    @property
    def db_path(self) -> Path:
        return self.workdir / 'dbos.sqlite'


def dbos_config(workdir: Path) -> DBOSConfig:
    return {
        'name': 'history_dbos_tests',
        'system_database_url': f'sqlite:///{workdir / "dbos.sqlite"}',
        'application_version': 'history-dbos-tests-1',
        'executor_id': 'local',
        'log_level': 'WARNING',
        'enable_otlp': False,
    }


def build(
    workdir: Path,
    scenario: str = 'loop',
    *,
    crash_at: int | None = None,
    stream_events: bool = False,
    background: bool = False,
) -> App:
    """Construct DBOS on `workdir/dbos.sqlite`, the agent and the workflow (not launched yet). With
    `stream_events`, the agent has an `event_stream_handler` that keeps every event in `App.streamed`; with
    `background`, the compactor is set to start its summaries ahead of the trigger (`background_start`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    DBOS(config=dbos_config(workdir))
    log = CallLog(workdir / 'calls.jsonl')
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        # the view sizes this scenario was laid out for: one compaction before CRASH_AT, none after it
        policy=ContextPolicy(
            context_window=WINDOW,
            max_tokens=TRIGGER,
            target_tokens=TARGET,
            item_tokens=500,
            large_item_tokens=1_500,
        ),
        summarizer=SummarizerSettings(
            model=FunctionModel(Summarizer(log), model_name='summarizer'), timeout=30
        ),
        store=DirectoryStore(workdir / 'artifacts', secret=SECRET),
        compaction=CompactionSettings(background_start=0.3) if background else True,
        on_event=events.append,
    )
    streamed: list[AgentStreamEvent] = []

    async def keep_events(ctx: RunContext[None], stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            streamed.append(event)

    main_model = MainModel(log, scenario, crash_at)
    agent: Agent[None, str] = Agent(
        FunctionModel(main_model, stream_function=main_model.stream, model_name='main'),
        name=AGENT_NAME,
        capabilities=[processor, DBOSDurability(event_stream_handler=keep_events if stream_events else None)],
    )

    @agent.tool_plain
    def fetch_logs(page: int) -> str:
        """Fetch one page of the service logs."""
        return fetch_logs_text(page)

    @DBOS.workflow(name=WORKFLOW_NAME)
    async def run_agent(prompt: str | list[str | BinaryContent]) -> str:
        result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=50))
        return result.all_messages_json().decode()

    return App(workdir=workdir, agent=agent, log=log, workflow=run_agent, events=events, streamed=streamed)


async def start(app: App, workflow_id: str, prompt: str | list[str | BinaryContent] = PROMPT) -> str:
    with SetWorkflowID(workflow_id):
        return await app.workflow(prompt)


def prompt_for(scenario: str) -> str | list[str | BinaryContent]:
    if scenario == 'csv':
        return [
            'Count the cities in the attached CSV.',
            BinaryContent(CSV_TEXT.encode(), media_type='text/csv'),
        ]
    return PROMPT


def user_prompt_parts(messages: Sequence[ModelMessage]) -> list[UserPromptPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)
    ]


def main(argv: list[str]) -> None:
    command, workdir, workflow_id = argv[0], Path(argv[1]), argv[2]
    scenario = os.environ.get('HISTORY_DBOS_SCENARIO', 'loop')
    crash_at = os.environ.get('HISTORY_DBOS_CRASH_AT')
    background = bool(os.environ.get('HISTORY_DBOS_BACKGROUND'))
    app = build(workdir, scenario, crash_at=int(crash_at) if crash_at else None, background=background)
    DBOS.launch()  # recovers this executor's PENDING workflows in the background
    try:
        if command == 'run':
            output = asyncio.run(start(app, workflow_id, prompt_for(scenario)))
        elif command == 'recover':
            output = DBOS.retrieve_workflow(workflow_id).get_result()
        else:
            raise SystemExit(f'unknown command {command!r}')
        print('RESULT:')
        print(output)
    finally:
        DBOS.destroy()


if __name__ == '__main__':
    main(sys.argv[1:])
