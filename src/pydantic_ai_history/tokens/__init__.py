"""Token accounting: tiktoken counts of every part type, image pricing by pixels, provider-usage anchoring.

Counts are memoized by message identity (a grown history costs only its new messages) and by text content
(reloaded histories are new objects with the same strings). Binary content is never stringified.
"""

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
