"""Token accounting: tiktoken counts of every part type, image pricing by pixels, provider-usage anchoring.

Counts are memoized twice: by message identity (the hot path: a history that grew by one message only
costs the new message) and by text content (histories reloaded from JSON are new objects with the same
strings). Binary content is never stringified.

The package: `_counter` (the counter and the tokenizer profiles), `_estimate` (the tokenizer-free estimate,
which depends on nothing), `_encodings` (the packaged tiktoken files) and `_running_counts` (counts by
message identity and per-conversation running totals).
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
