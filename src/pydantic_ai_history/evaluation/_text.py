"""The text a model sees of a history; the normalisation the model-free scores allow (whitespace and case) and
the one answers are scored with (also `$`, thousands separators and a trailing `.0`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage

from ..messages.units import split_units
from ..stages._transcript import render_units
from ..tokens import TokenCounter


def normalize(text: str) -> str:
    """`text` with runs of whitespace made one space and letters lower-cased: nothing else is forgiven."""
    return ' '.join(text.split()).lower()


_THOUSANDS = re.compile(r'(?<=\d),(?=\d)')
_ZERO_DECIMALS = re.compile(r'(?<=\d)\.0+(?!\d|\.\d)')


def normalize_answer(text: str) -> str:
    """`text` as answers are compared: `normalize` (whitespace, case), without `$`, commas between digits
    dropped (`1,234` is `1234`), other commas made spaces, a trailing `.0` dropped (`159.0` is `159`)."""
    text = _THOUSANDS.sub('', text.replace('$', '')).replace(',', ' ')
    return normalize(_ZERO_DECIMALS.sub('', text))


def contains(normalized_text: str, normalized_fact: str) -> bool:
    """Whether the fact is in the text as a whole token run: `123` is not in `art_9f123ab` or `41234`."""
    if not normalized_fact:
        return False
    start = r'(?<!\w)' if normalized_fact[0].isalnum() or normalized_fact[0] == '_' else ''
    end = r'(?!\w)' if normalized_fact[-1].isalnum() or normalized_fact[-1] == '_' else ''
    return re.search(start + re.escape(normalized_fact) + end, normalized_text) is not None


def context_text(messages: Sequence[ModelMessage], counter: TokenCounter) -> str:
    """Everything a model reads of `messages`, rendered as the stored transcripts render it (system prompts,
    user text, tool calls and results, summaries and their reference lines), framed `<msg role=...>`.

    The transcript's random frame nonce is taken out: a score must not depend on it."""
    rendered = render_units(messages, split_units(messages), counter, tool_result_max_tokens=None)
    texts = [
        unit.text.replace(f'<msg-{unit.nonce} ', '<msg ').replace(f'</msg-{unit.nonce}>', '</msg>')
        for unit in rendered
    ]
    return '\n'.join(texts)
