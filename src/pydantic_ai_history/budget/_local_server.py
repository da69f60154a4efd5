"""The context window a local server (LM Studio, Ollama, llama.cpp, vLLM) runs a model with, asked of it.

Such servers serve a window (a load setting, often 4K to 32K) far below the model's trained maximum, and a
history planned against the maximum is cut by the server. When nothing else knows the window, the processor
asks once per server and model in a process. What leaves the process is bounded: only the model's own base
URL, with the key its client already sends there, no proxy and no redirect; only for a host on this machine
or the local network (names are never resolved); within `PROBE_TIMEOUT_SECONDS` in a worker thread. Each
server is asked its documented way (vLLM `/models`, LM Studio `/api/v0/models`, llama.cpp `/props`, Ollama
`/api/ps` then `/api/show`, else Ollama's smallest documented default).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import anyio.to_thread

__all__ = (
    'OLLAMA_DEFAULT_CONTEXT',
    'PROBE_TIMEOUT_SECONDS',
    'LocalServer',
    'ask_context_window',
    'is_local_url',
    'local_server_of',
)

logger = logging.getLogger('pydantic_ai_history.local_server')

PROBE_TIMEOUT_SECONDS = 3.0
"""The most the question may take, every endpoint together; a server that does not answer in time is taken
for one that cannot, and the unknown-window fallback applies."""

OLLAMA_DEFAULT_CONTEXT = 4_096
"""Ollama's default context on machines with under 24 GiB of VRAM (docs.ollama.com, "Context length"): what a
model without a `num_ctx` of its own gets when it is not loaded yet to say otherwise."""

_LOCAL_SUFFIXES = ('.local', '.lan', '.internal', '.home.arpa', '.localhost')

_ANSWERS: dict[str, int | None] = {}
"""What each server said, by `LocalServer.key`, for the life of the process (None: it did not answer)."""


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
    server: LocalServer, *, api_key: str | None = None, timeout: float = PROBE_TIMEOUT_SECONDS
) -> int | None:
    """The context window `server` runs its model with, or None when it does not say (asked once per process;
    never raises). The questions run in a worker thread, so the event loop never waits on them."""
    if server.key in _ANSWERS:
        return _ANSWERS[server.key]
    client = _Client(api_key, time.monotonic() + timeout)
    window: int | None = None
    try:
        window = await anyio.to_thread.run_sync(_ask, client, server)
    except (OSError, TimeoutError) as exc:  # nothing listening, a reset, or no answer in time
        logger.info('%s did not say its context window (%s)', server.base_url, exc)
    except Exception:  # never let the question stop a run
        logger.info('asking %s for its context window failed', server.base_url, exc_info=True)
    _ANSWERS[server.key] = window
    return window


def _ask(client: _Client, server: LocalServer) -> int | None:
    return next((window for probe in _PROBES if (window := probe(client, server)) is not None), None)


@functools.lru_cache(maxsize=1)
def _opener() -> Any:
    """An opener with no proxy (the environment's `HTTP_PROXY` would send the question elsewhere) and no
    redirects (answered as the error they are). Built on first use, in the thread that asks: `urllib.request`
    is not for a durable engine's workflow sandbox, where this module is imported."""
    import urllib.request

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirects())


_MAX_ANSWER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class _Client:
    api_key: str | None
    deadline: float

    def json(self, url: str, *, body: Mapping[str, Any] | None = None) -> Any:
        """The JSON answer to a GET (or a POST of `body`), or None for an HTTP error status or an answer that
        is not JSON. A connection error or the deadline raise: nothing else on that server would answer."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError('no time left')
        headers = {'Accept': 'application/json'}
        if self.api_key:
            headers['Authorization'] = f'Bearer {self.api_key}'
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
        import urllib.error
        import urllib.request

        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with _opener().open(request, timeout=remaining) as response:
                raw = response.read(_MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError:  # 404 on another kind of server, 401, a refused redirect
            return None
        if len(raw) > _MAX_ANSWER_BYTES:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _same_model(entry: Mapping[str, Any], name: str, *keys: str) -> bool:
    names = {entry.get(key) for key in keys}
    # Ollama names a model without a tag `name:latest`
    return name in names or (':' not in name and f'{name}:latest' in names)


def _vllm(client: _Client, server: LocalServer) -> int | None:
    data = client.json(f'{server.base_url.rstrip("/")}/models')
    entries = data.get('data') if isinstance(data, Mapping) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and _same_model(entry, server.model_name, 'id', 'root'):
            return _positive(entry.get('max_model_len'))
    return None


def _lm_studio(client: _Client, server: LocalServer) -> int | None:
    data = client.json(f'{server.root}/api/v0/models/{quote(server.model_name, safe="")}')
    if not isinstance(data, Mapping) or data.get('id') not in (server.model_name, None):
        return None
    return _positive(data.get('loaded_context_length')) or _positive(data.get('max_context_length'))


def _llama_cpp(client: _Client, server: LocalServer) -> int | None:
    data = client.json(f'{server.root}/props')
    if not isinstance(data, Mapping):
        return None
    settings = data.get('default_generation_settings')
    n_ctx = settings.get('n_ctx') if isinstance(settings, Mapping) else None
    return _positive(n_ctx) or _positive(data.get('n_ctx'))


_NUM_CTX = re.compile(r'^\s*num_ctx\s+(\d+)\s*$', re.M)


def _ollama(client: _Client, server: LocalServer) -> int | None:
    running = client.json(f'{server.root}/api/ps')
    models = running.get('models') if isinstance(running, Mapping) else None
    for entry in models if isinstance(models, list) else []:
        if isinstance(entry, Mapping) and _same_model(entry, server.model_name, 'name', 'model'):
            window = _positive(entry.get('context_length'))
            if window is not None:
                return window
    shown = client.json(f'{server.root}/api/show', body={'model': server.model_name})
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


_PROBES: tuple[Callable[[_Client, LocalServer], int | None], ...] = (
    _vllm,
    _lm_studio,
    _llama_cpp,
    _ollama,
)
"""In this order: each answers 404 (or without the field) on the other servers, so the first that names a
window is the server's kind."""
