"""The context window a local server (LM Studio, Ollama, llama.cpp, vLLM) runs a model with, asked of it.

Such servers serve a window (a load setting, often 4K to 32K) far below the model's trained maximum, and a
history planned against the maximum is cut by the server. When nothing else knows the window, the processor
asks once per server and model in a process. What leaves the process is bounded: only the model's own base
URL, with the key its client already sends there, no proxy and no redirect; only for a host on this machine
or the local network (names are never resolved); every question under one deadline, `PROBE_TIMEOUT_SECONDS`
(connecting, headers and body together), on the event loop's own sockets, cancelled with its caller. A server
that did not say its window is asked again on a later request after a backoff (`PROBE_RETRY_SECONDS`, doubling
up to `PROBE_RETRY_MAX_SECONDS`), so a server started after the first request is still heard. Each
server is asked its documented way (vLLM `/models`, LM Studio `/api/v0/models`, llama.cpp `/props`, Ollama
`/api/ps` then `/api/show`, else Ollama's smallest documented default). llama-cpp-python's server has no
endpoint that says its window (its `/models` lists `owned_by: "me"` and no length; the rest answer 404): it is
recognised from its `/models`, not asked again, and the unknown-window warning says what to set
(`silent_server_advice`).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import anyio.abc

logger = logging.getLogger('pydantic_ai_history.local_server')

PROBE_TIMEOUT_SECONDS = 3.0
"""The most the question may take, every endpoint together, from connecting to the last byte of the last body
(a server that drips its answer is cut off too); a server that does not answer in time is taken for one that
cannot, and the unknown-window fallback applies until it is asked again."""

PROBE_RETRY_SECONDS = 30.0
"""How long after a server did not say its window it may be asked again (on the next request after that);
each further silence doubles it."""

PROBE_RETRY_MAX_SECONDS = 600.0
"""The longest backoff between two questions to a server that does not say its window."""

OLLAMA_DEFAULT_CONTEXT = 4_096
"""Ollama's default context on machines with under 24 GiB of VRAM (docs.ollama.com, "Context length"): what a
model without a `num_ctx` of its own gets when it is not loaded yet to say otherwise."""

LLAMA_CPP_PYTHON = 'llama-cpp-python'
"""The kind of server (llama-cpp-python's `python -m llama_cpp.server`, 0.3.x) that never says its window."""

LLAMA_CPP_PYTHON_DEFAULT_CONTEXT = 2_048
"""llama-cpp-python's server's `--n_ctx` default (`llama_cpp/server/settings.py`): named in the advice only,
never assumed (a server is usually started with a larger one)."""

_LOCAL_SUFFIXES = ('.local', '.lan', '.internal', '.home.arpa', '.localhost')

_ANSWERS: dict[str, _Answer] = {}
"""What each server said, by `LocalServer.key`, for the life of the process, and when one that did not say may
be asked again."""


@dataclass(frozen=True)
class LocalServer:
    """A model served by a local OpenAI-compatible server: where it is, and the model's name there."""

    base_url: str
    """The model's own base URL, as its client sends requests to it (`http://localhost:1234/v1`)."""
    model_name: str
    """The model's name on that server (`qwen2.5-7b-instruct`, `llama3.1:8b`)."""

    @property
    def key(self) -> str:
        return f'{self.base_url.rstrip("/")}#{self.model_name}'

    @property
    def root(self) -> str:
        """The server's root: the base URL without its OpenAI-compatible `/v1`."""
        return self.base_url.rstrip('/').removesuffix('/v1')


def is_local_url(url: str) -> bool:
    """Whether `url` points at this machine or the local network (see the module docstring); no DNS."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    if parts.scheme not in ('http', 'https') or not host:
        return False
    host = host.lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == 'localhost' or '.' not in host or host.endswith(_LOCAL_SUFFIXES)
    return address.is_loopback or address.is_private or address.is_link_local


def local_server_of(model: object) -> LocalServer | None:
    """The local server that serves `model`, from its public `base_url`; None for a model served elsewhere, a
    model name, or a model without a URL (test models, wrappers over several models)."""
    if model is None or isinstance(model, str):
        return None
    try:
        base_url = getattr(model, 'base_url', None)
        name = getattr(model, 'model_name', None)
    except Exception:  # a wrapper that cannot say (FallbackModel's base URL is its first model's)
        return None
    if not isinstance(base_url, str) or not isinstance(name, str) or not is_local_url(base_url):
        return None
    return LocalServer(base_url, name)


async def ask_context_window(
    server: LocalServer, *, api_key: str | None = None, timeout: float | None = None
) -> int | None:
    """The context window `server` runs its model with, or None when it does not say (never raises). Every
    question to the server (connecting, the headers, the body, each endpoint) runs under one deadline,
    `timeout` (else `PROBE_TIMEOUT_SECONDS`), on the event loop's own sockets: it never blocks the loop, and a
    caller's cancellation (an outer `asyncio.wait_for`) ends it at once. A window is asked once per process;
    a server that did not say is asked again only on a request after its backoff (see `probe_due`)."""
    previous = _ANSWERS.get(server.key)
    if previous is not None and not previous.due(_now()):
        return previous.window
    window: int | None = None
    kind: str | None = None
    try:
        with anyio.fail_after(PROBE_TIMEOUT_SECONDS if timeout is None else timeout):
            window, kind = await _ask(_Client(api_key), server)
    except (OSError, TimeoutError) as exc:  # nothing listening, a reset, or no whole answer in time
        logger.info('%s did not say its context window (%s)', server.base_url, str(exc) or type(exc).__name__)
    except Exception:  # never let the question stop a run
        logger.info('asking %s for its context window failed', server.base_url, exc_info=True)
    answer = _Answer.after(previous, window, _now(), kind=kind)
    _ANSWERS[server.key] = answer
    if kind is not None:
        logger.info('%s is %s, which does not say its context window: not asked again', server.base_url, kind)
    elif window is None:
        logger.info('%s will be asked again in %.0f s at the earliest', server.base_url, answer.retry_in)
    return window


def silent_server_advice(server: LocalServer) -> tuple[str, str] | None:
    """For a server this process found to be of a kind that never says its window: its kind and what to set
    instead; None for any other server (one that said its window, or may yet)."""
    answer = _ANSWERS.get(server.key)
    if answer is None or answer.kind != LLAMA_CPP_PYTHON:
        return None
    return LLAMA_CPP_PYTHON, (
        f"{server.root} is llama-cpp-python's server, which does not report its context window: set "
        'ContextPolicy(context_window=...) to the n_ctx it was started with (`python -m llama_cpp.server '
        f'--n_ctx N`; {LLAMA_CPP_PYTHON_DEFAULT_CONTEXT:,} when not given).'
    )


def probe_due(server: LocalServer) -> bool:
    """Whether asking `server` now may learn something: it was never asked in this process, or it did not say
    its window and its backoff has passed."""
    answer = _ANSWERS.get(server.key)
    return answer is None or answer.due(_now())


def _now() -> float:
    """The clock of the backoff (a test moves it on)."""
    return time.monotonic()


@dataclass(frozen=True)
class _Answer:
    """What a server said, and when it may be asked again."""

    window: int | None
    """Its window; None when it did not say."""
    failures: int = 0
    """How many times in a row it did not say."""
    retry_at: float = math.inf
    """When (`_now()`) it may be asked again: never once it said its window."""
    retry_in: float = math.inf
    """The backoff that `retry_at` ends."""
    kind: str | None = None
    """The server's kind when it is one that never says its window (`LLAMA_CPP_PYTHON`)."""

    def due(self, now: float) -> bool:
        return self.window is None and now >= self.retry_at

    @classmethod
    def after(
        cls, previous: _Answer | None, window: int | None, now: float, *, kind: str | None = None
    ) -> _Answer:
        """The answer after one more question: a window is kept for good, and so is a server of a `kind` that
        never says it (never asked again); a silence doubles the backoff."""
        if window is not None or kind is not None:
            return cls(window, kind=kind)
        failures = (previous.failures if previous is not None else 0) + 1
        backoff = min(PROBE_RETRY_SECONDS * 2 ** min(failures - 1, 32), PROBE_RETRY_MAX_SECONDS)
        return cls(None, failures, now + backoff, backoff)


async def _ask(client: _Client, server: LocalServer) -> tuple[int | None, str | None]:
    """The window the server says (None when it does not), and its kind when it is one that never says it.
    Its `/models` answer comes first: vLLM's names the window, llama-cpp-python's names the server."""
    models = await client.json(f'{server.base_url.rstrip("/")}/models')
    if _is_llama_cpp_python(models):
        return None, LLAMA_CPP_PYTHON
    window = _vllm_window(models, server)
    for probe in _PROBES:
        if window is not None:
            break
        window = await probe(client, server)
    return window, None


_MAX_ANSWER_BYTES = 4 * 1024 * 1024
_MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class _Client:
    api_key: str | None
    """The key the model's own client sends to that server (sent as a bearer token), if any."""

    async def json(self, url: str, *, body: Mapping[str, Any] | None = None) -> Any:
        """The JSON answer to a GET (or a POST of `body`), or None for a status other than 2xx (a redirect is
        not followed), an answer over `_MAX_ANSWER_BYTES` or one that is not JSON. A connection error raises:
        nothing else on that server would answer. The caller's deadline bounds it."""
        headers = {'Accept': 'application/json', 'Connection': 'close', 'User-Agent': 'pydantic-ai-history'}
        if self.api_key:
            headers['Authorization'] = f'Bearer {self.api_key}'
        data = b''
        if body is not None:
            data = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
        answer = await _exchange(url, 'POST' if body is not None else 'GET', headers, data)
        if answer is None:
            return None
        try:
            return json.loads(answer)
        except ValueError:
            return None


async def _exchange(url: str, method: str, headers: dict[str, str], data: bytes) -> bytes | None:
    """One HTTP/1.1 exchange on a connection of its own, no proxy: the body of a 2xx answer, else None."""
    parts = urlsplit(url)
    if parts.hostname is None:
        return None
    tls = parts.scheme == 'https'
    target = (parts.path or '/') + (f'?{parts.query}' if parts.query else '')
    headers = {'Host': parts.netloc.rpartition('@')[2], **headers, 'Content-Length': str(len(data))}
    if not data:
        del headers['Content-Length']
    head = ''.join(f'{name}: {value}\r\n' for name, value in headers.items())
    request = f'{method} {target} HTTP/1.1\r\n{head}\r\n'.encode('latin-1') + data
    stream: anyio.abc.ByteStream
    if tls:
        import ssl

        context = ssl.create_default_context()
        stream = await anyio.connect_tcp(
            parts.hostname, parts.port or 443, ssl_context=context, tls_standard_compatible=False
        )
    else:
        stream = await anyio.connect_tcp(parts.hostname, parts.port or 80)
    async with stream:
        try:
            await stream.send(request)
            raw = await _receive(stream)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionError(f'the connection broke: {exc!r}') from exc
    return _body(raw)


async def _receive(stream: anyio.abc.ByteStream) -> bytes:
    """The answer's bytes: until the server closes the connection, its `Content-Length` is in, or one byte
    past the most an answer may be."""
    raw = bytearray()
    limit = _MAX_HEAD_BYTES + _MAX_ANSWER_BYTES + 1
    while len(raw) < limit:
        try:
            raw += await stream.receive(65_536)
        except anyio.EndOfStream:
            break
        length = _content_length(raw)
        if length is not None and len(raw) >= length:
            break
    return bytes(raw)


def _content_length(raw: bytes | bytearray) -> int | None:
    """The whole answer's length in bytes when its head is in and names a `Content-Length`."""
    end = raw.find(b'\r\n\r\n', 0, _MAX_HEAD_BYTES)
    if end < 0:
        return None
    for line in bytes(raw[:end]).split(b'\r\n')[1:]:
        name, _, value = line.partition(b':')
        if name.strip().lower() == b'content-length' and value.strip().isdigit():
            return end + 4 + int(value.strip())
    return None


def _body(raw: bytes) -> bytes | None:
    """The body of a whole 2xx answer (chunked or not); None for another status or a malformed answer."""
    end = raw.find(b'\r\n\r\n', 0, _MAX_HEAD_BYTES)
    if end < 0:
        raise ConnectionError('the server closed the connection before a whole answer')
    lines = raw[:end].decode('latin-1').split('\r\n')
    status = lines[0].split(' ', 2)
    if len(status) < 2 or not status[0].startswith('HTTP/') or not status[1].isdigit():
        return None
    if not 200 <= int(status[1]) < 300:  # 404 on another kind of server, 401, a redirect
        return None
    fields = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(':') for line in lines[1:])
    }
    body: bytes | None = raw[end + 4 :]
    if 'chunked' in fields.get('transfer-encoding', '').lower():
        body = _dechunk(raw[end + 4 :])
    elif fields.get('content-length', '').isdigit():
        body = raw[end + 4 : end + 4 + int(fields['content-length'])]
    return body if body is not None and len(body) <= _MAX_ANSWER_BYTES else None


def _dechunk(data: bytes) -> bytes | None:
    """A chunked body's bytes; None when it is malformed or cut short."""
    out = bytearray()
    position = 0
    while len(out) <= _MAX_ANSWER_BYTES:
        line_end = data.find(b'\r\n', position)
        size_text = data[position:line_end].split(b';', 1)[0].strip() if line_end >= 0 else b''
        try:
            size = int(size_text, 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(out)
        start = line_end + 2
        if start + size > len(data):
            return None
        out += data[start : start + size]
        position = start + size + 2
    return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _same_model(entry: Mapping[str, Any], name: str, *keys: str) -> bool:
    names = {entry.get(key) for key in keys}
    # Ollama names a model without a tag `name:latest`
    return name in names or (':' not in name and f'{name}:latest' in names)


def _model_entries(data: object) -> list[Mapping[str, Any]]:
    """The model entries of an OpenAI-style `/models` answer."""
    entries = data.get('data') if isinstance(data, Mapping) else None
    return [entry for entry in entries if isinstance(entry, Mapping)] if isinstance(entries, list) else []


def _vllm_window(data: object, server: LocalServer) -> int | None:
    for entry in _model_entries(data):
        if _same_model(entry, server.model_name, 'id', 'root'):
            return _positive(entry.get('max_model_len'))
    return None


def _is_llama_cpp_python(data: object) -> bool:
    """llama-cpp-python's `/v1/models` (`llama_cpp/server/app.py`, 0.2.x to 0.3.x): every entry `owned_by:
    "me"` with `permissions` (llama.cpp's own server says `owned_by: "llamacpp"`, and answers `/props`)."""
    entries = _model_entries(data)
    return bool(entries) and all(e.get('owned_by') == 'me' and 'permissions' in e for e in entries)


async def _lm_studio(client: _Client, server: LocalServer) -> int | None:
    data = await client.json(f'{server.root}/api/v0/models/{quote(server.model_name, safe="")}')
    if not isinstance(data, Mapping) or data.get('id') not in (server.model_name, None):
        return None
    return _positive(data.get('loaded_context_length')) or _positive(data.get('max_context_length'))


async def _llama_cpp(client: _Client, server: LocalServer) -> int | None:
    data = await client.json(f'{server.root}/props')
    if not isinstance(data, Mapping):
        return None
    settings = data.get('default_generation_settings')
    n_ctx = settings.get('n_ctx') if isinstance(settings, Mapping) else None
    return _positive(n_ctx) or _positive(data.get('n_ctx'))


_NUM_CTX = re.compile(r'^\s*num_ctx\s+(\d+)\s*$', re.M)


async def _ollama(client: _Client, server: LocalServer) -> int | None:
    running = await client.json(f'{server.root}/api/ps')
    models = running.get('models') if isinstance(running, Mapping) else None
    for entry in models if isinstance(models, list) else []:
        if isinstance(entry, Mapping) and _same_model(entry, server.model_name, 'name', 'model'):
            window = _positive(entry.get('context_length'))
            if window is not None:
                return window
    shown = await client.json(f'{server.root}/api/show', body={'model': server.model_name})
    if not isinstance(shown, Mapping):
        return None
    parameters = shown.get('parameters')
    match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if match:
        return int(match.group(1))
    info = shown.get('model_info')
    trained = [
        v for k, v in (info.items() if isinstance(info, Mapping) else ()) if k.endswith('.context_length')
    ]
    return min([OLLAMA_DEFAULT_CONTEXT, *(w for w in map(_positive, trained) if w)])


_PROBES: tuple[Callable[[_Client, LocalServer], Awaitable[int | None]], ...] = (
    _lm_studio,
    _llama_cpp,
    _ollama,
)
"""After `/models` (vLLM), in this order: each answers 404 (or without the field) on the other servers, so the
first that names a window is the server's kind."""
