"""The near-limit notice: a system prompt for one request, telling the model its history nears its limit.

Off by default (`HistoryProcessor(near_limit_notice=True)` or `NearLimitNotice(...)`): a run that does not
enable it sends the same prompts as before. Once the processed history passes `start` of its limit (the
compaction trigger, where older messages are summarized; the budget, where the window drops them, when
nothing compacts), a request carries a short notice with the figures, and, when the `compact_context` tool
is offered, says the model may call it at a natural break. It is sent when the history passes `start`, and
again each time it has grown by `every` of the limit since (not with every request: a prompt cache keyed by
breakpoints, such as Anthropic's with a model that has no request-scoped system prompts, writes the request
with its notice and cannot reuse that write for the next request, which leaves the notice out).

It never disturbs the cached prefix. On pydantic-ai 2.x it is a request-scoped `SystemPromptPart` enqueued
from the request hook (pydantic-ai's way for per-request nudges): it is sent last in its request, and later
requests leave it out (or the provider clears it), so the prefix they share with this one ends where the
notice began, which is where new content starts anyway. Where system prompts have no scope (late 1.x), it is
added to the outgoing copy of the request only, at its end, never to the history. pydantic-ai 1.0 has no
request hook: there is no notice.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ('NearLimitNotice', 'notice_text')


@dataclass(frozen=True, kw_only=True)
class NearLimitNotice:
    """When to tell the model its history nears its limit (`HistoryProcessor(near_limit_notice=...)`)."""

    start: float = 0.85
    """Send the notice once the processed history passes this fraction of its limit (the compaction trigger;
    the budget when nothing compacts). Each costs its own tokens (about 50), uncached."""
    every: float = 0.05
    """Send it again each time the history has grown by this fraction of the limit since the last one."""

    def __post_init__(self) -> None:
        if not 0 < self.start <= 1:
            raise ValueError(f'NearLimitNotice.start must be in (0, 1], got {self.start!r}')
        if not 0 < self.every <= 1:
            raise ValueError(f'NearLimitNotice.every must be in (0, 1], got {self.every!r}')

    def band(self, tokens: int, limit: int) -> int | None:
        """How many `every` steps past `start` a history of `tokens` is (0 from `start` on); None below
        `start`. A notice goes with the first request of each band."""
        if limit <= 0 or tokens <= limit * self.start:
            return None
        return int((tokens / limit - self.start) / self.every)


def notice_text(tokens: int, limit: int, *, compacts: bool, tool: str | None) -> str:
    """The notice's wording: where the history is, what happens at the limit, and what the model can do."""
    share = min(tokens / limit, 9.99)
    where = f'{tokens:,} of {limit:,} tokens ({share:.0%})'
    if compacts:
        what = f'Context: {where} before older messages are summarized.'
        act = (
            f' At a natural break in the task, you may call {tool}(focus=...) to compact now.'
            if tool
            else ' Keep exact ids, paths and figures you still need in your next messages.'
        )
    else:
        what = f'Context: {where} of the budget; beyond it the oldest messages are dropped.'
        act = ' Finish the current step with few, small tool calls.'
    return what + act
