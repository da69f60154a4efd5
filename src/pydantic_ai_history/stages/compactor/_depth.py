"""How deep a compaction event goes: whether stubs alone are enough, or a summary is worth its call.

An event rewrites the cached prompt after the head once; what it leaves is then read again, from the cache,
by every request until the next event. Stubs cost no model call but leave every stubbed unit in place (its
call and a stub); a summary costs one summarizer call and leaves less. So stubs alone end the event when
carrying what they leave beyond a summary's result, request after request until the history is back at the
trigger, costs less than the summarizer's call would:

    extra * requests_until_trigger * cached_input_ratio  <=  view_tokens + output_ratio * summary_tokens

all in uncached input tokens. Short histories and small windows take stubs (few requests to carry them);
long ones, with many stubbed units, take a summary.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ('EventCosts', 'stubs_suffice')

OUTPUT_PRICE_RATIO = 5.0
"""An output token costs about five uncached input tokens (OpenAI, Anthropic and Google list 4-8x)."""


@dataclass(frozen=True, kw_only=True)
class EventCosts:
    """What one event at the trigger would leave and cost, in tokens."""

    stubbed: int
    """The history (with its overhead) when the tool outputs before the verbatim tail are stubs."""
    summarized: int
    """The history when everything before the verbatim tail is one summary: head, summary, trail, tail."""
    trigger: int
    """Where the next event starts."""
    growth: int
    """Tokens the history grows by per request (its units' average, as they were kept)."""
    view_tokens: int
    """What the summarizer would read."""
    summary_tokens: int
    """What it would write."""


def stubs_suffice(costs: EventCosts, *, cached_input_ratio: float) -> bool:
    """Whether carrying what stubs leave beyond a summary until the next event costs at most the summary's
    call (`cached_input_ratio`: a cached input token's price over an uncached one's)."""
    extra = costs.stubbed - costs.summarized
    if extra <= 0:
        return True
    requests = max(costs.trigger - costs.stubbed, 0) / max(costs.growth, 1)
    carried = extra * requests * cached_input_ratio
    return carried <= costs.view_tokens + OUTPUT_PRICE_RATIO * costs.summary_tokens
