"""An `openai-chat:` model on a local OpenAI-compatible server, with what such servers need to accept.

llama-cpp-python's server (0.3.x) refuses an assistant message whose `content` is `null` ("Input should be
a valid string"), which is how the OpenAI API and pydantic-ai write a turn that only calls tools: a history
with one such turn fails every request. The empty string means the same to every server, so the requests
this model sends carry `""` there. Used by the commands (`eval`, `demo`) when `OPENAI_BASE_URL` points at a
local server; an app builds its own model.
"""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any


def http_module() -> ModuleType:
    """The HTTP client package pydantic-ai's OpenAI provider takes: `httpx2` on 2.x, `httpx` on 1.x."""
    try:
        return importlib.import_module('httpx2')
    except ImportError:
        return importlib.import_module('httpx')


def text_for_tool_call_turns(body: bytes) -> bytes | None:
    """`body` (a chat completions request) with `content: ""` on every assistant message that has none;
    None when nothing changes (or the body is not JSON), so the request goes out as it was made."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    messages = data.get('messages') if isinstance(data, dict) else None
    if not isinstance(messages, list):
        return None
    changed = False
    for message in messages:
        if (
            isinstance(message, dict)
            and message.get('role') == 'assistant'
            and message.get('content') is None
        ):
            message['content'] = ''
            changed = True
    return json.dumps(data).encode() if changed else None


def textful_transport(inner: Any | None = None) -> Any:
    """An async HTTP transport that sends chat completions requests through `text_for_tool_call_turns`, the
    rest as they are, over `inner` (a new `AsyncHTTPTransport` by default)."""
    http = http_module()

    class TextfulToolCalls(http.AsyncBaseTransport):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def handle_async_request(self, request: Any) -> Any:
            if request.method == 'POST' and request.url.path.endswith('/chat/completions'):
                body = text_for_tool_call_turns(await request.aread())
                if body is not None:
                    headers = [(k, v) for k, v in request.headers.items() if k.lower() != 'content-length']
                    request = http.Request(
                        request.method,
                        request.url,
                        headers=headers,
                        content=body,
                        extensions=request.extensions,
                    )
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return TextfulToolCalls(inner if inner is not None else http.AsyncHTTPTransport())


def local_chat_model(model_name: str, base_url: str, *, transport: Any | None = None) -> Any:
    """`OpenAIChatModel(model_name)` on the server at `base_url`, its requests through `textful_transport`."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    http = http_module()
    # pydantic-ai's own client timeouts: a slow local model still answers within ten minutes
    timeout = http.Timeout(timeout=600, connect=5)
    client = http.AsyncClient(transport=textful_transport(transport), timeout=timeout)
    return OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=base_url, http_client=client))
