"""What every command shares: loading a saved history, user errors with exit codes, model names and keys."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic_ai.messages import ModelMessage, ModelResponse

EXIT_OK = 0
EXIT_PROCESSING = 1
"""The input was fine but processing failed (a summarizer or provider error)."""
EXIT_USAGE = 2
"""Bad arguments or input: a missing file, invalid JSON, a file that is not a history, an unknown window."""

PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    'openai': ('OPENAI_API_KEY',),
    'openai-chat': ('OPENAI_API_KEY',),
    'openai-responses': ('OPENAI_API_KEY',),
    'anthropic': ('ANTHROPIC_API_KEY',),
    'google-gla': ('GOOGLE_API_KEY', 'GEMINI_API_KEY'),
    'gemini': ('GOOGLE_API_KEY', 'GEMINI_API_KEY'),
    'groq': ('GROQ_API_KEY',),
    'mistral': ('MISTRAL_API_KEY',),
    'cohere': ('CO_API_KEY',),
    'deepseek': ('DEEPSEEK_API_KEY',),
    'openrouter': ('OPENROUTER_API_KEY',),
    'grok': ('GROK_API_KEY',),
    'xai': ('XAI_API_KEY',),
}
"""The environment variables that hold each provider's API key (any one of them will do)."""


class CliError(Exception):
    """A user error: printed as one line on stderr, never as a traceback."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    raise CliError(message, code)


def load_history(path: str | Path) -> list[ModelMessage]:
    """A history saved with `ModelMessagesTypeAdapter.dump_json`, or a `CliError` saying what is wrong."""
    from pydantic import ValidationError
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    file = Path(path)
    if not file.exists():
        fail(f'{file}: no such file')
    if file.is_dir():
        fail(f'{file}: is a directory, not a history file')
    try:
        data = file.read_bytes()
    except OSError as exc:
        fail(f'{file}: cannot be read ({exc.strerror or exc})')
    try:
        messages = ModelMessagesTypeAdapter.validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first['type'] == 'json_invalid':
            fail(f'{file}: not valid JSON ({first["msg"]})')
        if first['type'] == 'list_type':
            found = _json_kind(first['input'])
            fail(f'{file}: not a message history (expected a JSON list of messages, found {found})')
        where = '.'.join(map(str, first['loc']))
        fail(
            f'{file}: not a PydanticAI message history ({exc.error_count()} validation error(s); '
            f'first at {where or "top level"}: {first["msg"]})'
        )
    if not messages:
        fail(f'{file}: the history is empty (an empty JSON list)')
    return list(messages)


def _json_kind(value: object) -> str:
    return {dict: 'an object', str: 'a string', int: 'a number', float: 'a number', bool: 'a boolean'}.get(
        type(value), 'null'
    )


def history_model_name(messages: Sequence[ModelMessage]) -> str | None:
    """The model that wrote the newest response of a history, if it recorded one."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse) and message.model_name:
            return message.model_name
    return None


_ROLES = {
    'system-prompt': 'system',
    'user-prompt': 'user',
    'tool-return': 'tool',
    'retry-prompt': 'retry',
    'retry-feedback': 'retry',
    'compaction': 'summary',
}


def message_role(message: ModelMessage) -> str:
    """A short role: system, user, tool, retry (joined when mixed) for requests; assistant for responses."""
    if isinstance(message, ModelResponse):
        return 'assistant'
    return '+'.join(dict.fromkeys(_ROLES.get(part.part_kind, 'other') for part in message.parts)) or 'request'


def part_summary(message: ModelMessage) -> str:
    """The part kinds of a message with counts, e.g. `text, 2 tool-call`."""
    counts = Counter(part.part_kind for part in message.parts)
    return ', '.join(kind if n == 1 else f'{n} {kind}' for kind, n in counts.items()) or '(none)'


def require_api_key(model_name: str) -> None:
    """Fail with a clear message when a real model is asked for and its provider's key is not set."""
    provider, sep, _ = model_name.partition(':')
    if not sep:
        fail(f'model {model_name!r}: give it as provider:name, e.g. openai:gpt-4o-mini')
    names = PROVIDER_KEYS.get(provider.lower())
    if names is not None and not any(os.environ.get(n) for n in names):
        fail(f'model {model_name!r} needs {" or ".join(names)} set in the environment')


def build_model(model_name: str) -> Any:
    """A pydantic-ai model for `provider:name`; a missing provider package or key is a `CliError`."""
    require_api_key(model_name)
    from pydantic_ai.models import infer_model

    from ..budget._local_server import is_local_url

    provider, _, name = model_name.partition(':')
    base_url = os.environ.get('OPENAI_BASE_URL')
    try:
        if provider == 'openai-chat' and base_url and is_local_url(base_url):
            from .local_model import local_chat_model

            return local_chat_model(name, base_url)
        return infer_model(model_name)
    except ImportError as exc:
        fail(f'model {model_name!r}: its provider package is not installed ({exc})')
    except Exception as exc:  # unknown provider, missing key for a provider we do not list, ...
        fail(f'model {model_name!r}: {type(exc).__name__}: {exc}')


class DryRunError(RuntimeError):
    """Raised by the dry-run model: nothing may be sent to a provider."""


def dry_run_model(model_name: str | None) -> Any:
    """A model that only carries `model_name` (for token counting and the window) and refuses every call.

    Stages that would call an LLM (summarizer, planner) get this error and use their deterministic fallbacks.
    """
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def refuse(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise DryRunError(
            'dry run: no model calls are made (pass --summarizer-model to summarize with an LLM)'
        )

    return FunctionModel(refuse, model_name=model_name or 'unknown')
