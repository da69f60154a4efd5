"""Instrumentation shared by `measure.py` and `scaling.py`: a recording summarizer, a timed capability, and
what each compaction sent the summarizer (tokens, and the share of the evicted content it saw).

Imported in every package's venv (pydantic-ai + tiktoken only).
"""

from __future__ import annotations

import dataclasses
import re
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from typing import Any

from _strict import Encoder, count_history, part_text
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

__all__ = ('SUMMARY', 'Call', 'Summarizer', 'event_inputs', 'instrument', 'summarizer_coverage')

SUMMARY = """## Intent
The user wants every source the tools return collected and summarized with citations.

## Key decisions
Sources are read in the order the tools list them; JSON and CSV outputs are reduced to the fields that matter
(identifiers, names, prices, dates, counts); code is described by module and function names only.

## Artifacts
read_page, read_source, call_api, query_table and search_zh outputs; item numbers of every call so far.

## Current state
The earlier sources have been read and their key facts recorded above; nothing is written to disk yet.

## Next steps
Read the remaining sources, then write the short cited summary the user asked for.

## Open questions
None so far."""

_WORD = re.compile(r'\w+')


@dataclasses.dataclass
class SummarizerCall:
    messages: list[ModelMessage]
    instructions: str


@dataclasses.dataclass
class Summarizer:
    """An instant summarizer (`FunctionModel`) that keeps a reference to every input it was sent.

    It does no counting while the packages run (so its own time and allocations stay out of the timings and
    the tracemalloc peak): the reported usage is chars/4, and the o200k counts are taken afterwards with
    `input_tokens()`.
    """

    inputs: list[SummarizerCall] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def calls(self) -> int:
        return len(self.inputs)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started = time.perf_counter()
        instructions = getattr(info, 'instructions', None)
        self.inputs.append(SummarizerCall(messages, instructions if isinstance(instructions, str) else ''))
        chars = sum(len(part_text(p)) for m in messages for p in m.parts)
        text = f'{SUMMARY}\n(summary {self.calls})'
        response = ModelResponse(
            parts=[TextPart(text)], usage=RequestUsage(input_tokens=chars // 4, output_tokens=len(text) // 4)
        )
        self.seconds += time.perf_counter() - started
        return response

    def model(self) -> FunctionModel:
        return FunctionModel(self, model_name='gpt-4o-mini')

    def input_tokens(self, encode: Encoder, calls: Sequence[SummarizerCall] | None = None) -> list[int]:
        """o200k tokens of each input (the history as the strict provider counts it, plus instructions)."""
        return [
            count_history(c.messages, encode) + encode(c.instructions)
            for c in (self.inputs if calls is None else calls)
        ]


@dataclasses.dataclass
class Call:
    """One `before_model_request` of the capability under test."""

    seconds: float
    messages_in: int
    messages_out: int
    summarizer_calls: int
    first_summarizer_call: int
    peak_bytes: int | None = None
    history_in: list[ModelMessage] | None = None
    history_out: list[ModelMessage] | None = None
    skipped: bool = False

    @property
    def compacted(self) -> bool:
        return self.summarizer_calls > 0 or self.messages_out < self.messages_in


def instrument(
    capability: Any, calls: list[Call], summarizer: Summarizer, *, skip_first: int = 0, keep_io: bool = False
) -> Any:
    """Time the capability's `before_model_request`, the summarizer's own time subtracted.

    `skip_first` passes the first N requests through without calling the package (a "cold" compaction: the
    package first sees the history on the request that must compact it). `keep_io` keeps the lists before
    and after each call (for `summarizer_coverage`).
    """
    cls = type(capability)
    original = cls.before_model_request
    skip = [skip_first]

    async def timed(self: Any, ctx: Any, request_context: Any) -> Any:
        n_in = len(request_context.messages)
        if skip[0] > 0:
            skip[0] -= 1
            calls.append(Call(0.0, n_in, n_in, 0, summarizer.calls, skipped=True))
            return request_context
        history_in = list(request_context.messages) if keep_io else None
        calls_before, own_before = summarizer.calls, summarizer.seconds
        tracing = tracemalloc.is_tracing()
        base = 0
        if tracing:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        started = time.perf_counter()
        result = await original(self, ctx, request_context)
        elapsed = time.perf_counter() - started - (summarizer.seconds - own_before)
        peak = tracemalloc.get_traced_memory()[1] - base if tracing else None
        call = Call(elapsed, n_in, len(result.messages), summarizer.calls - calls_before, calls_before, peak)
        if keep_io:
            call.history_in, call.history_out = history_in, list(result.messages)
        calls.append(call)
        return result

    capability.__class__ = type(f'Timed{cls.__name__}', (cls,), {'before_model_request': timed})
    return capability


def event_inputs(call: Call, summarizer: Summarizer) -> list[SummarizerCall]:
    return summarizer.inputs[call.first_summarizer_call : call.first_summarizer_call + call.summarizer_calls]


def _words(texts: Sequence[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_WORD.findall(text))
    return counts


def summarizer_coverage(call: Call, summarizer: Summarizer, encode: Encoder) -> dict[str, Any]:
    """What one compaction sent the summarizer, against what it removed from the history.

    Evicted = the text of every part in the history before the call whose text is in no part after it.
    Seen = the share of the evicted content's words (a multiset, so repeats count) that occur in the
    summarizer inputs of that call; word-based so that each package's own rendering (JSON vs repr, tags,
    headings) does not matter. Content a package moved to a store instead of summarizing counts as unseen.
    """
    assert call.history_in is not None
    assert call.history_out is not None
    kept = {part_text(p) for m in call.history_out for p in m.parts}
    evicted = [t for m in call.history_in for p in m.parts if (t := part_text(p)) and t not in kept]
    inputs = event_inputs(call, summarizer)
    sent = [part_text(p) for c in inputs for m in c.messages for p in m.parts] + [
        c.instructions for c in inputs
    ]
    evicted_words = _words(evicted)
    sent_words = _words(sent)
    total = sum(evicted_words.values())
    seen = sum(min(n, sent_words[w]) for w, n in evicted_words.items())
    tokens = summarizer.input_tokens(encode, inputs)
    return {
        'summarizer_calls': len(inputs),
        'summarizer_input_tokens': sum(tokens),
        'summarizer_max_input_tokens': max(tokens, default=0),
        'evicted_tokens': sum(encode(t) for t in evicted),
        'evicted_seen_pct': 100 * seen / total if total else None,
    }
