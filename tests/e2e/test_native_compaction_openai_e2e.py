"""Provider-native compaction through pydantic-ai's real `OpenAIResponsesModel`, over a local HTTP mock.

The adapter's own request building runs (the trim before the compaction item, the mapping of every part to
Responses input items, the `/responses/compact` call); the mock answers like the API and rejects what it
rejects: a `function_call_output` with no `function_call` before it, a `function_call` with no output, a
compaction item it did not issue, a request over the window. Needs the `openai` SDK (pydantic-ai's `openai`
extra), which the CI environments do not install: skipped there.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from pydantic_ai_history import (
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SummarizerSettings,
    assert_valid_history,
)
from pydantic_ai_history._compat import COMPACTION_REQUEST_PART, is_compaction_response

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

if COMPACTION_REQUEST_PART is None:
    pytest.skip('provider-native compaction is pydantic-ai 2.x only', allow_module_level=True)

openai = pytest.importorskip('openai', reason="needs the openai SDK (pydantic-ai-slim's 'openai' extra)")
try:  # the openai SDK moved from httpx to its fork httpx2 (same API, its own classes)
    import httpx2 as httpx  # pyright: ignore[reportMissingImports]
except ImportError:
    httpx = pytest.importorskip('httpx')

WINDOW, TRIGGER, TARGET = 16_000, 8_000, 4_000
TASK = 'Read every page of the quarterly report and list the anomalies.'


class Rejected(Exception):
    pass


class ResponsesAPI:
    """`/responses` and `/responses/compact`, strict the way the real API is about tool pairing and items."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.step = 0
        self.inputs: list[list[dict[str, Any]]] = []
        self.compact_inputs: list[list[dict[str, Any]]] = []
        self.rejections: list[str] = []
        self.items: dict[str, int] = {}
        self._ids = itertools.count()

    def handle(self, request: Any) -> Any:
        body = json.loads(request.content)
        try:
            if request.url.path.endswith('/responses/compact'):
                return httpx.Response(200, json=self.compact(body))
            return httpx.Response(200, json=self.respond(body))
        except Rejected as exc:
            self.rejections.append(str(exc))
            return httpx.Response(400, json={'error': {'message': str(exc), 'type': 'invalid_request_error'}})

    def check(self, items: list[dict[str, Any]]) -> int:
        """The input's size in tokens (4 characters each; a compaction item at the size it was issued)."""
        called: set[str] = set()
        answered: set[str] = set()
        size = 0
        for item in items:
            kind = item.get('type', 'message')
            if kind == 'compaction':
                if item.get('encrypted_content') not in self.items:
                    raise Rejected('Invalid encrypted_content in compaction item')
                size += self.items[item['encrypted_content']]
                continue
            if kind == 'function_call':
                called.add(item['call_id'])
            elif kind == 'function_call_output':
                if item['call_id'] not in called:
                    call_id = item['call_id']
                    raise Rejected(f'No tool call found for function call output with call_id {call_id}.')
                answered.add(item['call_id'])
            size += len(json.dumps(item)) // 4
        if missing := called - answered:
            raise Rejected(f'No tool output found for function call {sorted(missing)[0]}.')
        return size

    def compact(self, body: dict[str, Any]) -> dict[str, Any]:
        self.compact_inputs.append(body['input'])
        size = self.check(body['input'])
        key = f'gAAAAB{next(self._ids)}'
        self.items[key] = 200
        return {
            'id': f'resp_cmp_{key}',
            'object': 'response.compaction',
            'created_at': 0,
            'output': [{'type': 'compaction', 'id': f'cmp_{key}', 'encrypted_content': key}],
            'usage': _usage(size, 200),
        }

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        self.inputs.append(body['input'])
        size = self.check(body['input'])
        if size > WINDOW:
            raise Rejected(f'Your input exceeds the context window of this model ({size} > {WINDOW}).')
        self.step += 1
        if self.step > self.steps:
            output: dict[str, Any] = {
                'type': 'message',
                'id': f'msg_{self.step}',
                'role': 'assistant',
                'status': 'completed',
                'content': [{'type': 'output_text', 'text': 'All pages read.', 'annotations': []}],
            }
        else:
            output = {
                'type': 'function_call',
                'id': f'fc_{self.step}',
                'call_id': f'call_{self.step}',
                'name': 'fetch',
                'arguments': json.dumps({'n': self.step}),
                'status': 'completed',
            }
        return {
            'id': f'resp_{self.step}',
            'object': 'response',
            'created_at': 0,
            'model': body['model'],
            'output': [output],
            'status': 'completed',
            'parallel_tool_calls': True,
            'tool_choice': 'auto',
            'tools': [],
            'usage': _usage(size, 20),
        }


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        'input_tokens': input_tokens,
        'output_tokens': output_tokens,
        'total_tokens': input_tokens + output_tokens,
        'input_tokens_details': {'cached_tokens': 0},
        'output_tokens_details': {'reasoning_tokens': 0},
    }


def _page(n: int) -> str:
    rows = (f'row{n}.{i} revenue={i * 17 % 101} region=eu-{i % 7}' for i in range(170))
    return f'PAGE-{n:03d} ' + ' '.join(rows)


async def test_the_real_responses_adapter_compacts_and_every_request_is_accepted() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    api = ResponsesAPI(steps=24)
    client = openai.AsyncOpenAI(
        api_key='test',
        base_url='http://responses.test/v1',
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(api.handle)),
        max_retries=0,
    )
    model = OpenAIResponsesModel('gpt-5.2', provider=OpenAIProvider(openai_client=client))

    def never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError('the LLM summarizer must not be called')
        return ModelResponse(parts=[TextPart('')])

    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        artifacts=False,
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=FunctionModel(never)),
        compaction=CompactionSettings(method='provider', summary_max_tokens=400, stub_tool_results=False),
        on_history_event=events.append,
    )
    agent = Agent(model, capabilities=[processor], system_prompt='You are a careful analyst.')

    @agent.tool_plain
    def fetch(n: int) -> str:
        """Fetch page n of the report."""
        return _page(n)

    result = await agent.run(TASK)

    assert result.output == 'All pages read.'
    assert api.rejections == []
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    warnings = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert len(compactions) >= 2, warnings
    assert {c.method for c in compactions} == {'provider'}
    assert 'compaction_over_target' not in warnings
    assert len(api.compact_inputs) == len(compactions)
    # a re-compaction sends the previous item back; every later request opens with one item, then the task
    assert sum(i.get('type') == 'compaction' for i in api.compact_inputs[-1]) == 1
    after = [items for items in api.inputs if any(i.get('type') == 'compaction' for i in items)]
    assert after
    for items in after:
        assert sum(i.get('type') == 'compaction' for i in items) == 1
        first = next(k for k, i in enumerate(items) if i.get('type') == 'compaction')
        assert any(TASK in json.dumps(i) for i in items[first + 1 :])
    history = result.all_messages()
    assert sum(is_compaction_response(m) for m in history) == 1
    assert_valid_history(history, finished=True)
