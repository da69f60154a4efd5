"""One LLM sub-call of a stage under a timeout, its usage added to the run's usage (best effort).

Text answers use pydantic-ai's direct model request: an `Agent` run checks every prompt for look-alike
framing tags, which on a 300 KB transcript costs about ten times the request; a structured answer (the
artifact plan) needs the `Agent`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._compat import instrumentation_of, instrumented_agent_options, result_usage
from ..budget.model_info import model_name_of, thinks_by_default
from ..messages._clock import perf

if TYPE_CHECKING:
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.settings import ModelSettings

    from ..files import FileResult, FileSettings
    from ..tokens import TokenizerProfile
    from ._artifact_models import ArtifactPlan
    from ._context import HistoryContext, StageOperations
    from ._summarizer_settings import ModelRef, SummarizerSettings, TextPurpose, Timeout


logger = logging.getLogger('pydantic_ai_history.stages')

AUTO_TIMEOUT_BASE_SECONDS = 60.0
"""`SummarizerSettings.timeout='auto'`: the fixed part (connection, queueing, a slow first token)."""
AUTO_TIMEOUT_MARGIN = 3.0
"""`'auto'`: the request may take this many times what the model's measured speed predicts."""
DEFAULT_CHARS_PER_SECOND = 4_000.0
"""`'auto'`: the speed assumed before a call to the model has been timed (about 1,000 tokens a second of
prompt, slow for a hosted model, so a first long request is not cut short)."""
LOCAL_PROMPT_CHARS_PER_SECOND = 100.0
"""`'auto'` on a local server: the prompt is read at this speed (about 25 tokens a second, a small CPU's)."""
LOCAL_ANSWER_TOKENS_PER_SECOND = 2.0
"""`'auto'` on a local server: the answer's `max_tokens` are written at this speed (a large model, a CPU)."""
ANSWER_HEADROOM = 1.5
"""A text request's `max_tokens` over the answer's cap (see `answer_max_tokens`)."""
ANSWER_HEADROOM_TOKENS = 256
"""Added to that: a short answer's closing line, a tokenizer that counts more than ours."""
THINKING_ALLOWANCE_TOKENS = 16_384
"""Added to a text request's `max_tokens` when the model thinks (its profile says so, or the settings turn
thinking on without a budget): thinking counts in `max_tokens` (OpenAI's reasoning models, Anthropic's)."""
_THINKING_LEVEL_TOKENS = {'xhigh': 32_768, 'max': 32_768}
"""Levels of pydantic-ai's `thinking` setting whose budget is larger (its Anthropic budgets: 32,768)."""
_THINKING_SETTINGS = ('thinking', 'openai_reasoning_effort', 'anthropic_thinking', 'google_thinking_config')

_SPEEDS: dict[str, float] = {}
"""Characters per second each model (by name) took over whole calls (prompt and answer), for `'auto'`."""


class AnswerCutError(Exception):
    """The model stopped at the request's `max_tokens` before its answer ended (`finish_reason='length'`)."""


def answer_max_tokens(cap: int) -> int:
    """The `max_tokens` a request for an answer of at most `cap` tokens sends: half as much again plus 256, so
    an answer within its cap by our count is not cut by the model's, and one that runs away ends soon after
    (a longer answer fails its cap anyway). A model's thinking is added on top (`thinking_tokens`)."""
    return int(cap * ANSWER_HEADROOM) + ANSWER_HEADROOM_TOKENS


def given_max_tokens(model_settings: ModelSettings | None, model: object) -> int | None:
    """The `max_tokens` the user gave: in the summarizer's `model_settings`, else in the model's own."""
    for settings in (model_settings, getattr(model, 'settings', None)):
        value = settings.get('max_tokens') if isinstance(settings, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def thinking_tokens(model_settings: ModelSettings | None, model: object) -> int:
    """What a request's `max_tokens` adds for the model's thinking: the budget the settings give (Anthropic's
    `budget_tokens`, Google's `thinking_budget`), else `THINKING_ALLOWANCE_TOKENS` when the settings (the
    summarizer's over the model's own) or the model's profile turn thinking on; 0 when they turn it off."""
    own = getattr(model, 'settings', None)
    settings = {**(own if isinstance(own, dict) else {}), **(model_settings or {})}
    for key in _THINKING_SETTINGS:
        if settings.get(key) is not None:
            return _thinking_budget(settings[key])
    return THINKING_ALLOWANCE_TOKENS if thinks_by_default(model) else 0


def _thinking_budget(value: object) -> int:
    """The thinking tokens one thinking setting asks for (0: it turns thinking off)."""
    if value is False or value == 'none' or (isinstance(value, dict) and value.get('type') == 'disabled'):
        return 0
    if isinstance(value, dict):
        budget = value.get('budget_tokens', value.get('thinking_budget'))
        if isinstance(budget, int) and not isinstance(budget, bool):
            return budget if budget >= 0 else THINKING_ALLOWANCE_TOKENS  # Google's -1: as much as it needs
    if isinstance(value, str):
        return _THINKING_LEVEL_TOKENS.get(value, THINKING_ALLOWANCE_TOKENS)
    return THINKING_ALLOWANCE_TOKENS


def with_max_tokens(
    model_settings: ModelSettings | None, model: object, max_tokens: int | None
) -> ModelSettings | None:
    """The settings a text request sends: `model_settings` with `max_tokens` (plus `thinking_tokens`) added,
    unless the user gave one (`given_max_tokens`: theirs wins) or there is none to add."""
    if max_tokens is None or given_max_tokens(model_settings, model) is not None:
        return model_settings
    from pydantic_ai.settings import ModelSettings, merge_model_settings

    budget = max_tokens + thinking_tokens(model_settings, model)
    return merge_model_settings(ModelSettings(max_tokens=budget), model_settings)


def summarizer_timeout(
    setting: Timeout, model: object, chars: int, max_tokens: int | None = None
) -> float | None:
    """Seconds one call may take under `SummarizerSettings.timeout=setting` (None: no limit). `'auto'`: 60 s
    plus three times `chars` at the model's measured speed; on a local server, 60 s plus `chars` at 100
    characters a second plus `max_tokens` at 2 tokens a second (no limit when the request has none)."""
    if setting is None:
        return None
    if setting != 'auto':
        return float(setting)
    from ..budget._local_server import local_server_of  # loaded by the first LLM call, not with the stages

    if local_server_of(model) is not None:
        if max_tokens is None:
            return None
        return (
            AUTO_TIMEOUT_BASE_SECONDS
            + chars / LOCAL_PROMPT_CHARS_PER_SECOND
            + max_tokens / LOCAL_ANSWER_TOKENS_PER_SECOND
        )
    return AUTO_TIMEOUT_BASE_SECONDS + AUTO_TIMEOUT_MARGIN * chars / _speed(model)


def _speed(model: object) -> float:
    return _SPEEDS.get(model_name_of(model) or '', DEFAULT_CHARS_PER_SECOND)


def _record_speed(model: object, chars: int, seconds: float) -> None:
    """Remember how fast `model` answered a request of `chars` characters (calls too short say nothing)."""
    if seconds < 0.5 or chars < 2_000:
        return
    name = model_name_of(model) or ''
    measured = chars / seconds
    previous = _SPEEDS.get(name)
    _SPEEDS[name] = measured if previous is None else (previous + measured) / 2


def _timeout_message(
    setting: Timeout, seconds: float, model: object, chars: int, max_tokens: int | None
) -> str:
    from ..budget._local_server import local_server_of

    if setting != 'auto':
        why = repr(setting)
    elif local_server_of(model) is not None:
        prompt_speed, answer_speed = LOCAL_PROMPT_CHARS_PER_SECOND, LOCAL_ANSWER_TOKENS_PER_SECOND
        why = (
            f"'auto' on a local server: {chars:,} characters at {prompt_speed:,.0f} characters/s and up to "
            f'{max_tokens or 0:,} tokens at {answer_speed:g} tokens/s'
        )
    else:
        why = f"'auto': {chars:,} characters at {_speed(model):,.0f} characters/s"
    shown = f'{seconds:,.0f}' if seconds >= 10 else f'{seconds:.2g}'
    return (
        f'timed out after {shown} s (SummarizerSettings.timeout={why}); raise SummarizerSettings.timeout, '
        'or set it to None for no limit'
    )


def _inferred(model: Any) -> Any:
    """`model` as pydantic-ai infers it from a name (to know its server), else as given."""
    if not isinstance(model, str):
        return model
    try:
        from pydantic_ai.models import infer_model

        return infer_model(model)
    except Exception:
        return model


async def run_text(
    model: Any,
    prompt: str,
    *,
    instructions: str,
    timeout: Timeout,
    max_tokens: int | None = None,
    usage: Any = None,
    model_settings: ModelSettings | None = None,
    instrument: InstrumentationSettings | None = None,
) -> str:
    """One model request (`prompt` with `instructions`) answered in text, sending `max_tokens` unless the user
    gave one (`with_max_tokens`). Raises `TimeoutError` naming the setting when `timeout` runs out,
    `AnswerCutError` when the model stopped at its `max_tokens`, and whatever the request raises. Usage is
    added to `usage` once the model answered; `instrument`: the outer run's, so the request is a span of its
    trace."""
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart

    model = _inferred(model)
    chars = len(prompt) + len(instructions)
    settings = with_max_tokens(model_settings, model, max_tokens)
    limit = given_max_tokens(settings, model)
    seconds = summarizer_timeout(timeout, model, chars, limit)
    request = ModelRequest(parts=[UserPromptPart(content=prompt)], instructions=instructions)
    started = perf()
    try:
        with anyio.fail_after(seconds):
            response = await model_request(model, [request], model_settings=settings, instrument=instrument)
    except TimeoutError:
        raise TimeoutError(_timeout_message(timeout, seconds or 0.0, model, chars, limit)) from None
    _record_speed(model, chars, perf() - started)
    add_usage(usage, response.usage, requests=1)
    if getattr(response, 'finish_reason', None) == 'length':  # pydantic-ai 1.0 has no finish_reason
        raise AnswerCutError(
            f'the answer was cut at max_tokens={limit if limit is not None else "?"} before it ended; '
            "SummarizerSettings(model_settings={'max_tokens': ...}) allows a longer one"
        )
    return ''.join(p.content for p in response.parts if isinstance(p, TextPart))


def add_usage(usage: Any, extra: Any, *, requests: int = 0) -> None:
    """Add a sub-call's usage to the outer run's `RunUsage` where it has `incr` (`requests`: the model
    requests a `RequestUsage` stands for)."""
    if usage is None or not hasattr(usage, 'incr'):
        return
    try:
        usage.incr(extra)
        if requests:
            usage.requests += requests
    except Exception:  # a usage object of another shape: accounting is best effort, the stage goes on
        logger.debug('could not add a sub-call usage to the run usage', exc_info=True)


def call_options(usage: Any, summarizer: SummarizerSettings, run_context: Any) -> dict[str, Any]:
    """What every LLM call of the stages takes from its run, in place or as a durable operation: the run's
    usage, the summarizer's model settings and the run's instrumentation (so the call is a span of the run's
    trace and honours its `include_content`)."""
    return {
        'usage': usage,
        'model_settings': summarizer.model_settings,
        'instrument': instrumentation_of(run_context),
    }


@dataclass
class InlineOperations:
    """A stage's side effects run in place with the models the stage resolved: for a stage used on its own."""

    context: HistoryContext

    async def request_text(
        self,
        purpose: TextPurpose,
        prompt: str,
        *,
        model: ModelRef,
        instructions: str,
        timeout: Timeout,
        max_tokens: int | None = None,
    ) -> str:
        return await run_text(
            model,
            prompt,
            instructions=instructions,
            timeout=timeout,
            max_tokens=max_tokens,
            **self._run_options(),
        )

    async def request_plan(
        self, prompt: str, *, model: ModelRef, instructions: str, timeout: float
    ) -> ArtifactPlan:
        return await run_plan(
            model, prompt, instructions=instructions, timeout=timeout, **self._run_options()
        )

    def _run_options(self) -> dict[str, Any]:
        context = self.context
        return call_options(context.usage, context.summarizer, context.run_context)

    async def convert_file(
        self,
        data: bytes,
        *,
        media_type: str,
        name: str | None,
        model_name: str | None,
        settings: FileSettings,
    ) -> FileResult:
        return await convert_in_thread(
            data,
            media_type=media_type,
            name=name,
            model_name=model_name,
            profile=self.context.counter.profile,
            settings=settings,
        )


async def run_plan(
    model: Any,
    prompt: str,
    *,
    instructions: str,
    timeout: float,
    usage: Any,
    model_settings: Any,
    instrument: InstrumentationSettings | None = None,
) -> ArtifactPlan:
    """The artifact planner's one structured call (a one-off `Agent`): its `ArtifactPlan`. Raises as
    `run_text` does; usage is added only on success."""
    from pydantic_ai import Agent

    from ._artifact_models import ArtifactPlan

    agent = Agent(
        model, output_type=ArtifactPlan, instructions=instructions, **instrumented_agent_options(instrument)
    )
    with anyio.fail_after(timeout):
        result = await agent.run(prompt, model_settings=model_settings)
    add_usage(usage, result_usage(result))
    return result.output


async def convert_in_thread(
    data: bytes,
    *,
    media_type: str,
    name: str | None,
    model_name: str | None,
    profile: TokenizerProfile | None,
    settings: FileSettings,
) -> FileResult:
    """Read an attached file in a worker thread (and, for documents, a worker process under its limits)."""
    from ..tokens import TokenCounter

    counter = TokenCounter(model_name, profile=profile)  # a counter of its own: it is used in the thread

    def read() -> FileResult:
        from ..files import read_file  # the readers load on first use: here, off the event loop

        return read_file(
            data, media_type=media_type, name=name, settings=settings, count_tokens=counter.count_text
        )

    return await anyio.to_thread.run_sync(read)


def operations_of(context: HistoryContext) -> StageOperations:
    """Where the stage's side effects run: the processor's operations within a run, else in place."""
    return context.operations if context.operations is not None else InlineOperations(context)
