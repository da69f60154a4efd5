"""`pydantic-ai-history demo`: a long agent session through the full processor, with no API key.

A real `Agent` runs a scripted tool loop against `StrictProvider` (or, with `--model`, a real model); the
tools return large generated outputs and turns attach a PDF and an oversized PNG (see docs/cli.md).
"""

from __future__ import annotations

import asyncio
import io
import math
import random
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from pydantic_ai import RunContext
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelResponse, TextPart, ToolCallPart

from .._compat import HAS_CAPABILITIES
from ..budget._policy import ContextPolicy
from ..context._summarizer_settings import SummarizerSettings
from ..evaluation._scripted import TASKS, TOOLS, summarize_prompt, text_of
from ..events import (
    ArtifactProcessed,
    CompactionResult,
    HistoryEvent,
    HistoryWarning,
    RequestProcessed,
    StageFailed,
    WindowApplied,
)
from ..files import FileSettings
from ..files._provider_limits import CONSERVATIVE_LIMITS
from ..messages.validate import validate_history
from ..pipeline._stats import HistoryStats
from ..processor import HistoryProcessor
from ..stages.artifacts import ArtifactSettings
from ..store import MemoryStore
from ..testing import ProviderRejected, StrictProvider
from . import demo_content as content
from .common import build_model
from .formatting import ProgressBar, format_table


@dataclass(frozen=True)
class DemoSettings:
    """The demo's budget: small enough that a 150-request session compacts several times."""

    context_window: int = 32_000
    """The simulated provider's window (it rejects anything larger)."""
    max_tokens: int = 24_000
    """The compaction trigger."""
    target_tokens: int = 8_000
    """What a compaction brings the history down to."""
    requests_per_turn: int = 10
    """Model requests per user turn (tool rounds + the final answer)."""
    seed: int = 7
    """Seeds the generated tool outputs."""


DEMO_SETTINGS = DemoSettings()


@dataclass
class DemoResult:
    """What a demo run did: the processor's own stats, the provider's view, and the text that was printed."""

    requests: int
    """Model requests the processor handled (its `stats().overall.requests`)."""
    provider_requests: int
    """Requests the simulated provider received, rejected ones included (for a real model: `requests`)."""
    rejected: int
    peak_tokens_sent: int
    """The largest request the provider measured (simulated provider only; else the processor's peak)."""
    stats: HistoryStats
    turns: int
    final_messages: list[ModelMessage]
    violations: list[str]
    text: str
    summary: dict[str, Any] = field(default_factory=dict)
    """The final table's rows, label -> value, exactly as printed."""

    @property
    def compactions(self) -> int:
        return self.stats.overall.compactions

    @property
    def summarizer_calls(self) -> int:
        return self.stats.overall.summarizer_calls


# ---- the local models -----------------------------------------------------------------------------------

_ARTIFACT_ID = re.compile(r'art_[0-9a-f]{16,64}')
_SIZED_ARGS: dict[str, tuple[str, tuple[str, ...], str, int, int]] = {
    'search_orders': ('region', ('EU', 'US', 'APAC'), 'limit', 150, 12),
    'export_inventory': ('warehouse', ('FRA-1', 'DUB-2', 'IAD-1', 'SIN-3'), 'rows', 600, 30),
    'tail_logs': ('service', ('payment-service', 'order-service', 'gateway'), 'lines', 400, 25),
}
"""Each scripted tool's arguments: (choice argument, its values, size argument, large size, usual size)."""


@dataclass
class _Script:
    """The scripted agent: the tool to call at each step of a turn, decided from the turn and step numbers."""

    settings: DemoSettings
    steps_in_turn: int = 0
    turn: int = 0
    step: int = 0
    calls: int = 0
    draws: dict[str, int] = field(default_factory=dict)
    """Tool call id -> the draw its output is generated from, numbered in the order the calls were made."""

    def start_turn(self, turn: int, steps: int) -> None:
        self.turn, self.step, self.steps_in_turn = turn, 0, steps

    def respond(self, messages: list[ModelMessage], info: Any) -> ModelResponse:
        step, self.step = self.step, self.step + 1
        if step >= self.steps_in_turn - 1:
            return ModelResponse(parts=[TextPart(self._final_answer(messages))], model_name='demo-agent')
        rng = random.Random(self.settings.seed * 1_000_003 + self.turn * 1_009 + step)
        tool_names = {t.name for t in info.function_tools}
        if step % 6 == 5 and 'read_artifact' in tool_names:
            found = _ARTIFACT_ID.findall(text_of(messages[-8:]))
            if found:
                query = {'artifact_id': found[-1], 'query': 'ERROR timeout refund'}
                call = ToolCallPart('read_artifact', query, tool_call_id=self._next_id(draw=False))
                return ModelResponse(parts=[call], model_name='demo-agent')
        tool = TOOLS[(self.turn + step) % len(TOOLS)]
        large = (self.turn * 7 + step) % 9 == 4
        if tool in _SIZED_ARGS:
            name, choices, size, big, small = _SIZED_ARGS[tool]
            args: dict[str, Any] = {name: rng.choice(choices), size: big if large else small}
        else:
            args = {'ticket_id': f'T-{rng.randint(1000, 9999)}'}
        parts: list[Any] = [ToolCallPart(tool, args, tool_call_id=self._next_id())]
        if step % 4 == 1:  # now and then two calls in one response, as models do
            parts.insert(0, TextPart('Checking two sources at once.'))
            parts.append(
                ToolCallPart(
                    'get_ticket', {'ticket_id': f'T-{rng.randint(1000, 9999)}'}, tool_call_id=self._next_id()
                )
            )
        return ModelResponse(parts=parts, model_name='demo-agent')

    def _next_id(self, *, draw: bool = True) -> str:
        self.calls += 1
        call_id = f'call_{self.calls:05d}'
        if draw:  # a call to one of the demo's own tools, whose output is generated
            self.draws[call_id] = len(self.draws) + 1
        return call_id

    def _final_answer(self, messages: list[ModelMessage]) -> str:
        text = text_of(messages[-12:])
        orders = sorted(set(re.findall(r'ORD-\d{6}', text)))[:5]
        errors = text.count('ERROR')
        return (
            f'Turn {self.turn + 1} done. Reviewed {len(messages)} messages of context; '
            f'{errors} error lines in the latest logs; sample orders: {", ".join(orders) or "none"}. '
            'Next: continue with the remaining checks.'
        )


# ---- the session ----------------------------------------------------------------------------------------


def _build_agent(model: Any, processor: HistoryProcessor, seed: int, draws: Mapping[str, int]) -> Any:
    from pydantic_ai import Agent

    kwargs: dict[str, Any] = {}
    if HAS_CAPABILITIES:
        kwargs['capabilities'] = [processor]
    else:  # pydantic-ai 1.0: the processor and its read-back tool are wired separately
        kwargs['history_processors'] = [processor]
        kwargs['toolsets'] = [processor.readback_toolset()]
    return Agent(
        model,
        instructions='You are an operations analyst. Use the tools, then answer concisely.',
        tools=_tools(seed, draws),
        **kwargs,
    )


def _tools(seed: int, draws: Mapping[str, int]) -> list[Callable[..., Any]]:
    """The demo's tools. Each output is generated from its call's draw (`_Script.draws`; a real model's calls
    from their ids), never from the order the tools ran in: the calls of one response run at once, each in a
    thread of its own."""

    def rng(ctx: RunContext[Any]) -> random.Random:
        call_id = ctx.tool_call_id or ''
        draw = draws.get(call_id)
        return random.Random(seed * 7_919 + draw if draw is not None else f'{seed}:{call_id}')

    def search_orders(ctx: RunContext[Any], region: str, limit: int = 20) -> list[dict[str, Any]]:
        """Search orders in a region (EU, US, APAC); returns order records."""
        return content.order_records(rng(ctx), max(1, min(limit, 500)), region)

    def export_inventory(ctx: RunContext[Any], warehouse: str, rows: int = 50) -> str:
        """Export a warehouse's inventory as CSV."""
        return content.inventory_csv(rng(ctx), max(1, min(rows, 5_000)), warehouse)

    def tail_logs(ctx: RunContext[Any], service: str, lines: int = 50) -> str:
        """The last log lines of a service."""
        return content.service_logs(rng(ctx), max(1, min(lines, 5_000)), service)

    def get_ticket(ctx: RunContext[Any], ticket_id: str) -> str:
        """A customer support ticket (often in Chinese or Japanese)."""
        return content.support_ticket(rng(ctx), ticket_id, 3)

    return [search_orders, export_inventory, tail_logs, get_ticket]


def _turn_prompt(turn: int, attachments: dict[str, bytes]) -> Any:
    task = TASKS[turn % len(TASKS)]
    prompt = f'Turn {turn + 1}: {task}'
    if turn % len(TASKS) == 1:
        return [prompt, BinaryContent(attachments['pdf'], media_type='application/pdf')]
    if turn % len(TASKS) == 3:
        return [prompt, BinaryContent(attachments['png'], media_type='image/png')]
    return prompt


class _Output:
    """Writes to the terminal and keeps exactly what was printed for `DemoResult.text` (bar redraws aside)."""

    def __init__(self, stream: TextIO, quiet: bool, tty: bool | None) -> None:
        self.stream = stream
        self.quiet = quiet
        self.buffer = io.StringIO()
        self.bar: ProgressBar | None = None
        self.tty = stream.isatty() if tty is None else tty
        self.requests = self.compactions = self.unchanged = 0

    def start_bar(self, total: int) -> None:
        # On a pipe the bar prints plain lines, which belong to the transcript; on a terminal it redraws.
        self.bar = ProgressBar(total, self.stream if self.tty else self, tty=self.tty)

    def line(self, text: str, *, detail: bool = True) -> None:
        if self.quiet and detail:
            return
        if self.bar is not None and self.tty:
            self.buffer.write(text + '\n')
            self.bar.print(text)
        else:
            self.write(text + '\n')

    def write(self, text: str) -> int:
        self.buffer.write(text)
        self.stream.write(text)
        self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def _event_line(event: HistoryEvent, output: _Output) -> str | None:
    if isinstance(event, CompactionResult):
        output.compactions += 1
        return (
            f'    compaction #{output.compactions} ({event.method}): {event.messages_before} -> '
            f'{event.messages_after} messages, {event.tokens_before:,} -> {event.tokens_after:,} tokens, '
            f'{event.summarizer_calls} summarizer call(s)' + (f' [{event.error}]' if event.error else '')
        )
    if isinstance(event, ArtifactProcessed):
        if event.tokens_after == event.tokens_before and not event.cache_hit:
            output.unchanged += 1  # reported once per request, not one line each
            return None
        grew = event.tokens_after > event.tokens_before
        return (
            f'    artifact {event.artifact_id[:16]} from {event.source}: {event.strategy}, '
            f'{event.tokens_before:,} -> {event.tokens_after:,} tokens'
            + (' (cache hit)' if event.cache_hit else '')
            + (f' (made fit to what the provider accepts: {event.rationale})' if grew else '')
        )
    if isinstance(event, WindowApplied):
        return (
            f'    window: dropped {event.units_dropped} unit(s), '
            f'{event.tokens_before:,} -> {event.tokens_after:,} tokens (budget {event.budget:,})'
        )
    if isinstance(event, HistoryWarning):
        return f'    warning [{event.code}]: {event.message}'
    if isinstance(event, StageFailed):
        return f'    stage {event.stage} failed: {event.error}'
    return None


def _on_event(output: _Output, event: HistoryEvent) -> None:
    """Prints a line for each request and each decision as it happens."""
    if not isinstance(event, RequestProcessed):
        text = _event_line(event, output)
        if text is not None:
            output.line(text)
        return
    output.requests += 1
    if output.unchanged:
        output.line(f'    {output.unchanged} artifact(s) kept as they are (they fit)')
        output.unchanged = 0
    output.line(
        f'  request {output.requests:>4}: '
        f'{event.messages_before:>3} -> {event.messages_after:>3} messages, '
        f'{event.tokens_before:>7,} -> {event.tokens_after:>7,} tokens'
    )
    if output.bar is not None:
        output.bar.update(output.requests, f'compactions: {output.compactions}')


def _local_models(script: _Script, settings: DemoSettings) -> tuple[StrictProvider, Any, ArtifactSettings]:
    """The strict simulated provider, the scripted summarizer, and the artifact settings of a provider with
    the conservative file limits (2 MiB, 8,000 px): its 9000x3000 PNG is one a real provider would reject."""
    from pydantic_ai.models.function import FunctionModel

    provider = StrictProvider(script.respond, context_window=settings.context_window, model_name='gpt-4o')
    limits = FileSettings(
        image_max_bytes=CONSERVATIVE_LIMITS.image_max_bytes,
        image_max_dimension=CONSERVATIVE_LIMITS.image_max_dimension,
    )
    summarizer = FunctionModel(summarize_prompt, model_name='demo-summarizer')
    return provider, summarizer, ArtifactSettings(file_settings=limits)


def _summary(result: DemoResult) -> dict[str, Any]:
    """The final table's rows, label -> value."""
    stats, overall = result.stats, result.stats.overall
    return {
        'turns': result.turns,
        'model requests': overall.requests,
        'provider requests': result.provider_requests,
        'rejected by provider': result.rejected,
        'peak tokens sent': result.peak_tokens_sent,
        'peak tokens after processing': overall.peak_tokens_out,
        'tokens in (sum)': overall.tokens_in,
        'tokens out (sum)': overall.tokens_out,
        'reduction %': round(overall.reduction_percent, 1),
        'compactions': overall.compactions,
        **{f'  compactions: {m}': n for m, n in sorted(overall.compaction_methods.items())},
        'summarizer calls': overall.summarizer_calls,
        'cache hits': stats.cache_hits,
        'cache misses': stats.cache_misses,
        'artifacts': sum(overall.artifacts_by_strategy.values()),
        **{f'  artifacts: {s}': n for s, n in sorted(overall.artifacts_by_strategy.items())},
        'window applications': overall.window_applications,
        'warnings': overall.warnings,
        'stage failures': overall.stage_failures,
        'final history messages': len(result.final_messages),
        'final history violations': len(result.violations),
    }


_DEMO_SECRET = b'pydantic-ai-history demo: no secret'
"""The demo store's id secret: its ids need not be unguessable, only the same in every process."""

_PDF_LINES = (
    'Finance audit report Q2 2024 (FIN-2024-Q2)',
    'Region EU: 1,204 orders, 37 refunds pending, 5 disputed',
    'Warehouse FRA-1: inventory variance 2.3 percent',
    'Action: reconcile refunds older than 30 days',
)


async def _run_demo(requests: int, model: str | None, output: _Output, settings: DemoSettings) -> DemoResult:
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    from ..processor import create_history_processor

    script = _Script(settings)
    provider: StrictProvider | None = None
    artifacts: Any = True
    if model is None:
        provider, helper, artifacts = _local_models(script, settings)
        agent_model: Any = provider.model()
        label = f'local scripted model (strict simulated provider, {settings.context_window:,}-token window)'
    else:
        agent_model = helper = build_model(model)
        label = f'{model} (real provider; summarizer: the same model)'
    started = time.perf_counter()
    processor = create_history_processor(
        model=agent_model,
        policy=ContextPolicy(
            context_window=settings.context_window,
            max_tokens=settings.max_tokens,
            target_tokens=settings.target_tokens,
        ),
        summarizer=SummarizerSettings(model=helper),
        artifacts=artifacts,
        # Artifact ids are counted tokens too: keyed with a fixed secret in one scope (not the process's own
        # secret and each session's new conversation id), they take the same tokens in every process.
        store=MemoryStore(secret=_DEMO_SECRET),
        scope=lambda ctx: 'demo',
        on_history_event=lambda event: _on_event(output, event),
    )
    agent = _build_agent(agent_model, processor, settings.seed, script.draws)
    attachments = {'pdf': content.minimal_pdf(_PDF_LINES), 'png': content.noise_png()}
    output.line(f'pydantic-ai-history demo: {requests} model requests against {label}', detail=False)
    output.line(
        f'window {settings.context_window:,} tokens, compaction at {settings.max_tokens:,} down to '
        f'{settings.target_tokens:,}; attachments: PDF {len(attachments["pdf"]):,} bytes, '
        f'PNG 9000x3000 {len(attachments["png"]) / 2**20:.1f} MiB',
        detail=False,
    )
    if not output.quiet:
        output.start_bar(requests)
    history: list[ModelMessage] = []
    rejected = turn = 0
    per_turn = max(settings.requests_per_turn, 1)
    try:
        while output.requests < requests:
            steps = min(per_turn, requests - output.requests)
            script.start_turn(turn, steps)
            output.line(f'turn {turn + 1}: {TASKS[turn % len(TASKS)]}')
            limits = UsageLimits(request_limit=steps + 5 if model is None else per_turn * 3)
            try:
                result = await agent.run(
                    _turn_prompt(turn, attachments), message_history=history, usage_limits=limits
                )
            except ProviderRejected as exc:
                rejected += 1
                output.line(f'    provider rejected the request: {exc}')
            except UsageLimitExceeded as exc:
                output.line(f'    turn stopped: {exc}')
            else:
                history = result.all_messages()
            turn += 1
            if model is not None and turn > math.ceil(requests / per_turn) * 3:
                break  # a real model that answers without tools: do not loop for ever
    finally:
        if output.bar is not None:
            output.bar.close()
            output.bar = None

    stats = processor.stats()
    # A finished run ends with the model's answer: that one invariant does not apply to a stored history.
    violations = [str(v) for v in validate_history(history) if v.code != 'not_ending_with_request']
    result = DemoResult(
        requests=stats.overall.requests,
        provider_requests=len(provider.requests) if provider is not None else stats.overall.requests,
        rejected=rejected,
        peak_tokens_sent=provider.peak_input_tokens
        if provider is not None
        else stats.overall.peak_tokens_out,
        stats=stats,
        turns=turn,
        final_messages=history,
        violations=violations,
        text='',
    )
    result.summary = _summary(result)
    output.line('', detail=False)
    output.line(format_table(['summary', 'value'], list(result.summary.items()), align='lr'), detail=False)
    output.line('', detail=False)
    for violation in violations:
        output.line(f'final history: {violation}', detail=False)
    output.line(f'finished in {time.perf_counter() - started:.1f}s', detail=False)
    result.text = output.buffer.getvalue()
    return result


def run_demo(
    requests: int = 150,
    *,
    model: str | None = None,
    quiet: bool = False,
    out: TextIO | None = None,
    tty: bool | None = None,
    settings: DemoSettings = DEMO_SETTINGS,
) -> DemoResult:
    """Run the demo session and print it to `out` (stdout by default); return the stats and the printed text.

    Args:
        requests: model requests in the session (default 150, at least 1).
        model: `provider:name` of a real model to run against (its API key must be set); default: local.
        quiet: print only the header and the final summary table.
        tty: force (or disable) the redrawn progress bar; default: whether `out` is a terminal.
        settings: the window and compaction budget.
    """
    if requests < 1:
        raise ValueError('requests must be at least 1')
    output = _Output(out if out is not None else sys.stdout, quiet, tty)
    return asyncio.run(_run_demo(requests, model, output, settings))
