"""`pydantic-ai-history count`: tokens per message and in total, tokenizer-only and anchored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic_ai.messages import ModelMessage

from ..tokens import TokenCounter
from .common import history_model_name, load_history, message_role, part_summary
from .formatting import format_table


@dataclass(frozen=True)
class MessageCount:
    index: int
    role: str
    parts: str
    tokens: int


@dataclass(frozen=True)
class CountReport:
    """Token counts of one history.

    `anchored` trusts the newest response's `usage.input_tokens` for the messages before it (it assumes the
    file holds exactly what was sent) and counts the rest; without usage it equals `tokenizer`.
    """

    model: str | None
    profile: str
    encoding: str
    messages: tuple[MessageCount, ...]
    tokenizer: int
    anchored: int
    anchor_index: int | None
    anchor_input_tokens: int | None
    offline_estimate: bool

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def count_messages(messages: Sequence[ModelMessage], model: str | None = None) -> CountReport:
    """Count a loaded history; `model` defaults to the one its responses name (else the 'other' profile)."""
    model = model or history_model_name(messages)
    counter = TokenCounter(model)
    plain = counter.estimate(messages)
    if plain.anchor_index is not None:
        # A saved history is taken to be what was sent, so its newest usage figure covers its prefix.
        counter.mark_sent(messages[: plain.anchor_index])
    estimate = counter.estimate(messages)
    rows = tuple(
        MessageCount(i, message_role(m), part_summary(m), tokens)
        for i, (m, tokens) in enumerate(zip(messages, estimate.per_message, strict=True))
    )
    return CountReport(
        model=model,
        profile=counter.tokenizer_profile.name,
        encoding=counter.tokenizer_profile.encoding,
        messages=rows,
        tokenizer=estimate.tokenizer,
        anchored=estimate.total,
        anchor_index=estimate.anchor_index,
        anchor_input_tokens=estimate.anchor_input_tokens,
        offline_estimate=counter.offline,
    )


def count_history(path: str | Path, model: str | None = None) -> CountReport:
    return count_messages(load_history(path), model)


def render_count(report: CountReport) -> str:
    table = format_table(
        ['#', 'role', 'parts', 'tokens'],
        [(m.index, m.role, m.parts, m.tokens) for m in report.messages],
        align='rllr',
        footer=[('', 'total', 'tokenizer', report.tokenizer), ('', 'total', 'anchored', report.anchored)],
    )
    lines = [
        f'model: {report.model or "(unknown)"}  profile: {report.profile} ({report.encoding})'
        + ('  [offline estimate: tiktoken encoding unavailable]' if report.offline_estimate else ''),
        table,
    ]
    if report.anchor_index is not None:
        lines.append(
            f'anchored on message {report.anchor_index}: usage.input_tokens={report.anchor_input_tokens:,} '
            'for the messages before it, tokenizer counts after it'
        )
    else:
        lines.append('no response reports usage, so anchored = tokenizer')
    return '\n'.join(lines)
