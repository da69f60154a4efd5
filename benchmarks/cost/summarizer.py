"""The scripted summarizer every contender calls: a `FunctionModel`, deterministic, ~600 tokens of prose.

Its answer depends only on what it was sent (a hash of the input seeds the wording), so two different inputs
give two different summaries (a re-summarized history is a new prefix, as with a real model) and a rerun gives
the same bytes. It copies nothing from its input: any fact found in the final context came from the history
itself or from what a package adds to the summary deterministically, never from the model. Every call is
counted with the same ruler as the main model (instructions and messages, o200k) and billed in full at the
input price (no cache), its answer at the output price. In the latency run it sleeps `seconds` first; in the
cost runs a call lasts `RequestClock.requests` of the run's model requests while the run goes on (a summary
made in the background), and answers at once when the run waits for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from .pricing import Block
from .provider import RequestClock

__all__ = ('SUMMARY_TOKENS', 'Summarizer', 'SummarizerCall', 'scripted_summary')

SUMMARY_TOKENS = 600
SECTIONS = ('Intent', 'Progress so far', 'Sources read', 'Decisions', 'Current state', 'Next steps')
_SUBJECTS = (
    'The user',
    'The audit',
    'The assistant',
    'The review',
    'The latest batch',
    'The data-quality check',
    'Each source',
    'The remaining work',
)
_VERBS = (
    'covers',
    'compares',
    'collects',
    'tracks',
    'checks',
    'lists',
    'reconciles',
    'groups',
    'notes',
    'reviews',
)
_OBJECTS = (
    'the records returned by the tools',
    'the tables and their columns',
    'the API responses and their status codes',
    'the articles and their main claims',
    'the order of the sources',
    'the open discrepancies',
    'the figures that changed between batches',
    'the structure of every response',
    'the sources still to read',
    'the earlier findings',
)
_TAILS = (
    'before writing the final answer',
    'so the report can cite them',
    'as the user asked at the start',
    'without repeating work already done',
    'in the order they arrived',
    'and flags anything inconsistent',
)


def scripted_summary(seed: bytes, count: Callable[[str], int], tokens: int = SUMMARY_TOKENS) -> str:
    """About `tokens` tokens of structured, generic prose, its wording chosen by `seed`."""
    rng = random.Random(seed)
    lines: list[str] = []
    used = 0
    section = 0
    while used < tokens:
        if section < len(SECTIONS) and used >= section * tokens // len(SECTIONS):
            heading = f'## {SECTIONS[section]}'
            lines.append(heading)
            used += count(heading) + 1
            section += 1
        sentence = (
            f'{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}.'
        )
        lines.append(sentence)
        used += count(sentence) + 1
    return '\n'.join(lines)


@dataclass(frozen=True)
class SummarizerCall:
    input_tokens: int
    output_tokens: int
    started: float
    finished: float


@dataclass
class Summarizer:
    """The function behind the summarizer's `FunctionModel` (use `.model()`)."""

    render: Callable[[list[ModelMessage], AgentInfo | None], list[Block]]
    count: Callable[[str], int]
    seconds: float = 0.0
    clock: RequestClock | None = None
    """The cost runs' time, in model requests (the latency run sleeps `seconds` instead)."""
    calls: list[SummarizerCall] = field(default_factory=list)
    model_name: str = 'gpt-4o-mini'
    context_window: int = 128_000
    """Reported in its profile (a cheap 128K model); its requests are counted, never rejected."""

    def model(self) -> FunctionModel:
        profile: Any = {'context_window': self.context_window}
        return FunctionModel(self.__call__, model_name=self.model_name, profile=profile)

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started = time.perf_counter()
        blocks = self.render(messages, info)
        digest = hashlib.sha256('\x00'.join(b.text for b in blocks).encode('utf-8', 'replace')).digest()
        if self.seconds:
            await asyncio.sleep(self.seconds)
        elif self.clock is not None:
            await self.clock.wait()
        text = scripted_summary(digest, self.count)
        input_tokens = sum(b.tokens for b in blocks)
        output_tokens = self.count(text)
        self.calls.append(SummarizerCall(input_tokens, output_tokens, started, time.perf_counter()))
        return ModelResponse(
            parts=[TextPart(text)],
            model_name=self.model_name,
            usage=RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens),
        )
