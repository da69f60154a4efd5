"""A run's totals from what the providers recorded: both bills, rewrites, rejections, the read-backs its facts
take, and step latency."""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from .pricing import Billed, Prices, automatic_billing
from .provider import RequestRecord
from .summarizer import SummarizerCall

__all__ = ('READBACK_FRAMING_TOKENS', 'bill', 'readback_bill', 'step_latency')

READBACK_FRAMING_TOKENS = 12
"""A tool call's or a tool return's own tokens beyond its text (name, id, role markers)."""


def _sum(billed: Sequence[Billed]) -> dict[str, int]:
    return {
        'cache_read': sum(b.cache_read for b in billed),
        'cache_write': sum(b.cache_write for b in billed),
        'uncached': sum(b.uncached for b in billed),
    }


def bill(
    requests: Sequence[RequestRecord], calls: Sequence[SummarizerCall], prices: Prices
) -> dict[str, Any]:
    """The totals of a run: both cache models' bills (summarizer included), rewrites, rejections."""
    accepted = [r for r in requests if r.rejected is None]
    rejected = [r for r in requests if r.rejected is not None]
    input_tokens = sum(r.tokens for r in accepted)
    output_tokens = sum(r.output_tokens for r in accepted)
    summarizer_in = sum(c.input_tokens for c in calls)
    summarizer_out = sum(c.output_tokens for c in calls)
    summarizer_cost = prices.uncached(summarizer_in, summarizer_out)
    modes: dict[str, Any] = {}
    for mode in ('automatic', 'breakpoint'):
        billed = [getattr(r, mode) for r in accepted]
        main = sum(prices.request(b, r.output_tokens) for b, r in zip(billed, accepted, strict=False))
        totals = _sum(billed)
        modes[mode] = {
            **totals,
            'cache_hit': totals['cache_read'] / input_tokens if input_tokens else 0.0,
            'main_cost': round(main, 4),
            'cost': round(main + summarizer_cost, 4),
        }
    rewrites = [r for r in accepted if r.rewrite]
    return {
        'requests': len(requests),
        'rejected': len(rejected),
        'first_rejected': rejected[0].index if rejected else None,
        'first_rejection': rejected[0].rejected if rejected else None,
        'largest_request': max((r.tokens for r in requests), default=0),
        'input_tokens': input_tokens,
        'output_tokens': output_tokens,
        'rewrites': len(rewrites),
        'rewrite_tokens': sum(r.rewrite_tokens for r in rewrites),
        'rewrite_at': [r.index for r in rewrites],
        'summarizer': {
            'calls': len(calls),
            'input_tokens': summarizer_in,
            'output_tokens': summarizer_out,
            'max_input': max((c.input_tokens for c in calls), default=0),
            'cost': round(summarizer_cost, 4),
        },
        **modes,
    }


def readback_bill(
    final_tokens: int, answers: Sequence[tuple[str, str]], encode: Callable[[str], int], prices: Prices
) -> dict[str, Any]:
    """What the read-backs of the facts one read away cost: for each `(fact, answer)`, the model writes one
    tool call (`{"artifact_id": ..., "query": fact}`, output tokens) and sends one more request, the final
    context (`final_tokens`, read from the cache the final request wrote), its call and the answer.

    The model's answer to its question after the read-back is not billed: it answers the same question
    whether the fact was in context or read back."""
    calls = [encode(json.dumps({'artifact_id': 'art_' + '0' * 32, 'query': fact})) for fact, _ in answers]
    calls = [n + READBACK_FRAMING_TOKENS for n in calls]
    returned = [encode(answer) + READBACK_FRAMING_TOKENS for _, answer in answers]
    modes: dict[str, float] = {'automatic': 0.0, 'breakpoint': 0.0}
    for call, answer in zip(calls, returned, strict=True):
        total = final_tokens + call + answer
        billed = {
            'automatic': automatic_billing(total, final_tokens),
            'breakpoint': Billed(total, final_tokens, call + answer, 0),
        }
        for mode, request in billed.items():
            modes[mode] += prices.request(request, call)
    return {
        'calls': len(answers),
        'context_tokens': final_tokens,
        'input_tokens': sum(final_tokens + c + a for c, a in zip(calls, returned, strict=True)),
        'answer_tokens': sum(returned),
        'output_tokens': sum(calls),
        'cost': {mode: round(cost, 4) for mode, cost in modes.items()},
    }


def step_latency(requests: Sequence[RequestRecord], calls: Sequence[SummarizerCall]) -> dict[str, Any]:
    """Wall time a step takes between the model's answer and its next request (tools, capabilities, a
    summarizer the step waits for), for the steps that compact against the median of those that do not.

    A compaction step is one whose request rewrote what was already sent, or during which a summarizer call
    started. Added latency = the step's time minus the median of the other steps.
    """
    steps: list[tuple[float, bool]] = []
    for before, request in itertools.pairwise(requests):
        started = any(before.answered <= c.started < request.arrived for c in calls)
        steps.append((request.arrived - before.answered, request.rewrite or started))
    normal = [seconds for seconds, compacting in steps if not compacting]
    baseline = statistics.median(normal) if normal else 0.0
    added = [seconds - baseline for seconds, compacting in steps if compacting]
    return {
        'normal_step_seconds': round(baseline, 4),
        'compaction_steps': len(added),
        'added_seconds_mean': round(statistics.mean(added), 3) if added else None,
        'added_seconds_max': round(max(added), 3) if added else None,
        'added_seconds_total': round(sum(added), 3),
    }
