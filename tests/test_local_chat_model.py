"""The commands' `openai-chat:` model on a local server: turns that only call tools reach llama-cpp-python.

The server is a mock transport that answers as llama-cpp-python's 0.3.x server does: 422 for an assistant
message whose `content` is `null`, a chat completion (with usage) otherwise.
"""

from __future__ import annotations

import json
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
    UserPromptPart,
)

pytest.importorskip('openai', reason='the OpenAI provider is an extra (pydantic-ai-slim[openai])')

from pydantic_ai_history.cli.common import build_model
from pydantic_ai_history.cli.local_model import (
    http_module,
    local_chat_model,
    text_for_tool_call_turns,
)

pytestmark = pytest.mark.anyio

BASE_URL = 'http://127.0.0.1:8765/v1'


def _history() -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart('Which reservation is the user changing?')]),
        ModelResponse(parts=[ToolCallPart('get_reservation', {'user_id': 'mia_li_3668'}, tool_call_id='c1')]),
        ModelRequest(parts=[ToolReturnPart('get_reservation', 'reservation NO6JO3', tool_call_id='c1')]),
        ModelResponse(parts=[TextPart('The reservation is NO6JO3.')]),
    ]


class LlamaCppPythonServer:
    """What llama-cpp-python's server answers on `/v1/chat/completions`; every request body it saw."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        http = http_module()
        body = json.loads(request.content)
        self.bodies.append(body)
        if any(m.get('role') == 'assistant' and m.get('content') is None for m in body['messages']):
            detail = [
                {
                    'type': 'string_type',
                    'loc': ['body', 'messages', 'content'],
                    'msg': 'Input should be a valid string',
                }
            ]
            return http.Response(422, json={'detail': detail})
        return http.Response(
            200,
            json={
                'id': 'cmpl-1',
                'object': 'chat.completion',
                'created': 0,
                'model': body['model'],
                'choices': [
                    {
                        'index': 0,
                        'finish_reason': 'stop',
                        'message': {'role': 'assistant', 'content': 'NO6JO3'},
                    }
                ],
                'usage': {'prompt_tokens': 57, 'completion_tokens': 4, 'total_tokens': 61},
            },
        )


def test_the_body_gets_text_only_where_an_assistant_turn_has_none() -> None:
    body = {
        'model': 'm',
        'messages': [
            {'role': 'user', 'content': None},
            {'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'c1'}]},
            {'role': 'assistant', 'content': 'kept'},
        ],
    }
    changed = json.loads(text_for_tool_call_turns(json.dumps(body).encode()) or b'null')
    assert [m['content'] for m in changed['messages']] == [None, '', 'kept']
    assert changed['messages'][1]['tool_calls'] == [{'id': 'c1'}]
    assert (
        text_for_tool_call_turns(json.dumps({'messages': [{'role': 'assistant', 'content': 'x'}]}).encode())
        is None
    )
    assert text_for_tool_call_turns(b'\xff not json') is None
    assert text_for_tool_call_turns(b'[1, 2]') is None


async def test_a_history_with_a_tool_call_only_turn_is_answered() -> None:
    server = LlamaCppPythonServer()
    model = local_chat_model('qwen-coder-1.5b', BASE_URL, transport=http_module().MockTransport(server))
    result = await Agent(model).run('And its id again?', message_history=_history())
    assert result.output == 'NO6JO3'
    sent = server.bodies[-1]['messages']
    assert [m['content'] for m in sent if m['role'] == 'assistant'] == ['', 'The reservation is NO6JO3.']
    assert sent[1]['tool_calls'][0]['function']['name'] == 'get_reservation'


async def test_the_server_refuses_what_pydantic_ai_sends_without_it() -> None:
    """The mock is a real check: the same history through a plain client is refused."""
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    http = http_module()
    client = http.AsyncClient(transport=http.MockTransport(LlamaCppPythonServer()))
    model = OpenAIChatModel(
        'qwen-coder-1.5b', provider=OpenAIProvider(base_url=BASE_URL, api_key='x', http_client=client)
    )
    with pytest.raises(ModelHTTPError) as raised:
        await Agent(model).run('And its id again?', message_history=_history())
    assert raised.value.status_code == 422


def test_the_commands_build_it_for_a_local_base_url_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel

    monkeypatch.setenv('OPENAI_API_KEY', 'local')
    monkeypatch.setenv('OPENAI_BASE_URL', BASE_URL)
    local = build_model('openai-chat:qwen-coder-1.5b')
    assert isinstance(local, OpenAIChatModel)
    assert local.model_name == 'qwen-coder-1.5b'
    assert local.base_url.rstrip('/') == BASE_URL
    monkeypatch.setenv('OPENAI_BASE_URL', 'https://api.openai.com/v1')
    remote = build_model('openai-chat:gpt-4o-mini')
    assert isinstance(remote, OpenAIChatModel)
    assert type(local) is type(remote)
