"""The Temporal application under test: agents with the history processor and `TemporalDurability`, their
workflows, and the scripted models. Kept apart from the test module so the workflow sandbox re-imports only
this file (with pydantic-ai, pydantic_ai_history and temporalio), never pytest.

Every model call runs in an activity on the worker, in this process's copy of the module: the counters below
are that copy's, so a call made in workflow code (the sandbox's copy) or again on replay shows up here or
nowhere. The store root comes from the environment, set by the host's first import, so the sandbox's copy of
the module builds its agents on the same directory.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic_ai import Agent, BinaryContent, RunContext
from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import UsageLimits
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

from pydantic_ai_history import (
    ArtifactSettings,
    CompactionSettings,
    ContextPolicy,
    SummarizerSettings,
    create_history_processor,
)

try:  # the brief has DirectoryStore exported at the top level; on main it lives in `store`
    from pydantic_ai_history import DirectoryStore  # type: ignore[attr-defined]
except ImportError:
    from pydantic_ai_history.store import DirectoryStore

STORE_ENV = 'PAI_HISTORY_TEMPORAL_TEST_STORE'
if not os.environ.get(STORE_ENV):  # the host's first import; the sandbox's copy finds it set
    os.environ[STORE_ENV] = tempfile.mkdtemp(prefix='pai-history-temporal-')
STORE_ROOT = os.environ[STORE_ENV]
SECRET = 's' * 32

WINDOW, TRIGGER, TARGET = 24_000, 12_000, 4_000
FETCHES = 4
"""`fetch_logs` calls in the tool loop, each returning about 8,000 tokens."""
ART_ID = re.compile(r'art_[0-9a-f]+')
ONE_ATTEMPT = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_attempts=1)
)
"""No activity retries: a failure inside an activity surfaces at once instead of after minutes of backoff."""


@dataclass
class Calls:
    """Calls of the scripted models and tools, counted in whichever copy of this module ran them."""

    main: int = 0
    summarizer: int = 0
    fetches: int = 0

    def snapshot(self) -> tuple[int, int, int]:
        return self.main, self.summarizer, self.fetches


CALLS = Calls()


@dataclass
class HandledEvents:
    """What the event stream handler received, per workflow id: it runs as an activity, so in this copy."""

    by_workflow: dict[str, list[AgentStreamEvent]] = field(default_factory=dict)


HANDLED = HandledEvents()


async def record_events(ctx: RunContext[None], stream: AsyncIterable[AgentStreamEvent]) -> None:
    """The agent's event stream handler: keep every event it is handed, under the workflow that ran it."""
    workflow_id = (activity.info().workflow_id or '') if activity.in_activity() else ''
    async for event in stream:
        HANDLED.by_workflow.setdefault(workflow_id, []).append(event)


def log_page(page: int) -> str:
    """About 8,000 tokens of distinct, deterministic log lines (and a marker line to find them by)."""
    lines = [f'=== LOG PAGE {page} BEGIN ===']
    for i in range(190):
        lines.append(
            f'2024-05-0{page % 9 + 1}T12:{i // 60:02d}:{i % 60:02d}Z INFO svc=billing-{page} req=r{page}-{i:04d} '
            f'route=/v1/invoices/{i * 7 + page} status={200 if i % 17 else 503} latency_ms={(i * 37 + page) % 900}'
        )
    lines.append(f'=== LOG PAGE {page} END ===')
    return '\n'.join(lines)


def _latest_text(messages: list[ModelMessage]) -> str:
    """Every text the latest request carries (tool returns, user prompts), joined."""
    request = messages[-1]
    assert isinstance(request, ModelRequest)
    texts: list[str] = []
    for part in request.parts:
        if isinstance(part, ToolReturnPart):
            texts.append(part.model_response_str())
        elif isinstance(part, UserPromptPart):
            content = part.content if isinstance(part.content, list) else [part.content]
            texts.extend(c for c in content if isinstance(c, str))
    return '\n'.join(texts)


def _all_text(messages: list[ModelMessage]) -> str:
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, 'content', None)
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):  # a user prompt with attachments: its text items
                texts.extend(item for item in content if isinstance(item, str))
            elif isinstance(part, ToolReturnPart):
                texts.append(part.model_response_str())
    return '\n'.join(texts)


def tool_loop_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Fetch `FETCHES` log pages, then read back the first artifact id the history names, then answer."""
    CALLS.main += 1
    request = messages[-1]
    assert isinstance(request, ModelRequest)
    returns = [p for p in request.parts if isinstance(p, ToolReturnPart)]
    if returns and returns[0].tool_name == 'read_artifact':
        return ModelResponse(parts=[TextPart(f'done; read back: {returns[0].model_response_str()[:20_000]}')])
    # the newest page asked for: its call is in the last unit, which every compaction keeps verbatim
    fetched = max(
        (
            int(p.args_as_dict()['page'])
            for m in messages
            if isinstance(m, ModelResponse)
            for p in m.parts
            if isinstance(p, ToolCallPart) and p.tool_name == 'fetch_logs'
        ),
        default=0,
    )
    if fetched < FETCHES:
        return ModelResponse(
            parts=[ToolCallPart('fetch_logs', {'page': fetched + 1}, tool_call_id=f'fetch_{fetched + 1}')]
        )
    offered = [t.name for t in info.function_tools]
    found = ART_ID.findall(_latest_text(messages)) or ART_ID.findall(_all_text(messages))
    if 'read_artifact' in offered and found:
        return ModelResponse(
            parts=[ToolCallPart('read_artifact', {'artifact_id': found[0]}, tool_call_id='read_1')]
        )
    return ModelResponse(parts=[TextPart(f'done without read-back; offered={offered} ids={found[:3]}')])


async def tool_loop_stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """`tool_loop_model` streamed: a run with an event stream handler streams its model requests."""
    response = tool_loop_model(messages, info)
    for index, part in enumerate(response.parts):
        if isinstance(part, ToolCallPart):
            yield {
                index: DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)
            }
        elif isinstance(part, TextPart):
            yield part.content


def summarizer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    CALLS.summarizer += 1
    return ModelResponse(
        parts=[TextPart(f'SUMMARY #{CALLS.summarizer}: fetched billing log pages; 503s seen on some routes.')]
    )


def attachments_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    CALLS.main += 1
    text = _all_text(messages)
    return ModelResponse(parts=[TextPart(f'read the attachments; saw {len(text)} characters of text')])


def _processor(*, background_start: float | None = None, recall_chars: int = 0) -> Any:
    return create_history_processor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        # tool outputs kept whole while the artifact budget allows, so the loop reaches the trigger
        artifacts=ArtifactSettings(max_artifact_tokens=None),
        summarizer=SummarizerSettings(
            model=FunctionModel(
                summarizer_model, model_name='summarizer', profile={'context_window': 128_000}
            )
        ),
        store=DirectoryStore(STORE_ROOT, secret=SECRET),
        compaction=CompactionSettings(background_start=background_start, recall_chars=recall_chars),
    )


tool_loop_agent: Agent[None, str] = Agent(
    FunctionModel(tool_loop_model, model_name='tool-loop', profile={'context_window': WINDOW}),
    name='history_tool_loop',
    instructions='Read the billing logs page by page with fetch_logs.',
    capabilities=[_processor(), TemporalDurability(activity_config=ONE_ATTEMPT)],
)


@tool_loop_agent.tool_plain
def fetch_logs(page: int) -> str:
    """One page of the billing service's logs."""
    CALLS.fetches += 1
    return log_page(page)


attachments_agent: Agent[None, str] = Agent(
    FunctionModel(attachments_model, model_name='attachments', profile={'context_window': WINDOW}),
    name='history_attachments',
    capabilities=[_processor(), TemporalDurability(activity_config=ONE_ATTEMPT)],
)


events_agent: Agent[None, str] = Agent(
    FunctionModel(
        tool_loop_model,
        stream_function=tool_loop_stream,
        model_name='tool-loop',
        profile={'context_window': WINDOW},
    ),
    name='history_events',
    instructions='Read the billing logs page by page with fetch_logs.',
    tools=[fetch_logs],
    capabilities=[
        _processor(),
        TemporalDurability(activity_config=ONE_ATTEMPT, event_stream_handler=record_events),
    ],
)
"""The tool loop again, with an `event_stream_handler`: pydantic-ai runs it as an activity per event."""


background_agent: Agent[None, str] = Agent(
    FunctionModel(tool_loop_model, model_name='tool-loop', profile={'context_window': WINDOW}),
    name='history_background',
    instructions='Read the billing logs page by page with fetch_logs.',
    tools=[fetch_logs],
    capabilities=[_processor(background_start=0.3), TemporalDurability(activity_config=ONE_ATTEMPT)],
)
"""The tool loop with `background_start`: workflow code starts no background work, the summary is made at the
trigger as one activity."""


def brief_loop_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """`tool_loop_model` with a one-word final answer (its answer quotes the read-back: 5,000 tokens)."""
    response = tool_loop_model(messages, info)
    if any(isinstance(part, TextPart) for part in response.parts):
        return ModelResponse(parts=[TextPart('done')])
    return response


recall_agent: Agent[None, str] = Agent(
    FunctionModel(brief_loop_model, model_name='tool-loop', profile={'context_window': WINDOW}),
    name='history_recall',
    instructions='Read the billing logs page by page with fetch_logs.',
    tools=[fetch_logs],
    capabilities=[_processor(recall_chars=4_000), TemporalDurability(activity_config=ONE_ATTEMPT)],
)
"""The tool loop with recall: a second run's question after the first run's compaction gets the stored
passages that match it, searched in an activity."""
RECALL_QUESTION = 'What status did req r1-0017 get?'
"""Asked in the second run: page 1, which holds that request's line, is in the compacted part."""


@workflow.defn
class ToolLoopWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (tool_loop_agent,)

    @workflow.run
    async def run(self, prompt: str) -> list[ModelMessage]:
        result = await tool_loop_agent.run(prompt, usage_limits=UsageLimits(request_limit=50))
        return result.all_messages()


@workflow.defn
class AttachmentsWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (attachments_agent,)

    @workflow.run
    async def run(self, prompt: list[str | BinaryContent]) -> str:
        result = await attachments_agent.run(prompt)
        return result.output


@workflow.defn
class EventsWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (events_agent,)

    @workflow.run
    async def run(self, prompt: str) -> list[ModelMessage]:
        result = await events_agent.run(prompt, usage_limits=UsageLimits(request_limit=50))
        return result.all_messages()


@workflow.defn
class BackgroundWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (background_agent,)

    @workflow.run
    async def run(self, prompt: str) -> list[ModelMessage]:
        result = await background_agent.run(prompt, usage_limits=UsageLimits(request_limit=50))
        return result.all_messages()


@workflow.defn
class RecallWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (recall_agent,)

    @workflow.run
    async def run(self, prompt: str) -> list[ModelMessage]:
        first = await recall_agent.run(prompt, usage_limits=UsageLimits(request_limit=50))
        second = await recall_agent.run(
            RECALL_QUESTION, message_history=first.all_messages(), usage_limits=UsageLimits(request_limit=50)
        )
        return second.all_messages()


WORKFLOWS = (ToolLoopWorkflow, AttachmentsWorkflow, EventsWorkflow, BackgroundWorkflow, RecallWorkflow)
