"""Token accounting: tiktoken counts of every part type, image pricing by pixels, provider-usage anchoring.

Counts are memoized by message identity (a grown history costs only its new messages) and by text content
(reloaded histories are new objects with the same strings). Binary content is never stringified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._counter import (
        TokenCounter,
        TokenEstimate,
        TokenizerProfile,
        image_size,
        image_tokens,
        profile_for_model,
    )
    from ._estimate import estimate_tokens_offline

__all__ = (
    'TokenCounter',
    'TokenEstimate',
    'TokenizerProfile',
    'estimate_tokens_offline',
    'image_size',
    'image_tokens',
    'profile_for_model',
)

_EXPORTS = {
    'TokenCounter': '._counter',
    'TokenEstimate': '._counter',
    'TokenizerProfile': '._counter',
    'estimate_tokens_offline': '._estimate',
    'image_size': '._counter',
    'image_tokens': '._counter',
    'profile_for_model': '._counter',
}
"""The counter loads with the first count, not with the package (the processor's first request)."""

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
