"""The context policy: one home for the window, utilization, reserve, budget, trigger and target.

The processor resolves it once per request into `ContextLimits` and hands the same limits to every stage, so
no stage can disagree with another about when to compact or how much fits.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, field, fields
from typing import Final

from .model_info import ContextWindowUnknownError, ModelInfo


class ContextPolicyError(ValueError):
    """A `ContextPolicy` that cannot work with the serving model's window (the message names the field and the
    numbers). Raised at construction when the processor is given its `model`, else at the model's first
    request: the run fails rather than sending requests no setting can fit."""


DEFAULT_MAX_TOKENS = 120_000
"""The compaction trigger when neither `max_tokens` nor a smaller window decides it."""
DEFAULT_TARGET_TOKENS = 40_000
"""The size after compaction, at most; a third of a lower trigger."""
DEFAULT_RESERVE_TOKENS = 1_024
"""Room kept for the answer when the model's own output cap is unknown (or the window was set by hand)."""
DEFAULT_FALLBACK_CONTEXT_WINDOW = 128_000
"""The window assumed for a model nobody knows (a local Ollama model, a new id): the size most models served
today accept. A `HistoryWarning` (`context_window_fallback`) says so on the first request of each model."""
TRIGGER_FRACTION_OF_BUDGET = 0.8
"""Without `max_tokens`, compaction starts at 80% of the budget (the input room: the usable window less the
answer's reserve) when that is below 120,000: the rest is the room a new tool output needs before the event
makes more, and every request until then reads the history from the cache (what lower triggers save)."""
TARGET_FRACTION_OF_TRIGGER = 1 / 3


class Unset(enum.Enum):
    """A setting left out, where None is a value of its own."""

    UNSET = 'unset'


UNSET: Final = Unset.UNSET
_warned: set[str] = set()


def deprecated_setting(name: str, home: str) -> None:
    """Say once per process that `name` is deprecated, naming its `home`."""
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f'{name} is deprecated: write {home}', DeprecationWarning, stacklevel=4)


DEFAULT_ITEM_TOKENS = 250
"""What one large item keeps in context (every token kept is re-read by every later request): about 1,000
characters of English, what pydantic-ai-harness's spill leaves of an output (its preview), here the passages
most relevant to the call."""
DEFAULT_LARGE_ITEM_TOKENS = 1_000
"""Over this an item is large: about 4,000 characters of English, where pydantic-ai-harness's spill rule
starts. Reduced when it arrives, a large item costs its short view on every later request instead of its
whole text (its original is one `read_artifact` away). Both sizes are the spill rule's, in tokens, not tuned
on either of the cost benchmark's loops; measured on both (benchmarks/RESULTS.md, "Cost (issue 37)")."""


SUMMARIZER_VIEW_TOKENS = 1_000
"""The least of each tool output the summarizer sees: on the eval's 17 sessions a view of 1,000 tokens a
result still shows 87.8% of the facts of the whole, 600 tokens 82.7% (benchmarks/RESULTS.md, issue 27)."""


@dataclass(frozen=True)
class ItemSizes:
    """The two size settings every stage reads (`ContextPolicy.item_tokens`, `.large_item_tokens`) and the
    thresholds that follow from them."""

    keep: int | None = DEFAULT_ITEM_TOKENS
    """What one large item keeps in context beside the note naming its stored original; None: what the budget
    has left."""
    large: int = DEFAULT_LARGE_ITEM_TOKENS
    """Over this many tokens an item is large: reduced when it arrives."""

    @property
    def least_view(self) -> int:
        """The least a reduced item shows (less is a stub), and the least a tool output must cost to become a
        stub at a compaction event: 60% of `keep` (150 by default)."""
        return max(int((self.keep if self.keep is not None else DEFAULT_ITEM_TOKENS) * 0.6), 1)

    @property
    def worth_planning(self) -> int:
        """Items totalling less than this are not planned at all: half of `large`."""
        return max(self.large // 2, 1)

    @property
    def summarizer_view(self) -> int | None:
        """What each tool output shows the summarizer: twice `keep`, at least `SUMMARIZER_VIEW_TOKENS`; None:
        whole. Read once per event, not by every request: a smaller view would save little and lose facts."""
        return None if self.keep is None else max(2 * self.keep, SUMMARIZER_VIEW_TOKENS)

    def view_cap(self, tokens: int) -> int:
        """What one large item of `tokens` may keep of them."""
        return tokens if self.keep is None else min(tokens, self.keep)


@dataclass(frozen=True, kw_only=True)
class ContextLimits:
    """The policy resolved for one model: what every stage plans against on one request."""

    model_name: str | None
    """The serving model's `provider:model` name, when known."""
    model_window: int
    """The model's whole context window (from `window_source`)."""
    window_source: str
    """Where the window came from: 'override', 'server' (the local server serving the model said so),
    'profile', 'genai-prices', 'table' or 'fallback'."""
    context_window: int
    """The part of the window the processor may use: `model_window * utilization`."""
    reserve_tokens: int
    """Tokens kept free for the model's answer."""
    budget: int
    """The hard limit for the history sent (instructions, tools and messages): the sliding window's budget."""
    trigger: int
    """Compact when the history's estimate exceeds this."""
    target: int
    """The history's size after a compaction (head, summary and verbatim tail)."""
    adjustments: tuple[str, ...] = field(default=(), compare=False)
    """What the policy had to change to fit this model, one sentence per field naming the value given and
    the value used (e.g. a `max_tokens` above the budget); the processor warns once per model with each."""
    sizes: ItemSizes = field(default_factory=ItemSizes)
    """What one large item keeps and what counts as large (`ContextPolicy.item_tokens`,
    `.large_item_tokens`)."""

    @classmethod
    def fixed(
        cls,
        *,
        budget: int,
        trigger: int | None = None,
        target: int | None = None,
        context_window: int | None = None,
        model_name: str | None = None,
    ) -> ContextLimits:
        """Limits given outright (custom stages, tests): the trigger defaults to the budget, the target to a
        third of the trigger."""
        trigger = min(trigger if trigger is not None else budget, budget)
        target = target if target is not None and target < trigger else max(int(trigger / 3), 1)
        window = context_window if context_window is not None else budget
        return cls(
            model_name=model_name,
            model_window=window,
            window_source='override',
            context_window=window,
            reserve_tokens=max(window - budget, 0),
            budget=budget,
            trigger=trigger,
            target=target,
        )


@dataclass(frozen=True, kw_only=True)
class ContextPolicy:
    """How much of the model's context window the history may use, and when and how far to compact.

    Every default follows the serving model (its window and output cap), so one policy serves an agent whose
    model changes between requests.

    Example:
        ```python
        from pydantic_ai_history import ContextPolicy
        from pydantic_ai_history.budget.model_info import model_info

        # a third of an expensive model's window, compaction at 40,000 tokens down to 15,000
        policy = ContextPolicy(utilization=0.33, max_tokens=40_000, target_tokens=15_000)
        limits = policy.resolve(model_info('openai:gpt-4o'))  # what every stage plans against
        ```
    """

    context_window: int | None = None
    """The model's context window in tokens. Default: the model profile (pydantic-ai 2.x), genai-prices, the
    built-in table (`model_info.KNOWN_CONTEXT_WINDOWS`), then `fallback_context_window`."""
    utilization: float = 1.0
    """The fraction of the window the processor may use, in (0, 1]: 0.33 keeps requests to an expensive model
    cheap. The budget, trigger and target all follow the reduced window."""
    reserve_tokens: int | None = None
    """Tokens kept free for the answer. Default: the model's maximum output where the built-in table knows it
    and the window was not set by hand (gpt-5: 128,000, so 272,000 of its 400,000 are input), else 1,024."""
    budget_tokens: int | None = None
    """The hard limit for the history sent. Default: the usable window minus the reserve."""
    max_tokens: int | None = None
    """The compaction trigger. Default: 120,000, or 80% of the budget when that is smaller; never above the
    budget."""
    target_tokens: int | None = None
    """The history's size after a compaction. Default: a third of the trigger, at most 40,000; also for a
    target not below the trigger, which would compact again on every request."""
    fallback_context_window: int = DEFAULT_FALLBACK_CONTEXT_WINDOW
    """The window assumed for an unknown model (128,000), with a `context_window_fallback` warning."""
    strict: bool = False
    """Raise `ContextWindowUnknownError` for an unknown model instead of assuming `fallback_context_window`:
    at construction when the processor is given its model, else at the model's first request."""
    item_tokens: int | None = DEFAULT_ITEM_TOKENS
    """What one large item (a tool output, a document) keeps in context beside the note naming its stored
    original, decided when it arrives: every token kept is re-read by every later request. At a compaction
    event a tool output over 60% of it becomes a stub. None: whatever the budget has left."""
    large_item_tokens: int = DEFAULT_LARGE_ITEM_TOKENS
    """Over this many tokens an item is large and reduced when it arrives; smaller ones stay whole until a
    compaction event (or until the request cannot carry them)."""

    def __post_init__(self) -> None:
        # Wrong types fail with the field's name (a YAML spec's `'10000'`), not as a bare `TypeError` later.
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(
                    f'ContextPolicy.{name} must be a whole number of tokens (int), got '
                    f'{type(value).__name__} {value!r}'
                )
            if name == 'reserve_tokens' and value < 0:
                raise ValueError(f'ContextPolicy.reserve_tokens must not be negative, got {value!r}')
            if name != 'reserve_tokens' and value <= 0:
                raise ValueError(f'ContextPolicy.{name} must be positive, got {value!r}')
        utilization = self.utilization
        if isinstance(utilization, bool) or not isinstance(utilization, (int, float)):
            raise TypeError(
                f'ContextPolicy.utilization must be a number in (0, 1], got '
                f'{type(utilization).__name__} {utilization!r}'
            )
        if not 0 < utilization <= 1:
            raise ValueError(f'ContextPolicy.utilization must be in (0, 1], got {utilization!r}')
        if not isinstance(self.strict, bool):
            raise TypeError(f'ContextPolicy.strict must be True or False, got {type(self.strict).__name__}')
        if (
            self.max_tokens is not None
            and self.target_tokens is not None
            and self.target_tokens >= self.max_tokens
        ):
            raise ValueError(
                f'ContextPolicy.target_tokens ({self.target_tokens:,}) must be below '
                f'max_tokens ({self.max_tokens:,})'
            )

    def resolve(self, info: ModelInfo) -> ContextLimits:
        """The limits for one model. Raises `ContextWindowUnknownError` when `strict` and nothing knows the
        window, `ContextPolicyError` when the settings leave no room; a value that must be clamped (a trigger
        above the budget, a target not below the trigger) is said in `ContextLimits.adjustments`.
        """
        model_window, source = self._window(info)
        window = max(int(model_window * self.utilization), 1)
        reserve = self._reserve(info, model_window, source)
        where = _where(info, model_window, source)
        budget = self._budget(window, model_window, reserve, where)
        adjustments: list[str] = []
        trigger = self.max_tokens
        if trigger is None:
            trigger = min(DEFAULT_MAX_TOKENS, int(budget * TRIGGER_FRACTION_OF_BUDGET))
        elif trigger > budget:
            adjustments.append(
                f'ContextPolicy.max_tokens={trigger:,} is above the budget of {budget:,} tokens {where}, so '
                f'compaction would never start: using max_tokens={budget:,}'
            )
            trigger = budget
        trigger = max(trigger, 2)
        default_target = min(DEFAULT_TARGET_TOKENS, int(trigger * TARGET_FRACTION_OF_TRIGGER))
        target = self.target_tokens
        if target is None:
            target = default_target
        elif target >= trigger:
            adjustments.append(
                f'ContextPolicy.target_tokens={target:,} is not below the compaction trigger of {trigger:,} '
                f'tokens {where}, so every request would compact again: using target_tokens='
                f'{max(min(default_target, trigger - 1), 1):,}'
            )
            target = default_target
        return ContextLimits(
            model_name=info.name,
            model_window=model_window,
            window_source=source,
            context_window=window,
            reserve_tokens=reserve,
            budget=budget,
            trigger=trigger,
            target=max(min(target, trigger - 1), 1),
            adjustments=tuple(adjustments),
            sizes=ItemSizes(self.item_tokens, self.large_item_tokens),
        )

    def _budget(self, window: int, model_window: int, reserve: int, where: str) -> int:
        """The hard limit for the history; `ContextPolicyError` when the settings leave it no room."""
        if self.reserve_tokens is not None and self.reserve_tokens >= model_window:
            raise ContextPolicyError(
                f'ContextPolicy.reserve_tokens={self.reserve_tokens:,} leaves no room for the history '
                f"{where}: keep it well below {model_window:,} (the model's output cap, or leave it unset)"
            )
        if self.budget_tokens is None:
            return max(min(window, model_window - reserve), 1)
        if self.budget_tokens > window:
            raise ContextPolicyError(
                f'ContextPolicy.budget_tokens={self.budget_tokens:,} is above the usable window of '
                f'{window:,} tokens {where}: every request that used it would be rejected. Lower it or leave '
                'it unset.'
            )
        if self.reserve_tokens is not None and self.budget_tokens + self.reserve_tokens > model_window:
            raise ContextPolicyError(
                f'ContextPolicy.budget_tokens={self.budget_tokens:,} and reserve_tokens='
                f'{self.reserve_tokens:,} add up to more than the {model_window:,}-token window {where}: '
                'lower one of them.'
            )
        return self.budget_tokens

    def _window(self, info: ModelInfo) -> tuple[int, str]:
        if self.context_window is not None:
            return self.context_window, 'override'
        if info.context_window is not None:
            return info.context_window, info.source
        if self.strict:
            raise ContextWindowUnknownError(info.name)
        return self.fallback_context_window, 'fallback'

    def _reserve(self, info: ModelInfo, model_window: int, source: str) -> int:
        if self.reserve_tokens is not None:
            return self.reserve_tokens
        output = info.max_output_tokens
        # A window set by hand is the input room the user means; the model's output cap is only trusted
        # beside a window from the same model's metadata.
        if output is not None and source not in ('override', 'fallback') and output < model_window // 2:
            return output
        return DEFAULT_RESERVE_TOKENS


def _where(info: ModelInfo, model_window: int, source: str) -> str:
    """The model and its window, for messages: `for 'openai:gpt-4o' (128,000-token window, genai-prices)`."""
    name = repr(info.name) if info.name else 'the model'
    origin = 'assumed' if source == 'fallback' else source
    return f'for {name} ({model_window:,}-token window, {origin})'


_INT_FIELDS = tuple(f.name for f in fields(ContextPolicy) if f.type in ('int', 'int | None'))
"""The settings in tokens (whole numbers), checked in `ContextPolicy.__post_init__`."""
