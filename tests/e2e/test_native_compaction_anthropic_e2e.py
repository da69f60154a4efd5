"""Provider-native compaction through pydantic-ai's real `AnthropicModel` (on-demand compaction), over a mock.

The adapter's own request building runs (the trim before the compaction block, the standing system prompt put
back, the merge of consecutive user turns, the `compaction` parameter); the mock answers like the Messages API
and rejects what it rejects: a `tool_use` without its `tool_result` right after, a `tool_result` with no
`tool_use` before it, a compaction block whose signature it did not issue, a request over the window. Needs
the `anthropic` SDK (pydantic-ai's `anthropic` extra), which the CI environments do not install: skipped.
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

anthropic = pytest.importorskip('anthropic', reason="needs the anthropic SDK (pydantic-ai-slim's extra)")
try:  # the anthropic SDK moved from httpx to its fork httpx2 (same API, its own classes)
    import httpx2 as httpx  # pyright: ignore[reportMissingImports]
except ImportError:
    httpx = pytest.importorskip('httpx')

WINDOW, TRIGGER, TARGET = 16_000, 8_000, 4_000
SYSTEM = 'You are a careful analyst.'
TASK = 'Read every page of the quarterly report and list the anomalies.'


class Rejected(Exception):
    pass


class MessagesAPI:
    """`/v1/messages`, with on-demand compaction, strict the way the real API is about tool blocks."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.step = 0
        self.requests: list[dict[str, Any]] = []
        self.compactions: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self.signatures: set[str] = set()
        self._ids = itertools.count()

    def handle(self, request: Any) -> Any:
        body = json.loads(request.content)
        try:
            if body.get('compaction'):
                return httpx.Response(200, json=self.compact(body))
            return httpx.Response(200, json=self.respond(body))
        except Rejected as exc:
            self.rejections.append(str(exc))
            error = {'type': 'invalid_request_error', 'message': str(exc)}
            return httpx.Response(400, json={'type': 'error', 'error': error})

    def check(self, body: dict[str, Any]) -> int:
        """The request's size in tokens (about 4 characters each)."""
        messages = body['messages']
        if messages[0]['role'] != 'user' and not _opens_with_compaction(messages[0]):
            raise Rejected('messages: the first message must use the "user" role')
        for index, message in enumerate(messages):
            blocks = message['content'] if isinstance(message['content'], list) else []
            if message['role'] == 'assistant':
                for block in blocks:
                    if block['type'] == 'compaction' and block.get('signature') not in self.signatures:
                        raise Rejected('Invalid signature in compaction block')
                uses = {b['id'] for b in blocks if b['type'] == 'tool_use'}
                following = messages[index + 1]['content'] if index + 1 < len(messages) else []
                results = {
                    b['tool_use_id'] for b in following if isinstance(b, dict) and b['type'] == 'tool_result'
                }
                if uses - results:
                    raise Rejected(
                        'tool_use ids were found without tool_result blocks immediately after: '
                        + ', '.join(sorted(uses - results))
                    )
            else:
                previous = messages[index - 1]['content'] if index > 0 else []
                uses = {b['id'] for b in previous if isinstance(b, dict) and b['type'] == 'tool_use'}
                for block in blocks:
                    if block['type'] == 'tool_result' and block['tool_use_id'] not in uses:
                        use_id = block['tool_use_id']
                        raise Rejected(f'unexpected tool_use_id found in tool_result blocks: {use_id}')
        return len(json.dumps(body)) // 4

    def compact(self, body: dict[str, Any]) -> dict[str, Any]:
        self.compactions.append(body)
        size = self.check(body)
        signature = f'sig-{next(self._ids)}'
        self.signatures.add(signature)
        summary = 'The analyst fetched pages of the report; no anomaly was confirmed yet.'
        block = {'type': 'compaction', 'content': summary, 'signature': signature}
        return _message(body, [block], size, 200, 'end_turn')

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        size = self.check(body)
        if size > WINDOW:
            raise Rejected(f'prompt is too long: {size} tokens > {WINDOW} maximum')
        self.step += 1
        if self.step > self.steps:
            return _message(body, [{'type': 'text', 'text': 'All pages read.'}], size, 10, 'end_turn')
        use = {'type': 'tool_use', 'id': f'toolu_{self.step}', 'name': 'fetch', 'input': {'n': self.step}}
        return _message(body, [use], size, 20, 'tool_use')


def _opens_with_compaction(message: dict[str, Any]) -> bool:
    content = message['content']
    return isinstance(content, list) and bool(content) and content[0]['type'] == 'compaction'


def _message(body: dict[str, Any], content: list[Any], size: int, output: int, stop: str) -> dict[str, Any]:
    return {
        'id': 'msg_1',
        'type': 'message',
        'role': 'assistant',
        'model': body['model'],
        'content': content,
        'stop_reason': stop,
        'stop_sequence': None,
        'usage': {'input_tokens': size, 'output_tokens': output},
    }


def _page(n: int) -> str:
    rows = (f'row{n}.{i} revenue={i * 17 % 101} region=eu-{i % 7}' for i in range(170))
    return f'PAGE-{n:03d} ' + ' '.join(rows)


async def test_the_real_anthropic_adapter_compacts_and_every_request_is_accepted() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    api = MessagesAPI(steps=24)
    client = anthropic.AsyncAnthropic(
        api_key='test',
        base_url='http://messages.test',
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(api.handle)),
        max_retries=0,
    )
    model = AnthropicModel('claude-mythos-5', provider=AnthropicProvider(anthropic_client=client))
    assert model.profile.get('anthropic_supports_on_demand_compaction')

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
    # a modest max_tokens keeps the SDK from streaming the requests (the mock answers in JSON)
    agent = Agent(model, capabilities=[processor], system_prompt=SYSTEM, model_settings={'max_tokens': 4_000})

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
    assert len(api.compactions) == len(compactions)
    after = [body for body in api.requests if any(_opens_with_compaction(m) for m in body['messages'])]
    assert after
    for body in after:
        text = json.dumps(body)
        assert text.count('"type": "compaction"') == 1
        assert SYSTEM in json.dumps(body.get('system'))  # the standing prompt is put back by the adapter
        first = next(k for k, m in enumerate(body['messages']) if _opens_with_compaction(m))
        assert TASK in json.dumps(body['messages'][first + 1 :])
    history = result.all_messages()
    assert sum(is_compaction_response(m) for m in history) == 1
    assert_valid_history(history, finished=True)
