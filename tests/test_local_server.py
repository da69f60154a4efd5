"""Local servers are asked for the window they run a model with: a tiny HTTP server on the loopback answers as
LM Studio, Ollama, llama.cpp or vLLM does, and nothing is asked of any other host."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.budget import _local_server as local
from pydantic_ai_history.context._llm import (
    AUTO_TIMEOUT_BASE_SECONDS,
    DEFAULT_CHARS_PER_SECOND,
    run_text,
    summarizer_timeout,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings('ignore::DeprecationWarning')]

MODEL = 'qwen2.5-7b-instruct'
PAGE = 'the quick brown fox jumps over the lazy dog while the cat sleeps ' * 60  # ~780 tokens

# What each server answers (abridged from their documented responses), for a model served with `window`.
ANSWERS: dict[str, Any] = {
    'lmstudio': lambda window: {
        ('GET', '/v1/models'): {'object': 'list', 'data': [{'id': MODEL, 'object': 'model'}]},
        ('GET', f'/api/v0/models/{MODEL}'): {
            'id': MODEL,
            'object': 'model',
            'state': 'loaded',
            'max_context_length': 131_072,
            'loaded_context_length': window,
        },
    },
    'ollama': lambda window: {
        ('GET', '/v1/models'): {'object': 'list', 'data': [{'id': f'{MODEL}:latest', 'object': 'model'}]},
        ('GET', '/api/ps'): {
            'models': [{'name': f'{MODEL}:latest', 'model': f'{MODEL}:latest', 'context_length': window}]
        },
        ('POST', '/api/show'): {
            'parameters': 'temperature 0.7',
            'model_info': {'qwen2.context_length': 32_768},
        },
    },
    'ollama-not-loaded': lambda window: {
        ('GET', '/api/ps'): {'models': []},
        ('POST', '/api/show'): {'parameters': f'stop "<|im_end|>"\nnum_ctx {window}', 'model_info': {}},
    },
    'llamacpp': lambda window: {
        ('GET', '/v1/models'): {'object': 'list', 'data': [{'id': MODEL, 'meta': {'n_ctx_train': 32_768}}]},
        ('GET', '/props'): {'default_generation_settings': {'n_ctx': window}, 'total_slots': 1},
    },
    'vllm': lambda window: {
        ('GET', '/v1/models'): {
            'object': 'list',
            'data': [{'id': MODEL, 'root': MODEL, 'max_model_len': window}],
        },
    },
    'silent': lambda window: {},
    # llama-cpp-python 0.3.x (`python -m llama_cpp.server`): its whole `/v1/models` answer; no other endpoint
    # above exists there (404), and none says the window
    'llama-cpp-python': lambda window: {
        ('GET', '/v1/models'): {
            'object': 'list',
            'data': [
                {
                    'id': 'models/qwen2.5-7b-instruct-q4_k_m.gguf',
                    'object': 'model',
                    'owned_by': 'me',
                    'permissions': [],
                }
            ],
        },
    },
}


@dataclass
class FakeServer:
    kind: str
    window: int
    port: int = 0
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f'http://127.0.0.1:{self.port}/v1'


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(kind: str, window: int = 4_096, port: int = 0) -> FakeServer:
        fake = FakeServer(kind, window)
        routes = ANSWERS[kind](window)

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                fake.requests.append((method, self.path, self.headers.get('Authorization')))
                if method == 'POST':
                    self.rfile.read(int(self.headers.get('Content-Length') or 0))
                body = routes.get((method, self.path))
                payload = json.dumps(body if body is not None else {'error': 'not found'}).encode()
                self.send_response(200 if body is not None else 404)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._answer('GET')

            def do_POST(self) -> None:
                self._answer('POST')

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(('127.0.0.1', port), Handler)
        fake.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return fake

    local._ANSWERS.clear()
    yield start
    local._ANSWERS.clear()
    for server in servers:
        server.shutdown()
        server.server_close()


class LocalModel(FunctionModel):
    """A scripted model whose requests (as far as the processor can tell) go to `base_url`."""

    def __init__(self, respond: Any, *, base_url: str, name: str = MODEL) -> None:
        super().__init__(respond, model_name=name)
        self._base_url = base_url

    @property
    def base_url(self) -> str:
        return self._base_url


def _loop(calls: int) -> Any:
    issued = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if issued['n'] < calls:
            issued['n'] += 1
            return ModelResponse(
                parts=[ToolCallPart('fetch', {'i': issued['n']}, tool_call_id=f'c{issued["n"]}')]
            )
        return ModelResponse(parts=[TextPart('done')])

    return respond


def _agent(model: Any, processor: HistoryProcessor) -> Agent[None, str]:
    options: dict[str, Any] = (
        {'capabilities': [processor]} if HAS_CAPABILITIES else {'history_processors': [processor]}
    )
    agent: Agent[None, str] = Agent(model, **options)

    @agent.tool_plain
    def fetch(i: int) -> str:
        """Fetch a page."""
        return f'page {i}: {PAGE}'

    return agent


@pytest.mark.parametrize(
    ('kind', 'window'),
    [
        ('lmstudio', 8_192),
        ('ollama', 6_144),
        ('ollama-not-loaded', 12_288),
        ('llamacpp', 4_096),
        ('vllm', 16_384),
    ],
)
async def test_the_window_comes_from_the_server(serve: Any, kind: str, window: int) -> None:
    server = serve(kind, window)
    model = LocalModel(_loop(2), base_url=server.base_url)
    events: list[HistoryEvent] = []
    processor = create_history_processor(on_event=events.append)
    assert (await _agent(model, processor).run('go')).output == 'done'
    limits = processor.limits_for(model)
    assert (limits.model_window, limits.window_source) == (window, 'server')
    assert not [e for e in events if isinstance(e, HistoryWarning) and e.code == 'context_window_fallback']
    asked = len(server.requests)
    assert asked >= 1
    # asked once per process: another processor, another run, asks nothing
    await _agent(LocalModel(_loop(1), base_url=server.base_url), create_history_processor()).run('again')
    assert len(server.requests) == asked


async def test_the_server_window_keeps_a_long_run_inside_it(serve: Any) -> None:
    server = serve('llamacpp', 4_096)
    model = LocalModel(_loop(12), base_url=server.base_url)
    processor = create_history_processor(compaction=False)
    await _agent(model, processor).run('go')
    stats = processor.stats().overall
    # ~780 tokens a page: without the server's window, all 12 pages (~9,400 tokens) would be sent
    assert processor.limits_for(model).budget == 4_096 - 1_024
    assert stats.peak_tokens_out <= 4_096
    assert stats.window_applications > 0


async def test_a_model_fallback_to_a_local_model_asks_its_server_and_keeps_every_request_inside_it(
    serve: Any,
) -> None:
    """The run's `ModelFallback` may move an attempt to a local model after the step was processed: its server
    is asked for its window as the step's model's is, and every step is planned for the smaller one."""
    if not HAS_CAPABILITIES:
        pytest.skip('this pydantic-ai has no capabilities')
    try:
        from pydantic_ai.capabilities import ModelFallback
    except ImportError:
        pytest.skip('this pydantic-ai has no ModelFallback capability')
    server = serve('llamacpp', 4_096)
    local_model = LocalModel(_loop(0), base_url=server.base_url)
    primary = FunctionModel(_loop(12), model_name='primary', profile={'context_window': 128_000})
    processor = create_history_processor(compaction=False)
    agent = _agent(primary, processor)
    await agent.run('go', capabilities=[ModelFallback(local_model)])
    assert server.requests  # the fallback model's server was asked
    # ~780 tokens a page: planned for the primary's window alone, all 12 pages (~9,400 tokens) would be sent
    stats = processor.stats().overall
    assert stats.peak_tokens_out <= 4_096
    assert stats.window_applications > 0


async def test_a_silent_server_falls_back_with_the_warning_and_is_asked_once(serve: Any) -> None:
    server = serve('silent')
    model = LocalModel(_loop(1), base_url=server.base_url, name='my-local-model')
    events: list[HistoryEvent] = []
    processor = create_history_processor(on_event=events.append)
    await _agent(model, processor).run('go')
    await _agent(model, processor).run('go')
    assert processor.limits_for(model).window_source == 'fallback'
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['context_window_fallback']
    assert len({path for _, path, _ in server.requests}) == len(server.requests)  # no endpoint asked twice


async def test_llama_cpp_python_is_recognised_and_one_warning_says_what_to_set(
    serve: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = serve('llama-cpp-python')
    model = LocalModel(_loop(1), base_url=server.base_url, name='my-local-model')
    events: list[HistoryEvent] = []
    processor = create_history_processor(on_event=events.append)
    with caplog.at_level(logging.INFO, logger='pydantic_ai_history'):
        await _agent(model, processor).run('go')
    assert processor.limits_for(model).window_source == 'fallback'
    [warning] = [e for e in events if isinstance(e, HistoryWarning)]
    assert warning.code == 'context_window_fallback'
    assert warning.details['local_server'] == 'llama-cpp-python'
    assert "is llama-cpp-python's server, which does not report its context window" in warning.message
    assert 'ContextPolicy(context_window=...) to the n_ctx' in warning.message
    assert '--n_ctx N`; 2,048 when not given' in warning.message
    assert [r for r in caplog.records if r.getMessage() == f'context_window_fallback: {warning.message}']
    # recognised from its `/v1/models`: none of the endpoints it does not have is asked
    assert server.requests == [('GET', '/v1/models', None)]

    # it never will say: not asked again after the backoff, by this processor or a new one
    clock = local._now()
    monkeypatch.setattr(local, '_now', lambda: clock + local.PROBE_RETRY_MAX_SECONDS + 1)
    await _agent(model, processor).run('again')
    fresh: list[HistoryEvent] = []
    await _agent(model, create_history_processor(on_event=fresh.append)).run('new processor')
    assert server.requests == [('GET', '/v1/models', None)]
    assert len([e for e in events if isinstance(e, HistoryWarning)]) == 1
    [again] = [e for e in fresh if isinstance(e, HistoryWarning)]  # a new processor says it once too
    assert again.details['local_server'] == 'llama-cpp-python'


async def test_llama_cpp_python_behind_the_real_openai_model_warns_at_warning_level(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip('openai', reason="needs the openai SDK (pydantic-ai-slim's 'openai' extra)")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    server = serve('llama-cpp-python')
    model = OpenAIChatModel('my-local-model', provider=OpenAIProvider(base_url=server.base_url, api_key='x'))
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history'):
        await create_history_processor().process([_user('hello')], model=model)
    [record] = [r for r in caplog.records if 'context_window_fallback' in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert '--n_ctx' in record.getMessage()


@pytest.mark.parametrize(
    ('kind', 'recognised'),
    [('llama-cpp-python', True), ('llamacpp', False), ('vllm', False), ('lmstudio', False)],
)
def test_only_llama_cpp_python_s_models_answer_is_taken_for_it(kind: str, recognised: bool) -> None:
    answer = ANSWERS[kind](4_096)[('GET', '/v1/models')]
    assert local._is_llama_cpp_python(answer) is recognised
    # llama.cpp's own server says `owned_by: "llamacpp"` (and answers /props)
    llama_server = {'object': 'list', 'data': [{'id': MODEL, 'object': 'model', 'owned_by': 'llamacpp'}]}
    assert not local._is_llama_cpp_python(llama_server)
    assert not local._is_llama_cpp_python({'object': 'list', 'data': []})


async def test_a_server_that_is_down_costs_one_bounded_attempt(serve: Any) -> None:
    model = LocalModel(_loop(0), base_url='http://127.0.0.1:9/v1')  # nothing listens on port 9
    processor = create_history_processor()
    with anyio.fail_after(local.PROBE_TIMEOUT_SECONDS + 5):
        await _agent(model, processor).run('go')
    assert processor.limits_for(model).window_source == 'fallback'


@dataclass
class DripServer:
    """An asyncio server on the loopback that answers one byte a second (its head, or its body after a whole
    head) for a minute, and notes when the client hangs up."""

    part: str
    port: int = 0
    dripped: int = 0
    hung_up: list[float] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f'http://127.0.0.1:{self.port}/v1'

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b'\r\n\r\n')
            if self.part == 'body':
                writer.write(
                    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n'
                )
            answer = (
                b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n' if self.part == 'head' else b' ' * 60
            )
            for byte in answer[:60]:
                writer.write(bytes([byte]))
                await writer.drain()
                self.dripped += 1
                try:
                    if await asyncio.wait_for(reader.read(1), 1.0) == b'':
                        self.hung_up.append(asyncio.get_running_loop().time())
                        return
                except asyncio.TimeoutError:
                    pass
        except (OSError, asyncio.IncompleteReadError):
            self.hung_up.append(asyncio.get_running_loop().time())
        finally:
            writer.close()


@pytest.fixture
async def drip() -> Any:
    servers: list[asyncio.Server] = []

    async def start(part: str) -> DripServer:
        fake = DripServer(part)
        server = await asyncio.start_server(fake.handle, '127.0.0.1', 0)
        fake.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return fake

    local._ANSWERS.clear()
    yield start
    local._ANSWERS.clear()
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.mark.slow  # waits for real seconds while the server drips
@pytest.mark.parametrize('part', ['head', 'body'])
async def test_a_server_that_drips_its_answer_is_cut_off_at_the_deadline(
    drip: Any, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One deadline covers connecting, the head and the body: a server that drips one byte a second held the
    first request for as long as it kept dripping (120 s in the issue; a minute here)."""
    monkeypatch.setattr(local, 'PROBE_TIMEOUT_SECONDS', 1.0)
    server = await drip(part)
    model = LocalModel(_loop(0), base_url=server.base_url)
    processor = create_history_processor()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with anyio.fail_after(20):  # generous: the server drips for 60 s
        assert (await _agent(model, processor).run('go')).output == 'done'
    assert processor.limits_for(model).window_source == 'fallback'
    # the probe hung up on the server while it was still dripping: the first endpoint took the whole deadline
    assert server.hung_up
    assert server.hung_up[0] - started < 10
    assert 0 < server.dripped < 10


async def test_an_outer_wait_for_ends_the_question_at_once(drip: Any) -> None:
    server = await drip('head')
    loop = asyncio.get_running_loop()
    started = loop.time()
    with anyio.fail_after(20):
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                local.ask_context_window(local.LocalServer(server.base_url, MODEL), timeout=60), 0.5
            )
        while not server.hung_up:  # the connection closes with the cancelled question, not at its deadline
            await asyncio.sleep(0.05)
    assert server.hung_up[0] - started < 10
    assert server.dripped < 10
    assert MODEL not in str(local._ANSWERS)  # a cancelled question leaves no answer: the next one asks


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return int(probe.getsockname()[1])


async def test_a_server_down_at_first_is_asked_again_after_the_backoff(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()  # nothing listens there yet
    model = LocalModel(_loop(0), base_url=f'http://127.0.0.1:{port}/v1')
    events: list[HistoryEvent] = []
    processor = create_history_processor(on_event=events.append)
    await _agent(model, processor).run('go')
    assert processor.limits_for(model).window_source == 'fallback'

    server = serve('vllm', 8_192, port=port)
    # within the backoff nobody asks: neither this processor nor a new one
    await _agent(model, processor).run('again')
    await _agent(model, create_history_processor()).run('again')
    assert server.requests == []
    assert processor.limits_for(model).window_source == 'fallback'

    clock = local._now()
    monkeypatch.setattr(local, '_now', lambda: clock + local.PROBE_RETRY_SECONDS + 1)
    await _agent(model, processor).run('after the backoff')
    assert server.requests == [('GET', '/v1/models', None)]
    limits = processor.limits_for(model)
    assert (limits.model_window, limits.window_source) == (8_192, 'server')
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes == ['context_window_fallback', 'context_window_learned']
    learnt = next(e for e in events if isinstance(e, HistoryWarning) and e.code == 'context_window_learned')
    assert learnt.details['context_window'] == 8_192
    assert '8,192' in learnt.message

    # a new processor takes the process's answer without asking again
    fresh = create_history_processor()
    await _agent(model, fresh).run('new processor')
    assert fresh.limits_for(model).model_window == 8_192
    assert len(server.requests) == 1


def test_the_backoff_doubles_up_to_its_cap() -> None:
    answer = None
    backoffs = []
    for _ in range(8):
        answer = local._Answer.after(answer, None, 1_000.0)
        backoffs.append(answer.retry_in)
        assert answer.retry_at == 1_000.0 + answer.retry_in
        assert not answer.due(1_000.0 + answer.retry_in - 1)
        assert answer.due(1_000.0 + answer.retry_in)
    assert backoffs == [30.0, 60.0, 120.0, 240.0, 480.0, 600.0, 600.0, 600.0]
    known = local._Answer.after(answer, 8_192, 2_000.0)
    assert not known.due(10.0**9)  # a window once said is kept for the process


async def test_the_policy_window_wins_and_nothing_is_asked(serve: Any) -> None:
    server = serve('vllm', 16_384)
    model = LocalModel(_loop(0), base_url=server.base_url)
    processor = create_history_processor(policy=ContextPolicy(context_window=2_000))
    await _agent(model, processor).run('go')
    assert processor.limits_for(model).model_window == 2_000
    assert server.requests == []


async def test_no_request_leaves_for_a_host_that_is_not_local(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Any] = []

    async def recorder(url: str, *args: Any) -> Any:
        opened.append(url)
        raise OSError('not expected')

    monkeypatch.setattr(local, '_exchange', recorder)
    local._ANSWERS.clear()
    for url in ('https://api.openai.com/v1', 'http://8.8.8.8/v1', 'https://my-llm.example.com/v1'):
        model = LocalModel(_loop(0), base_url=url, name='gpt-4o-mini-custom')
        await _agent(model, create_history_processor()).run('go')
    assert opened == []


@pytest.mark.parametrize(
    ('url', 'local_'),
    [
        ('http://localhost:1234/v1', True),
        ('http://127.0.0.1:11434', True),
        ('http://[::1]:8080/v1', True),
        ('http://192.168.1.20:8000/v1', True),
        ('http://10.0.0.5/v1', True),
        ('http://ollama:11434/v1', True),  # a container's name
        ('http://gpu-box.local:1234/v1', True),
        ('https://api.openai.com/v1', False),
        ('http://8.8.8.8/v1', False),
        ('https://models.internal.example.com/v1', False),
        ('ftp://localhost/v1', False),
        ('not a url', False),
    ],
)
def test_what_counts_as_local(url: str, local_: bool) -> None:
    assert local.is_local_url(url) is local_


async def test_the_api_key_goes_to_that_server_only_with_the_real_openai_model(serve: Any) -> None:
    pytest.importorskip('openai', reason="needs the openai SDK (pydantic-ai-slim's 'openai' extra)")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    server = serve('vllm', 16_384)
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=server.base_url, api_key='secret-key'))
    processor = create_history_processor()
    await processor.process([_user('hello')], model=model)
    assert processor.limits_for(model).model_window == 16_384
    assert server.requests == [('GET', '/v1/models', 'Bearer secret-key')]


def _user(text: str) -> Any:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    return ModelRequest(parts=[UserPromptPart(text)])


# ---- the summarizer's timeout ---------------------------------------------------------------------------


def test_the_auto_timeout_is_unset_for_a_local_server_and_scales_elsewhere() -> None:
    local_model = LocalModel(_loop(0), base_url='http://localhost:8080/v1')
    remote = LocalModel(_loop(0), base_url='https://api.example.com/v1', name='remote-model')
    assert summarizer_timeout('auto', local_model, 400_000) is None  # no max_tokens: nothing to bound it by
    assert (
        summarizer_timeout('auto', remote, 400_000)
        == AUTO_TIMEOUT_BASE_SECONDS + 3 * 400_000 / DEFAULT_CHARS_PER_SECOND
    )
    assert summarizer_timeout('auto', remote, 40_000) < summarizer_timeout('auto', remote, 400_000)  # type: ignore[operator]
    assert summarizer_timeout(30, remote, 400_000) == 30
    assert summarizer_timeout(None, remote, 400_000) is None


async def test_a_timeout_names_the_setting() -> None:
    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await anyio.sleep(5)
        return ModelResponse(parts=[TextPart('late')])

    with pytest.raises(TimeoutError, match=r'timed out after 0\.2 s \(SummarizerSettings\.timeout=0\.2\)'):
        await run_text(FunctionModel(slow), 'summarize this', instructions='be brief', timeout=0.2)


async def test_a_compaction_that_times_out_warns_naming_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await anyio.sleep(5)
        return ModelResponse(parts=[TextPart('late')])

    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=6_000),
        summarizer=SummarizerSettings(model=FunctionModel(slow), timeout=0.2),
        on_event=events.append,
    )
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_history'):
        await _agent(FunctionModel(_loop(10)), processor).run('go')
    timeouts = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'summarizer_timeout']
    assert timeouts
    assert 'SummarizerSettings.timeout=0.2' in timeouts[0].message
    assert any(isinstance(e, CompactionResult) and e.method in ('digest', 'truncate') for e in events)
    assert any('summarizer_timeout' in r.getMessage() for r in caplog.records)


async def test_under_durable_execution_every_run_asks_on_its_first_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workflow code makes the same calls on every replay: the operation is called on each run's first step
    whatever the process remembers (the engine answers a replay from its journal), never on later steps."""
    from types import SimpleNamespace

    model = LocalModel(_loop(0), base_url='http://localhost:1234/v1')
    processor = create_history_processor()
    operations: list[int] = []
    probes: list[str] = []

    async def operation(ctx: Any, base_url: str, model_name: str) -> int:
        operations.append(ctx.run_step)
        return 8_192

    async def probe(ctx: Any, base_url: str, model_name: str, *, model: object = None) -> int:
        probes.append(base_url)
        return 8_192

    monkeypatch.setattr(processor, 'ask_server_window', operation)
    monkeypatch.setattr(processor, 'probe_server_window', probe)
    monkeypatch.setattr(processor, 'journaled', lambda ctx: True)
    for step in (1, 2, 3, 1, 2):  # two runs, the second one a replay of the first
        await processor._ask_local_servers(model, SimpleNamespace(run_step=step, model=model))
    assert operations == [1, 1]
    assert probes == []
    assert processor.limits_for(model).model_window == 8_192

    monkeypatch.setattr(processor, 'journaled', lambda ctx: False)
    other = LocalModel(_loop(0), base_url='http://localhost:8080/v1')
    for step in (1, 1):
        await processor._ask_local_servers(other, SimpleNamespace(run_step=step, model=other))
    assert probes == ['http://localhost:8080/v1']  # outside durable execution: once per process
