"""Context window and price per model: explicit override, model profile, genai-prices, a small table.

There is no silent default: a setting that needs a window and cannot find one raises
`ContextWindowUnknownError` saying how to set it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ('KNOWN_CONTEXT_WINDOWS', 'ContextWindowUnknownError', 'ModelInfo', 'model_info', 'model_name_of')

logger = logging.getLogger('pydantic_ai_history.model_info')


class ContextWindowUnknownError(LookupError):
    """No context window could be found for a model and a setting needs one."""

    def __init__(self, model_name: str | None) -> None:
        super().__init__(
            f'The context window of model {model_name!r} is unknown. Pass `context_window=...` to '
            'create_history_processor(), or give the model a profile with `context_window` (pydantic-ai 2.x).'
        )
        self.model_name = model_name


KNOWN_CONTEXT_WINDOWS: Mapping[str, int] = {
    # Used only when neither the model profile nor genai-prices knows the model. Longest prefix wins.
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
    'llama-3': 128_000,
    'deepseek': 128_000,
}


@dataclass(frozen=True)
class ModelInfo:
    """What we know about a model: its window (and where it came from) and its input price."""

    name: str | None
    """`provider:model` as given or read from the `Model`; None when there is no model."""
    context_window: int | None
    """The model's whole context window in tokens; None when nothing knows it."""
    source: str
    """Where the window came from: 'override', 'profile', 'genai-prices', 'table' or 'unknown'."""
    input_price_per_mtok: float | None = None
    """USD per million input tokens (genai-prices), when known."""
    max_output_tokens: int | None = None
    """The most tokens the model may answer with, when known: kept free below the window."""

    def require_context_window(self) -> int:
        if self.context_window is None:
            raise ContextWindowUnknownError(self.name)
        return self.context_window


def model_name_of(model: Any) -> str | None:
    """`provider:name` for a pydantic-ai `Model`, or the string itself."""
    if model is None:
        return None
    if isinstance(model, str):
        return model
    name = getattr(model, 'model_name', None)
    system = getattr(model, 'system', None)
    if isinstance(name, str):
        return f'{system}:{name}' if isinstance(system, str) and ':' not in name else name
    return None


def profile_window(model: Any) -> int | None:
    profile = getattr(model, 'profile', None)
    value = (
        profile.get('context_window')
        if isinstance(profile, Mapping)
        else getattr(profile, 'context_window', None)
    )
    return value if isinstance(value, int) and value > 0 else None


@functools.lru_cache(maxsize=256)
def _genai_prices(name: str) -> tuple[int | None, float | None]:
    provider, _, ref = name.rpartition(':')
    try:
        from genai_prices import data_snapshot

        snapshot = data_snapshot.get_snapshot()
        _, info = snapshot.find_provider_model(ref, None, provider or None, None)
    except Exception:  # unknown model, or a genai-prices version with another API
        return None, None
    window = getattr(info, 'context_window', None)
    price: float | None = None
    try:
        prices = info.prices if not isinstance(info.prices, list) else info.prices[0].prices
        mtok = getattr(prices, 'input_mtok', None)
        mtok = getattr(mtok, 'base', mtok)  # tiered prices: the base tier
        price = float(mtok) if mtok is not None else None
    except Exception:
        price = None
    return (window if isinstance(window, int) else None), price


def _table_window(name: str) -> int | None:
    ref = name.rpartition(':')[2].lower().rsplit('/', 1)[-1]
    best = max((k for k in KNOWN_CONTEXT_WINDOWS if ref.startswith(k)), key=len, default=None)
    return KNOWN_CONTEXT_WINDOWS[best] if best else None


def model_info(model: Any, *, context_window: int | None = None) -> ModelInfo:
    """Resolve a model's window: override, then profile (2.x), then genai-prices, then the table."""
    name = model_name_of(model)
    window_prices = _genai_prices(name) if name else (None, None)
    price = window_prices[1]
    if context_window is not None:
        return ModelInfo(name, context_window, 'override', price)
    window = profile_window(model)
    if window is not None:
        return ModelInfo(name, window, 'profile', price)
    if window_prices[0] is not None:
        return ModelInfo(name, window_prices[0], 'genai-prices', price)
    window = _table_window(name) if name else None
    if window is not None:
        return ModelInfo(name, window, 'table', price)
    return ModelInfo(name, None, 'unknown', price)
