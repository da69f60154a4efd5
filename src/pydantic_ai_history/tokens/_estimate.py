"""The tokenizer-free token estimate, shared by the token counter and the file readers.

It depends on nothing (the file readers import no pydantic-ai), and errs on the side of counting too much.
"""

from __future__ import annotations

import functools
import math
import re


@functools.cache
def _cjk() -> re.Pattern[str]:
    # Compiled at first use: a class this wide takes milliseconds to compile, a cost every import would pay.
    return re.compile(
        r'[\u1100-\u11ff\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]'
    )


def estimate_tokens_offline(text: str) -> int:
    """A tokenizer-free estimate used when tiktoken's encoding cannot be loaded: one token per CJK character
    and one per 3 others (real text averages 3.66), so it errs on the side of counting too much."""
    if not text:
        return 0
    cjk = 0 if text.isascii() else len(_cjk().findall(text))
    return cjk + math.ceil((len(text) - cjk) / 3)
