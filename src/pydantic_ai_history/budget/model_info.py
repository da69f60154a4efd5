"""Context window, output cap and price per model: override, model profile, genai-prices, small tables.

Nothing here raises for an unknown model: `model_info` says `source='unknown'` and the context policy
decides (it assumes `ContextPolicy.fallback_context_window` with a warning, or raises
`ContextWindowUnknownError` under `ContextPolicy(strict=True)`). Names are parsed first
(`parse_model_name`), so a Bedrock, OpenRouter, Vertex or Ollama id is looked up as the model it names.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai.models.wrapper import WrapperModel

from .._compat import PROFILE_FILE_INPUT

if TYPE_CHECKING:
    from ..tokens._model_name import ModelName

# model names are parsed with `tokens._model_name`, loaded by the first name asked about
_NAMES = frozenset({'KNOWN_PROVIDERS', 'ModelName', 'family_of', 'parse_model_name'})


def __getattr__(name: str) -> Any:
    """The names of `tokens._model_name` this module has always offered, loaded on first use."""
    if name in _NAMES:
        from ..tokens import _model_name

        return getattr(_model_name, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


logger = logging.getLogger('pydantic_ai_history.model_info')


class ContextWindowUnknownError(LookupError):
    """No context window could be found for a model and `ContextPolicy(strict=True)` asked for an error."""

    def __init__(self, model_name: str | None) -> None:
        super().__init__(
            f'The context window of model {model_name!r} is unknown. Set it with '
            '`ContextPolicy(context_window=...)` (or give the model a profile with `context_window`, '
            'pydantic-ai 2.x); without `ContextPolicy(strict=True)` the processor assumes '
            '`fallback_context_window` instead.'
        )
        self.model_name = model_name


KNOWN_CONTEXT_WINDOWS: Mapping[str, int] = {
    # Used only when neither the model profile nor genai-prices knows the model. Matched against the bare
    # model (`ModelName.ref`: no provider, vendor, region, version or tag) of the same family; longest
    # prefix wins. Sources: the vendors' model pages (platform.openai.com/docs/models,
    # docs.anthropic.com/en/docs/about-claude/models, ai.google.dev/gemini-api/docs/models,
    # docs.mistral.ai, llama.com model cards).
    'gpt-4o': 128_000,
    'gpt-4.1': 1_047_576,
    'gpt-4-turbo': 128_000,
    'gpt-4': 8_192,
    'gpt-3.5-turbo': 16_385,
    'gpt-5': 400_000,
    'o1': 200_000,
    'o3': 200_000,
    'o4-mini': 200_000,
    'claude': 200_000,
    'gemini-1.5': 1_048_576,
    'gemini-2': 1_048_576,
    'gemini-3': 1_048_576,
    'mistral-large': 128_000,
    'llama-3': 8_192,  # Llama 3.0 (8B, 70B); 3.1 and later below
    'llama-3.1': 128_000,
    'llama-3.2': 128_000,
    'llama-3.3': 128_000,
    'deepseek': 128_000,
}

KNOWN_MAX_OUTPUT_TOKENS: Mapping[str, int] = {
    # The most tokens a model answers with, kept free below its window (`ContextPolicy.reserve_tokens`).
    # genai-prices records no output cap and pydantic-ai's `ModelProfile` has none either (2.68's Anthropic
    # profile has `anthropic_max_output_tokens`, read first). Matched like `KNOWN_CONTEXT_WINDOWS`.
    # OpenAI (platform.openai.com/docs/models, "Max output tokens"):
    'gpt-5': 128_000,  # gpt-5, -mini, -nano, -codex, 5.1: 400K window, 272K input
    'gpt-5-chat': 16_384,
    'gpt-4.5': 16_384,
    'gpt-4.1': 32_768,
    'gpt-4o': 16_384,
    'gpt-4o-2024-05-13': 4_096,
    'chatgpt-4o': 16_384,
    'gpt-4-turbo': 4_096,
    'gpt-4-1106': 4_096,
    'gpt-4-0125': 4_096,
    'gpt-4': 8_192,
    'gpt-3.5-turbo': 4_096,
    'o1': 100_000,
    'o1-mini': 65_536,
    'o1-preview': 32_768,
    'o3': 100_000,
    'o4-mini': 100_000,
    'codex-mini': 100_000,
    # Anthropic (docs.anthropic.com/en/docs/about-claude/models, "Max output"; 4.6 and later: the list in
    # pydantic-ai 2.68's Anthropic profile, from Anthropic's Models API):
    'claude-3': 4_096,
    'claude-3-5-sonnet': 8_192,
    'claude-3-5-haiku': 8_192,
    'claude-3-7-sonnet': 64_000,
    'claude-opus-4': 32_000,
    'claude-opus-4-1': 32_000,
    'claude-opus-4-5': 64_000,
    'claude-opus-4-6': 128_000,
    'claude-opus-4-7': 128_000,
    'claude-opus-4-8': 128_000,
    'claude-sonnet-4': 64_000,
    'claude-sonnet-4-5': 64_000,
    'claude-sonnet-4-6': 128_000,
    'claude-haiku-4-5': 64_000,
    'claude-opus-5': 128_000,
    'claude-sonnet-5': 128_000,
    'claude-haiku-5-5': 128_000,
    'claude-fable-5': 128_000,
    'claude-mythos-5': 128_000,
    # Google (ai.google.dev/gemini-api/docs/models, "Output token limit"):
    'gemini-1.5': 8_192,
    'gemini-2.0': 8_192,
    'gemini-2.5': 65_536,
    'gemini-3': 65_536,
    # Llama, Mistral and DeepSeek: the output cap is set per provider (Bedrock, Groq, Ollama), not by the
    # model, so none is assumed.
}

_GENAI_PRICES_PROVIDERS: Mapping[str, str] = {
    **dict.fromkeys(('bedrock', 'bedrock-mantle'), 'aws'),
    **dict.fromkeys(('google-gla', 'google-vertex', 'google-cloud', 'vertexai', 'gemini'), 'google'),
    **dict.fromkeys(('grok', 'xai'), 'x-ai'),
    **dict.fromkeys(('openai-chat', 'openai-responses', 'openai-chatgpt', 'openai-codex'), 'openai'),
    'azure-responses': 'azure',
}
"""pydantic-ai provider names that genai-prices knows by another id; the rest are the same (`openai`,
`anthropic`, `openrouter`, `groq`, ...) or unknown to it (`ollama`: no lookup)."""

_SERVER_SET_WINDOW = frozenset({'ollama'})
"""Providers whose window is a server setting (Ollama's `num_ctx`), not the model's: the tables would claim a
window the server does not give, so these stay unknown and the policy's fallback warning asks for it."""


@dataclass(frozen=True)
class ModelInfo:
    """What we know about a model: its window (and where it came from), its output cap and its input price."""

    name: str | None
    """`provider:model` as given or read from the `Model`; None when there is no model."""
    context_window: int | None
    """The model's whole context window in tokens; None when nothing knows it."""
    source: str
    """Where the window came from: 'override', 'server' (asked of the local server that serves the model),
    'profile', 'genai-prices', 'table' or 'unknown'."""
    input_price_per_mtok: float | None = None
    """USD per million input tokens (genai-prices), when known."""
    max_output_tokens: int | None = None
    """The most tokens the model may answer with, when known (the model profile, else
    `KNOWN_MAX_OUTPUT_TOKENS`): the policy keeps it free below the window."""

    def require_context_window(self) -> int:
        if self.context_window is None:
            raise ContextWindowUnknownError(self.name)
        return self.context_window


def model_name_of(model: object) -> str | None:
    """`provider:name` for a pydantic-ai `Model` (`bedrock:us.anthropic.claude-...-v2:0`), or the string.
    A name already starting with a known provider keeps it (a Bedrock `:0` or an Ollama tag is no provider).
    """
    if model is None or isinstance(model, str):
        return model
    name = getattr(model, 'model_name', None)
    system = getattr(model, 'system', None)
    if not isinstance(name, str):
        return None
    if not isinstance(system, str) or _has_known_provider(name):
        return name
    return f'{system}:{name}'


@functools.lru_cache(maxsize=256)  # asked on every request for the run's model; the answer never changes
def _has_known_provider(name: str) -> bool:
    from ..tokens._model_name import parse_model_name

    provider = parse_model_name(name).provider
    return provider is not None and _is_known(provider)


def _is_known(provider: str) -> bool:
    from ..tokens._model_name import KNOWN_PROVIDERS

    return provider in KNOWN_PROVIDERS or provider.startswith('gateway/')


def _profile(model: object) -> object:
    """The model's profile, or None: a wrapper without one of its own (`FallbackModel`) raises
    `NotImplementedError` where others raise `AttributeError`; neither may stop a run."""
    if isinstance(model, str):
        return None
    try:
        return getattr(model, 'profile', None)
    except Exception:
        return None


def _profile_get(model: object, key: str) -> object:
    profile = _profile(model)
    return profile.get(key) if isinstance(profile, Mapping) else getattr(profile, key, None)


def _profile_value(model: object, key: str) -> int | None:
    value = _profile_get(model, key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def thinks_by_default(model: object) -> bool:
    """Whether the model's profile says it thinks without being asked (OpenAI's reasoning models: its
    thinking counts in the answer's `max_tokens`); False where the profile has no such flag (early 1.x)."""
    return any(
        _profile_get(model, key) is True for key in ('thinking_always_enabled', 'thinking_enabled_by_default')
    )


def unknown_provider(name: str) -> str | None:
    """The provider prefix of model name `name` when pydantic-ai knows no such provider (`'nosuchprovider'` in
    `'nosuchprovider:foo'`), else None. No model is built and nothing is asked of the network: a provider is
    known when pydantic-ai's `infer_provider_class` names its class (its SDK may still be missing)."""
    if name == 'test' or ':' not in name:
        return None
    provider = name.partition(':')[0]
    if _is_known(provider):
        return None
    from pydantic_ai.providers import infer_provider_class

    try:
        infer_provider_class(provider)
    except ImportError:  # known, its SDK is not installed
        return None
    except Exception:
        return provider
    return None


def profile_window(model: object) -> int | None:
    """The `context_window` of the model's profile (pydantic-ai 2.x), when set."""
    return _profile_value(model, 'context_window')


@functools.lru_cache(maxsize=256)
def _genai_prices(name: str) -> tuple[int | None, float | None]:
    from ..tokens._model_name import parse_model_name

    parsed = parse_model_name(name)
    if parsed.provider in _SERVER_SET_WINDOW:
        return None, None
    provider = parsed.provider and parsed.provider.removeprefix('gateway/')
    try:
        from genai_prices import data_snapshot

        snapshot = data_snapshot.get_snapshot()
        provider_id = _GENAI_PRICES_PROVIDERS.get(provider, provider) if provider else None
        _, info = snapshot.find_provider_model(parsed.model_id, None, provider_id, None)
    except Exception:  # unknown model or provider, or a genai-prices version with another API
        return None, None
    window = getattr(info, 'context_window', None)
    try:
        prices = info.prices if not isinstance(info.prices, list) else info.prices[0].prices
        mtok = getattr(prices, 'input_mtok', None)
        mtok = getattr(mtok, 'base', mtok)  # tiered prices: the base tier
        price = float(mtok) if mtok is not None else None
    except Exception:
        price = None
    return (window if isinstance(window, int) else None), price


def _table_lookup(table: Mapping[str, int], parsed: ModelName) -> int | None:
    """The entry for the longest prefix of the bare model among entries of the model's own family."""
    from ..tokens._model_name import family_of

    if parsed.provider in _SERVER_SET_WINDOW:
        return None
    ref = parsed.ref
    best = max(
        (k for k in table if ref.startswith(k) and parsed.family in (None, family_of(k))),
        key=len,
        default=None,
    )
    return table[best] if best else None


def _table_window(name: str) -> int | None:
    from ..tokens._model_name import parse_model_name

    return _table_lookup(KNOWN_CONTEXT_WINDOWS, parse_model_name(name))


def known_max_output_tokens(name: str) -> int | None:
    """The output cap the built-in table records for a model name, or None."""
    from ..tokens._model_name import parse_model_name

    return _table_lookup(KNOWN_MAX_OUTPUT_TOKENS, parse_model_name(name))


def model_info(
    model: object,
    *,
    also: Sequence[object] = (),
    context_window: int | None = None,
    server_windows: Mapping[str, int] | None = None,
) -> ModelInfo:
    """What is known of a model; never raises. The window: override, then what its local server said
    (`server_windows`: the other sources know the trained maximum, not the served window), then the profile,
    genai-prices, `KNOWN_CONTEXT_WINDOWS`, else `source='unknown'`. The output cap: the profile, then
    `KNOWN_MAX_OUTPUT_TOKENS`. A `FallbackModel` is described by its candidate with the smallest known window:
    a history that fits it fits them all; so are `model` and the models `also` says a request may move to."""
    candidates = serving_candidates(model) + tuple(c for other in also for c in serving_candidates(other))
    if len(candidates) > 1 and context_window is None:
        infos = [model_info(candidate, server_windows=server_windows) for candidate in candidates]
        known = [info for info in infos if info.context_window is not None]
        unknown = ModelInfo(model_name_of(model), None, 'unknown')
        return min(known, key=lambda info: info.context_window or 0, default=unknown)
    name = model_name_of(model)
    window_prices = _genai_prices(name) if name else (None, None)
    price = window_prices[1]
    # pydantic-ai 2.68's profile has an output cap for Claude only; `ModelProfile` has no general one
    max_output = _profile_value(model, 'anthropic_max_output_tokens') or (
        known_max_output_tokens(name) if name else None
    )
    if context_window is None and server_windows:
        from ._local_server import local_server_of

        server = local_server_of(model)
        if server is not None and server.key in server_windows:
            return ModelInfo(name, server_windows[server.key], 'server', price, max_output)
    window, source = _window(model, name, context_window, window_prices[0])
    return ModelInfo(name, window, source, price, max_output)


_MAX_CANDIDATES = 64
"""A bound on the models a wrapper tree is read for (a wrapper that wraps itself must not loop)."""


def serving_candidates(model: object) -> tuple[object, ...]:
    """The models a request to `model` may be served by, in the order they would be tried. A model with a
    profile of its own is its only candidate, wrappers included; a `FallbackModel` (and a wrapper around one,
    which has no profile) is read through `FallbackModel.models` and `WrapperModel.wrapped`.
    """
    if model is None or isinstance(model, str):
        return (model,)
    found: list[object] = []
    pending: list[object] = [model]
    while pending and len(found) + len(pending) <= _MAX_CANDIDATES:
        current = pending.pop(0)
        inner = _fallback_models(current)
        wrapped = _wrapped(current)
        if inner is None and wrapped is not None and (_profile(current) is None or _wraps_fallback(wrapped)):
            inner = [wrapped] if wrapped is not current else None
        if inner is None:
            found.append(current)
        else:
            pending[0:0] = inner
    return tuple(found) or (model,)


def _wraps_fallback(model: object) -> bool:
    """Whether `model` is, or wraps, a `FallbackModel` (1.0's has a default profile instead of raising)."""
    return any(_fallback_models(layer) is not None for layer in _layers(model))


def _layers(model: object) -> Iterator[object]:
    """`model` and the models its wrappers delegate to, outermost first (a wrapper may wrap itself)."""
    for _ in range(_MAX_CANDIDATES):
        yield model
        wrapped = _wrapped(model)
        if wrapped is None or wrapped is model:
            return
        model = wrapped


def _wrapped(model: object) -> object | None:
    """The model a wrapper (instrumentation, a durable engine's, a concurrency limit) delegates to."""
    return model.wrapped if isinstance(model, WrapperModel) else None


def _fallback_models(model: object) -> list[object] | None:
    """The models of a `FallbackModel`, None for any other model."""
    return list(model.models) if isinstance(model, _fallback_class()) else None  # type: ignore[attr-defined]


@functools.cache
def _fallback_class() -> type[Any]:
    """`FallbackModel`, imported on first use (asked on every request: an import statement costs more)."""
    from pydantic_ai.models.fallback import FallbackModel

    return FallbackModel


def file_input_profile(model: object) -> Mapping[str, Any] | None:
    """The file-input flags of `model`'s profile (`supports_image_input`, `supports_document_input`,
    `supported_document_media_types`) on 2.x, else None; a `FallbackModel`'s are what all its models take."""
    if not PROFILE_FILE_INPUT:
        return None
    profiles = [_file_flags(candidate) for candidate in serving_candidates(model)]
    if len(profiles) == 1:
        return profiles[0]
    documents = [p.get('supported_document_media_types') for p in profiles]
    known = [frozenset(d) for d in documents if d is not None]
    return {
        'supports_image_input': all(p.get('supports_image_input', True) for p in profiles),
        'supports_document_input': all(p.get('supports_document_input', True) for p in profiles),
        'supported_document_media_types': frozenset.intersection(*known) if known else None,
    }


def _file_flags(model: object) -> Mapping[str, Any]:
    profile = _profile(model)  # a profile that cannot be resolved says nothing
    return profile if isinstance(profile, Mapping) else {}  # no model yet: the profile's documented defaults


def is_test_model(model: object) -> bool:
    """Whether `model` is one of pydantic-ai's test models under any wrapper: a `TestModel`, or a
    `FunctionModel` under a name of its own (one named after a real model, `gpt-4o`, stands in for that
    model). They have no window, take any file, and an app's tests use them on purpose."""
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.test import TestModel

    from ..tokens._model_name import parse_model_name

    def stand_in(candidate: object) -> bool:
        *_, inner = _layers(candidate)
        if isinstance(inner, TestModel):
            return True
        name = model_name_of(inner)
        return isinstance(inner, FunctionModel) and (name is None or parse_model_name(name).family is None)

    return all(map(stand_in, serving_candidates(model)))


def _window(
    model: object, name: str | None, override: int | None, genai_prices_window: int | None
) -> tuple[int | None, str]:
    found = (
        (override, 'override'),
        (profile_window(model), 'profile'),
        (genai_prices_window, 'genai-prices'),
        (_table_window(name) if name else None, 'table'),
    )
    return next(((window, source) for window, source in found if window is not None), (None, 'unknown'))
