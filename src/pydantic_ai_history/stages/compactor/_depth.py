"""How deep a compaction event goes: whether stubs alone are enough, or a summary is worth its call.

What an event leaves is read from the cache by every request until the next one. Stubs cost no call but
leave more; so stubs alone end the event when carrying their extra costs less than the summarizer's call:

    extra * requests_until_trigger * cached_input_ratio  <=  view_tokens + output_ratio * summary_tokens

(in uncached input tokens): short histories and small windows take stubs, long ones a summary.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    growth: int
    """Tokens the history grows by per request (its units' average, as they were kept)."""
    view_tokens: int
    summary_tokens: int


def stubs_suffice(costs: EventCosts, *, cached_input_ratio: float) -> bool:
    extra = costs.stubbed - costs.summarized
    if extra <= 0:
        return True
    requests = max(costs.trigger - costs.stubbed, 0) / max(costs.growth, 1)
    carried = extra * requests * cached_input_ratio
    return carried <= costs.view_tokens + OUTPUT_PRICE_RATIO * costs.summary_tokens


def stubbed_growth(growth: int, step: int, *, replaced: int, saved: int) -> int:
    """What `growth` tokens the history adds before an event (a background summary plans ahead of it) leave
    once that event stubs them: the newest `step` stays whole, the rest keeps what the span stubbed now keeps
    (`replaced - saved` of its `replaced` tokens)."""
    if growth <= step or replaced <= 0:
        return growth
    return step + (growth - step) * (replaced - saved) // replaced
