"""Human approval through a real `Agent`: approve, resume, compact; the approved result reaches the model.

The run ends with `DeferredToolRequests`; the app approves and resumes with `deferred_tool_results`. The
approved tool's return then sits in a request of its own, after the request with the other call's return: the
returns of one response split over two requests. The resumed history is over the compaction trigger, so the
compactor (with a scripted summarizer) runs on exactly that shape. The model must see the approved result
(it asks for approval again when it does not) and every history it receives must be valid.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
    validate_history,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES, ProcessHistory

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]

try:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
except ImportError:  # pragma: no cover - every supported version has them today
    DeferredToolRequests = None  # type: ignore[assignment,misc]

LINE = 'row {i}: the service handled the request and wrote a log line with the latency and the region\n'
DELETED = 'File ok_to_delete.py deleted; freed blocks:\n' + ''.join(LINE.format(i=i) for i in range(100))


def _listing(page: int) -> str:
    return ''.join(LINE.format(i=page * 1000 + i) for i in range(40))


def _approved_result_seen(messages: list[ModelMessage]) -> bool:
    return any(
        isinstance(p, ToolReturnPart) and p.tool_call_id == 'ok_to_delete' and 'deleted' in str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
    )


class Main:
    """Two rounds of `fetch`, then `create_file` beside two `delete_file` calls that need approval; once
    resumed it answers, or, when it cannot see the approved deletion, asks for it again (as a model would)."""

    def __init__(self) -> None:
        self.received: list[list[ModelMessage]] = []
        self.step = 0

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(list(messages))
        self.step += 1
        if self.step <= 2:
            return ModelResponse(parts=[ToolCallPart('fetch', {'page': self.step}, f'fetch_{self.step}')])
        if self.step == 3:
            return ModelResponse(
                parts=[
                    ToolCallPart('create_file', {'path': 'new_file.py'}, 'create_file'),
                    ToolCallPart('delete_file', {'path': 'ok_to_delete.py'}, 'ok_to_delete'),
                    ToolCallPart('delete_file', {'path': 'never_delete.py'}, 'never_delete'),
                ]
            )
        if _approved_result_seen(messages):
            return ModelResponse(parts=[TextPart('Done: ok_to_delete.py is gone, never_delete.py stays.')])
        return ModelResponse(parts=[ToolCallPart('delete_file', {'path': 'ok_to_delete.py'}, 'again')])


def _summarizer(calls: list[str]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append('summary')
        return ModelResponse(
            parts=[TextPart('Summary: two pages fetched; a file was created and deletions asked.')]
        )

    return FunctionModel(respond, model_name='summarizer')


@pytest.mark.skipif(
    DeferredToolRequests is None, reason='this pydantic-ai has no deferred tools or approvals'
)
def test_approved_tool_result_survives_compaction() -> None:
    main = Main()
    summaries: list[str] = []
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=20_000, max_tokens=3_000, target_tokens=2_400),
        summarizer=SummarizerSettings(model=_summarizer(summaries)),
        artifacts=False,
        on_event=events.append,
    )
    plug: dict[str, Any] = (
        {'capabilities': [ProcessHistory(processor)]}
        if HAS_CAPABILITIES
        else {'history_processors': [processor]}
    )
    agent = Agent(FunctionModel(main.respond), output_type=[str, DeferredToolRequests], **plug)  # type: ignore[call-overload]

    @agent.tool_plain
    def fetch(page: int) -> str:
        return _listing(page)

    @agent.tool_plain
    def create_file(path: str) -> str:
        return f'File {path!r} created'

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return DELETED if path == 'ok_to_delete.py' else f'File {path!r} deleted'

    first = agent.run_sync(
        'Fetch two pages, then create new_file.py and delete ok_to_delete.py and never_delete.py'
    )
    assert isinstance(first.output, DeferredToolRequests)
    assert [c.tool_call_id for c in first.output.approvals] == ['ok_to_delete', 'never_delete']
    assert not [e for e in events if isinstance(e, CompactionResult)], 'the first run stays under the trigger'

    second = agent.run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={'ok_to_delete': True, 'never_delete': ToolDenied('File cannot be deleted')}
        ),
    )

    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert compactions, 'the resumed history was compacted'
    assert summaries, 'the scripted summarizer wrote the summary'
    resumed = main.received[3]
    assert _approved_result_seen(resumed), 'the approved result was dropped before the model saw it'
    assert any(
        isinstance(m, ModelResponse)
        and any(getattr(p, 'tool_call_id', None) == 'ok_to_delete' for p in m.parts)
        for m in resumed
    ), 'the call the approved result answers was dropped'
    assert not any(
        isinstance(m, ModelRequest) and any(getattr(p, 'tool_name', None) == 'fetch' for p in m.parts)
        for m in resumed
    ), 'the fetched pages were compacted away'
    assert [v for v in validate_history(resumed) if v.severity == 'error'] == []
    assert second.output == 'Done: ok_to_delete.py is gone, never_delete.py stays.'  # no second approval
    assert len(main.received) == 4
