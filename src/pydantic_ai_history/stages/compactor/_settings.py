"""The compactor's own settings. The trigger and target are the context policy's (`ContextPolicy`), the
summarizer's model and limits are `SummarizerSettings`, and `pin` / `keep_first_user_message` are the
processor's: one home each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ...pipeline._clock import monotonic

if TYPE_CHECKING:
    from ...events import CompactionResult

__all__ = ('CompactionSettings',)


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    """How the compactor summarizes: summary size, transcript cuts, failure handling and fallback."""

    method: Literal['llm', 'provider', 'auto'] = 'llm'
    """Who writes the summary of the evicted messages:

    - `'llm'` (default): our summarizer (`SummarizerSettings.model`, else the run's model), structured and
      updated incrementally; cached, and reused when an app reloads an uncompacted history.
    - `'provider'`: the serving model compacts natively (`Model.compact_messages` on pydantic-ai 2.x: OpenAI
      Responses compaction, Anthropic on-demand compaction), with our trigger, target, cut, pins, kept first
      user message and transcript spill around it. Its compaction item sits in the history as a
      `ModelResponse`; the kept first user message and the pinned section follow it (the provider's adapter
      sends nothing before it but the system prompt). Where the model cannot (no `compact_messages`,
      pydantic-ai 1.x), the LLM summary is used with a `provider_compaction_unsupported` warning; where the
      call fails, the LLM summary, then the `fallback`, with `provider_compaction_failed`.
    - `'auto'`: as `'provider'` where the serving model compacts natively, silently the LLM summary elsewhere.

    The compaction item is opaque to every other model: use `'provider'`/`'auto'` only when the run keeps to
    one provider. A durable run asks through its durable model (a journaled `compact_messages` operation)."""
    summary_max_tokens: int = 2_000
    """The cap on a summary; a longer summarizer answer counts as a failure (and the fallback is used)."""
    keep_recent_tokens: int | None = None
    """The verbatim tail a compaction event keeps at the trigger: the newest units within this many tokens
    (the last unit always). Before it, tool outputs become stubs and, when that is not enough, messages are
    summarized. None: an eighth of the target. A small tail makes the event deep: every request until the
    next event reads a smaller cached prefix, and the next event is further away. `compact()` (on demand)
    keeps as much as the target allows instead."""
    stub_tool_results: bool = True
    """The cheap tier of a compaction event at the trigger: tool outputs and attached files older than the
    verbatim tail are stored and replaced by stubs that name them for `read_artifact` (exact read-back), the
    same content stored once. When the stubbed history fits the target, the summarizer is not called at
    all. Needs a store; False summarizes directly."""
    cached_input_ratio: float = 0.1
    """A cached input token's price over an uncached one's (Anthropic and recent OpenAI models: 0.1; gpt-4o
    0.5). It decides how deep an event goes: stubs alone end it when carrying what they leave beyond a
    summary, read from the cache by every request until the next event, costs less than the summarizer's call
    (`_depth`); a higher ratio makes summaries worth their call sooner. 1 never prefers stubs for cost."""
    stub_min_tokens: int = 300
    """Only tool outputs and files costing at least this many tokens become stubs (a stub costs ~80)."""
    stub_head_chars: int = 160
    """How much of a stubbed output's beginning its stub shows (0: none)."""
    tool_result_max_tokens: int | None = 1_000
    """The summarizer's view: each tool result and tool-call argument larger than this is shown as its
    beginning and the passages most relevant to the task and the focus, within this many tokens. The stored
    transcript keeps everything, so `read_artifact` returns it whole; the summarizer reads what the summary
    needs. None shows everything (a transcript over the summarizer's input cap then goes in several calls)."""
    summarizer_view_tokens: int | None = 12_000
    """The summarizer's whole view of what it replaces (the original task and the previous summary come on
    top): tool results are cut further, down to 100 tokens each, until it fits. User and assistant messages
    are always shown whole. None: no bound but the per-result cut."""
    trail_share: float = 0.1
    """The share of the target the summary's trail may take: the exact details (user constraints, paths,
    commands, errors, identifiers, amounts) of the summarized messages, written beside the summarizer's prose
    by code, carried forward and pruned across compactions. 0 writes none."""
    task_max_tokens: int = 4_000
    """The original task (first user message) is cut to this in the summarizer's prompt."""
    max_failures: int = 3
    """Consecutive summarizer failures (per scope) before the cool-down; the provider's compaction calls
    (`method='provider'`/`'auto'`) have a cool-down of their own, after as many failures."""
    cooldown_seconds: float = 300.0
    """How long the summarizer is not called after `max_failures` failures; the fallback is used meanwhile."""
    fallback: Literal['digest', 'truncate'] = 'digest'
    """The deterministic stand-in for a failed summary: 'digest' (user messages, tool calls and outcomes,
    errors, last assistant text; the head/tail cut if the digest fails) or 'truncate' (the head 25% / tail
    75% cut of the transcript, at unit boundaries)."""
    cache_ttl: float | None = None
    """Seconds summaries and prefix records live in the cache; None keeps them until evicted."""
    background_start: float | None = None
    """Start the next event's summary in the background once the history passes this fraction of the trigger
    (0.6: at 60%), so the request that crosses the trigger does not wait for the summarizer. None (default):
    every summary is made when the event needs it.

    The summary is made on a snapshot of the history (the same messages a blocking compaction would summarize
    for the same cut, so it is the same summary), off the request path, and used at the trigger while the
    history still extends the snapshot and what it leaves verbatim (its cut and everything added since) fits
    the target; otherwise it is thrown away and the event compacts as without it (events say which, and why).
    A request past the trigger while the summary is still being made goes out as it is when it fits the budget
    (the trigger sits below it): the event comes at the first request after the summary is ready, and waits
    for it only when the request would not fit otherwise.
    Only an event the cost rule (`cached_input_ratio`) expects to summarize starts one: stubs cost no model
    call. The earlier it starts, the more time the summarizer has, and the more the event leaves verbatim
    (the messages added after the snapshot): the next event comes sooner.

    Needs the processor as a capability (`Agent(capabilities=[processor])`, pydantic-ai 1.x late and 2.x),
    whose run hook cancels the work when the run ends; as a plain history processor, and in durable workflow
    code (Temporal, DBOS, Prefect), which may not start background work, the summary is made at the trigger,
    as one journaled operation. `method='provider'`/`'auto'` compactions are never started ahead."""
    max_background_summaries: int = 64
    """At most this many runs hold a background summary at a time (each holds a reference to its history and
    one summarizer call); starting one more cancels the oldest (`capacity`)."""
    on_compaction: Callable[[CompactionResult], None] | None = None
    """Called with every `CompactionResult` (also emitted as an event to `on_event`)."""
    clock: Callable[[], float] = field(default=monotonic, compare=False)
    """Monotonic seconds, for the cool-down (injectable for tests)."""

    def __post_init__(self) -> None:
        names = (
            'summary_max_tokens',
            'tool_result_max_tokens',
            'task_max_tokens',
            'max_failures',
            'keep_recent_tokens',
            'summarizer_view_tokens',
            'max_background_summaries',
        )
        for name in names:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f'CompactionSettings.{name} must be positive, got {value!r}')
        if self.stub_min_tokens < 0 or self.stub_head_chars < 0:
            raise ValueError('CompactionSettings.stub_min_tokens and stub_head_chars must not be negative')
        if not 0 < self.cached_input_ratio <= 1:
            raise ValueError(
                f'CompactionSettings.cached_input_ratio must be in (0, 1], got {self.cached_input_ratio!r}'
            )
        if self.background_start is not None and not 0 < self.background_start < 1:
            raise ValueError(
                'CompactionSettings.background_start must be in (0, 1) or None, '
                f'got {self.background_start!r}'
            )
        if not 0 <= self.trail_share < 1:
            raise ValueError(f'CompactionSettings.trail_share must be in [0, 1), got {self.trail_share!r}')
        if self.cooldown_seconds < 0:
            raise ValueError(
                f'CompactionSettings.cooldown_seconds must not be negative, got {self.cooldown_seconds!r}'
            )
        if self.cache_ttl is not None and self.cache_ttl <= 0:
            raise ValueError(f'CompactionSettings.cache_ttl must be positive or None, got {self.cache_ttl!r}')
        if self.method not in ('llm', 'provider', 'auto'):
            raise ValueError(
                f"CompactionSettings.method must be 'llm', 'provider' or 'auto', got {self.method!r}"
            )
        if self.fallback not in ('digest', 'truncate'):
            raise ValueError(
                f"CompactionSettings.fallback must be 'digest' or 'truncate', got {self.fallback!r}"
            )
