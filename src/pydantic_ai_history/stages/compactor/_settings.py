"""The compactor's own settings. The trigger and target are the context policy's (`ContextPolicy`), the
summarizer's model and limits are `SummarizerSettings`, and `pin` / `keep_first_user_message` are the
processor's: one home each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ...budget._policy import UNSET, ContextLimits, Unset, deprecated_setting
from ...messages._clock import monotonic

if TYPE_CHECKING:
    from ...events import CompactionResult


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    """How the compactor summarizes: summary size, transcript cuts, failure handling and fallback."""

    method: Literal['llm', 'provider', 'auto'] = 'llm'
    """Who writes the summary: `'llm'` our summarizer (cached, updated incrementally); `'provider'` the
    serving model's own compaction (`Model.compact_messages`, pydantic-ai 2.x) inside our trigger, cut, pins
    and spill, warning and using the LLM summary where it cannot; `'auto'` the same, silently. The provider's
    item is opaque to other models: use it only when a run keeps to one provider."""
    summary_max_tokens: int = 2_000
    """The cap on a summary; a longer summarizer answer counts as a failure (and the fallback is used)."""
    keep_recent_tokens: int | None = None
    """The verbatim tail an event keeps at the trigger (the last unit always); None: an eighth of the target.
    A small tail makes the event deep, the next one further away. `compact()` keeps what the target allows."""
    stub_tool_results: bool = True
    """The cheap tier at the trigger: older tool outputs and files are stored and stubbed for `read_artifact`;
    when that fits the target, no summarizer call. Needs a store; False summarizes directly."""
    cached_input_ratio: float = 0.1
    """A cached input token's price over an uncached one's (0.1 Anthropic/recent OpenAI, 0.5 gpt-4o): decides
    whether stubs alone or a summary ends an event; 1 never prefers stubs for cost."""
    stub_min_tokens: int | None = None
    """Deprecated: follows `ContextPolicy.item_tokens` (60% of it, 300 by default: only tool outputs and files
    costing at least that become stubs); a value given here is honoured."""
    stub_head_chars: int = 160
    """How much of a stubbed output's beginning its stub shows (0: none)."""
    tool_result_max_tokens: int | Unset | None = UNSET
    """Deprecated: follows `ContextPolicy.item_tokens` (twice it, 1,000 by default: tool results and arguments
    over that reach the summarizer as their beginning and most relevant passages; the stored transcript keeps
    them whole); a value given here (None: everything) is honoured."""
    summarizer_view_tokens: int | None = 12_000
    """The summarizer's whole view of what it replaces: results are cut further (to 100 tokens each) until it
    fits; user and assistant messages stay whole. None: only the per-result cut."""
    trail_share: float = 0.1
    """The share of the target for the summary's trail: exact details (constraints, paths, ids, amounts)
    written by code beside the prose and carried across compactions. 0 writes none."""
    task_max_tokens: int = 4_000
    """The original task (first user message) is cut to this in the summarizer's prompt."""
    max_failures: int = 3
    """Consecutive failures per scope before the cool-down (the provider's compaction counts its own)."""
    cooldown_seconds: float = 300.0
    """How long the summarizer is not called after `max_failures` failures; the fallback is used meanwhile."""
    fallback: Literal['digest', 'truncate'] = 'digest'
    """The stand-in for a failed summary: 'digest' (user messages, tool calls and outcomes, errors, last
    assistant text) or 'truncate' (head 25% / tail 75% of the transcript at unit boundaries)."""
    cache_ttl: float | None = None
    """Seconds summaries and prefix records live in the cache; None keeps them until evicted."""
    background_start: float | None = 0.4
    """Start the next event's summary in the background, at the earliest past this fraction of the trigger
    (0.4 by default: at 40%), so the crossing request need not wait; used only while the history extends its
    snapshot and the result fits. None: the summary is made at the trigger, that request waiting for it. The
    start waits until, at the run's growth, the summary is needed within the requests a summary takes (learned
    from those made; three, aimed at the trigger, before any), so a run that ends far from its trigger pays
    for none (`BackgroundSummaryStarted.reason`), and none starts for an event that will end with stubs alone.
    While it is made, requests past the trigger go out as they are (never past the budget). Needs the
    processor as a capability; made at the trigger in durable workflow code and for 'provider'."""
    max_background_summaries: int = 64
    """At most this many runs hold a background summary (one each): past it a run starts none, and its event
    summarizes when it comes, as without `background_start`; a run's summary is never cancelled for another's
    (each ends with its event or its run)."""
    recall_chars: int = 0
    """Off by default (0). Above 0: when a run starts with a new user question and earlier content was
    replaced (a summary, window note or stub of ours stands before it), the stored passages that best match
    the question, at most this many characters (4,000 is about 1,000 tokens), are put in the question's
    request, before it, so a model that does not call `read_artifact` still sees what the question is about.
    Only that request changes (it was never sent: no cached prefix is rewritten), only within the room below
    the trigger, once per question; nothing is added when nothing stored matches. This changes a history that
    fits: that request carries the passages from then on."""
    on_compaction: Callable[[CompactionResult], None] | None = None
    """Called with every `CompactionResult` (also emitted as an event to `on_event`)."""
    clock: Callable[[], float] = field(default=monotonic, compare=False)
    """Monotonic seconds, for the cool-down (injectable for tests)."""

    def __post_init__(self) -> None:
        if self.stub_min_tokens is not None:
            deprecated_setting('CompactionSettings.stub_min_tokens', 'ContextPolicy(item_tokens=...)')
        if self.tool_result_max_tokens is not UNSET:
            deprecated_setting('CompactionSettings.tool_result_max_tokens', 'ContextPolicy(item_tokens=...)')
        positive = (
            'summary_max_tokens',
            'tool_result_max_tokens',
            'task_max_tokens',
            'max_failures',
            'keep_recent_tokens',
            'summarizer_view_tokens',
            'max_background_summaries',
        )
        start, ttl = self.background_start, self.cache_ttl
        rules = (
            *((name, 'must be positive', _positive(getattr(self, name))) for name in positive),
            ('stub_min_tokens', 'must not be negative', (self.stub_min_tokens or 0) >= 0),
            ('stub_head_chars', 'must not be negative', self.stub_head_chars >= 0),
            ('recall_chars', 'must not be negative', self.recall_chars >= 0),
            ('cached_input_ratio', 'must be in (0, 1]', 0 < self.cached_input_ratio <= 1),
            ('background_start', 'must be in (0, 1) or None', start is None or 0 < start < 1),
            ('trail_share', 'must be in [0, 1)', 0 <= self.trail_share < 1),
            ('cooldown_seconds', 'must not be negative', self.cooldown_seconds >= 0),
            ('cache_ttl', 'must be positive or None', ttl is None or ttl > 0),
            ('method', "must be 'llm', 'provider' or 'auto'", self.method in ('llm', 'provider', 'auto')),
            ('fallback', "must be 'digest' or 'truncate'", self.fallback in ('digest', 'truncate')),
        )
        for name, rule, valid in rules:
            if not valid:
                raise ValueError(f'CompactionSettings.{name} {rule}, got {getattr(self, name)!r}')

    def stub_least(self, limits: ContextLimits) -> int:
        """The least a tool output or file must cost to become a stub at an event."""
        return self.stub_min_tokens if self.stub_min_tokens is not None else limits.sizes.least_view

    def result_view(self, limits: ContextLimits) -> int | None:
        """What each tool result shows the summarizer (None: whole)."""
        given = self.tool_result_max_tokens
        return limits.sizes.summarizer_view if given is UNSET else given


def _positive(value: object) -> bool:
    return not isinstance(value, (int, float)) or value > 0
