"""The near-limit notice: a system prompt for one request, telling the model its history nears its limit.

It carries the figures and, when offered, says `compact_context` may be called. It never disturbs the cached
prefix: on 2.x a request-scoped `SystemPromptPart`, sent last and left out of
later requests; on late 1.x added to the outgoing copy only; none on 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class NearLimitNotice:
    """When to tell the model its history nears its limit (`HistoryProcessor(near_limit_notice=...)`; off by
    default)."""

    start: float = 0.85
    """Send the notice once the processed history passes this fraction of its limit (the compaction trigger;
    the budget when nothing compacts). Each costs its own tokens (about 50), uncached."""
    every: float = 0.05
    """Send it again each time the history has grown by this fraction of the limit since the last one (not
    with every request: a prompt cache cannot reuse a write that ends in a notice)."""

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
