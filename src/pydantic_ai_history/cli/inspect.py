"""`pydantic-ai-history inspect`: what the processor would do to a saved history, message by message.

The processor runs in dry-run (its model refuses every call, so deterministic fallbacks stand in for LLM
calls). Each message's action (`ACTIONS`, described in docs/cli.md) is read from the difference between
input and output, and from the strategy a changed part's metadata records.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._compat import part_metadata
from ..budget.model_info import ContextWindowUnknownError
from ..events import HistoryEvent, RequestProcessed
from ..messages._marks import MARKER_KEY, marker_kind
from ..messages.validate import validate_history
from ..stages.window import dropped_count
from .common import (
    EXIT_PROCESSING,
    CliError,
    build_model,
    dry_run_model,
    fail,
    history_model_name,
    load_history,
    message_role,
    part_summary,
)
from .formatting import format_table

ACTIONS = ('kept', 'summarized', 'excluded', 'converted', 'resized', 'dropped', 'added')


@dataclass(frozen=True)
class MessageRow:
    """One row of the report: an input message (`index`) or a message the processor added (`index` None)."""

    index: int | None
    out_index: int | None
    role: str
    parts: str
    tokens: int
    """Tokens of the input message (0 for an added one)."""
    tokens_after: int
    """Tokens of what stands in the output for it (0 when it was removed)."""
    action: str
    detail: str = ''


@dataclass
class InspectReport:
    """The outcome of a dry run over one history; `output` is the processed history."""

    model: str | None
    context_window: int | None
    settings: dict[str, Any]
    rows: list[MessageRow]
    tokens_before: int
    """The processor's estimate of the input, as its `RequestProcessed` event reports it."""
    tokens_after: int
    anchored_before: int | None
    anchored_after: int | None
    framing_before: int
    """What no message owns in `tokens_before` (request framing, the usage anchor's correction)."""
    framing_after: int
    messages_before: int
    messages_after: int
    input_violations: list[str]
    output_violations: list[str]
    events: list[HistoryEvent]
    output: list[ModelMessage] = field(repr=False)
    file: str | None = None
    next_request_added: bool = False
    """The history ended with the model's answer: a placeholder next request was processed after it."""

    @property
    def actions(self) -> dict[str, int]:
        counts = Counter(r.action for r in self.rows)
        return {a: counts[a] for a in ACTIONS if counts[a]}

    def to_dict(self) -> dict[str, Any]:
        return {
            'file': self.file,
            'model': self.model,
            'context_window': self.context_window,
            'settings': self.settings,
            'messages': [dataclasses.asdict(r) for r in self.rows],
            'totals': {name: getattr(self, name) for name in _TOTALS},
            'next_request_added': self.next_request_added,
            'actions': self.actions,
            'input_violations': self.input_violations,
            'output_violations': self.output_violations,
            'events': [{'kind': e.kind, **_jsonable(dataclasses.asdict(e))} for e in self.events],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)


_TOTALS = tuple(
    f'{total}_{when}'
    for total in ('messages', 'tokens', 'anchored', 'framing')
    for when in ('before', 'after')
)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _unknown_window(model: str | None) -> NoReturn:
    if model is None:
        fail(
            'the history names no model, so its context window is unknown: '
            'pass --model NAME or --context-window N'
        )
    fail(f'the context window of model {model!r} is unknown: pass --context-window N')


async def inspect_messages(
    messages: Sequence[ModelMessage],
    *,
    model: str | None = None,
    max_tokens: int | None = None,
    target_tokens: int | None = None,
    context_window: int | None = None,
    summarizer_model: str | None = None,
) -> InspectReport:
    """Run the processor over `messages` in dry-run and describe what it did to each message.

    `model` (default: the model named in the history's responses) decides token counting and the context
    window; `max_tokens`/`target_tokens` default to `create_history_processor()`'s. Only with
    `summarizer_model` is an LLM called.
    """
    from ..budget._policy import ContextPolicy
    from ..context._summarizer_settings import SummarizerSettings
    from ..processor import create_history_processor

    model = model or history_model_name(messages)
    dry = dry_run_model(model)
    events: list[HistoryEvent] = []
    given = {'max_tokens': max_tokens, 'target_tokens': target_tokens, 'summarizer_model': summarizer_model}
    settings: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    summarizer = SummarizerSettings(model=None if summarizer_model is None else build_model(summarizer_model))
    try:
        # strict: a report on an assumed window would describe a processor nobody runs
        policy = ContextPolicy(
            context_window=context_window, max_tokens=max_tokens, target_tokens=target_tokens, strict=True
        )
        processor = create_history_processor(
            model=dry, policy=policy, summarizer=summarizer, on_history_event=events.append
        )
    except ContextWindowUnknownError:
        _unknown_window(model)
    except ValueError as exc:
        fail(f'invalid settings: {exc}')
    counter = processor.counter_for(dry)
    next_request = _next_request(messages)
    before = [*messages, *next_request]
    per_before = [counter.count_message(m) for m in before]
    try:
        context = processor.make_context(model=dry)
        output = await processor.process(before, model=dry)
    except ContextWindowUnknownError:
        _unknown_window(model)
    except Exception as exc:
        raise CliError(f'processing failed: {type(exc).__name__}: {exc}', EXIT_PROCESSING) from exc
    per_after = [counter.count_message(m) for m in output]
    processed = next((e for e in reversed(events) if isinstance(e, RequestProcessed)), None)
    with processor.marks():  # the notes it wrote are sealed with its store's key (1.0 has no metadata)
        rows = _rows(before, output, per_before, per_after)
    tokens_before = processed.tokens_before if processed else sum(per_before)
    tokens_after = processed.tokens_after if processed else sum(per_after)
    return InspectReport(
        model=model,
        context_window=context.context_window,
        settings=settings,
        rows=rows,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        anchored_before=tokens_before if processed else None,
        anchored_after=tokens_after if processed else None,
        framing_before=tokens_before - sum(per_before),
        framing_after=tokens_after - sum(per_after),
        next_request_added=bool(next_request),
        messages_before=len(before),
        messages_after=len(output),
        input_violations=[str(v) for v in validate_history(before)],
        output_violations=[str(v) for v in validate_history(output, original=before)],
        events=events,
        output=output,
    )


NEXT_REQUEST = '(the next user message)'
"""The placeholder after a finished run's final answer."""


def _next_request(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """A placeholder user message after a finished run's final answer (a response without tool calls), so
    the history is inspected as the next request finds it; nothing for any other history."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelResponse) or any(isinstance(p, ToolCallPart) for p in last.parts):
        return []
    return [ModelRequest(parts=[UserPromptPart(NEXT_REQUEST)])]


def inspect_history(path: str | Path, **settings: Any) -> InspectReport:
    """`inspect_messages` over a saved history file (the CLI's `inspect`)."""
    messages = load_history(path)
    report = asyncio.run(inspect_messages(messages, **settings))
    report.file = str(path)
    return report


# ---- comparing input and output --------------------------------------------------------------------


_PAIRED = (ToolCallPart, ToolReturnPart, RetryPromptPart)


def _shape(message: ModelMessage) -> tuple[Any, ...]:
    ids = tuple(p.tool_call_id if isinstance(p, _PAIRED) else None for p in message.parts)
    return type(message), tuple(p.part_kind for p in message.parts), ids


def align(before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> list[int | None]:
    """For each output message, the input message it is (or was made from), or None for a new one."""
    match = _exact_matches(before, after)
    # Changed messages sit between exact matches; a stage keeps a suffix of each gap, so align to its end.
    for unmatched, run in itertools.groupby(range(len(after)), key=lambda k: match[k] is None):
        if unmatched:
            gap = list(run)
            _align_gap(before, after, match, gap[0], gap[-1] + 1)
    return match


def _exact_matches(before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> list[int | None]:
    """Output messages that are input messages (the same object, or equal), in order."""
    by_id = {id(m): i for i, m in enumerate(before)}
    match: list[int | None] = [None] * len(after)
    cursor = 0
    for k, message in enumerate(after):
        i = by_id.get(id(message))
        if i is None or i < cursor:
            i = next((j for j in range(cursor, len(before)) if before[j] == message), None)
        if i is not None:
            match[k] = i
            cursor = i + 1
    return match


def _align_gap(
    before: Sequence[ModelMessage],
    after: Sequence[ModelMessage],
    match: list[int | None],
    k: int,
    run_end: int,
) -> None:
    """Match the changed outputs `[k, run_end)` to same-shaped inputs of their gap, from its end."""
    previous = [i for i in match[:k] if i is not None]
    lo = previous[-1] + 1 if previous else 0
    following = match[run_end] if run_end < len(after) else None
    j = following if following is not None else len(before)
    for out in range(run_end - 1, k - 1, -1):
        if marker_kind(after[out]) is not None:
            continue
        shape = _shape(after[out])
        found = next((c for c in range(j - 1, lo - 1, -1) if _shape(before[c]) == shape), None)
        if found is not None:
            match[out] = found
            j = found


def _strategy_action(strategy: str) -> str:
    s = strategy.lower()
    if s.startswith(('exclu', 'spill', 'stub', 'drop', 'omit', 'repeat')):
        return 'excluded'
    if s.startswith('summar'):
        return 'summarized'
    if s.startswith(('resiz', 'image', 'downscal')):
        return 'resized'
    return 'converted'


def _images(content: Any) -> list[bytes]:
    items = content if isinstance(content, (list, tuple)) else [content]
    return [i.data for i in items if isinstance(i, BinaryContent) and i.media_type.startswith('image/')]


def _change(old: ModelMessage, new: ModelMessage) -> tuple[str, str]:
    actions: list[str] = []
    details: list[str] = []
    for index, part in enumerate(new.parts):
        previous = old.parts[index] if index < len(old.parts) else None
        if previous == part:
            continue
        ours = part_metadata(part).get(MARKER_KEY)
        strategy = ours.get('strategy') if isinstance(ours, Mapping) else None
        if isinstance(strategy, str):
            actions.append(_strategy_action(strategy))
            details.append(strategy)
        elif (
            previous is not None
            and _images(getattr(previous, 'content', None))
            and _images(getattr(part, 'content', None))
        ):
            actions.append('resized')
            details.append('image')
        else:
            actions.append('converted')
    order = ('excluded', 'summarized', 'resized', 'converted')
    action = next((a for a in order if a in actions), 'converted')
    return action, ', '.join(dict.fromkeys(details))


def _rows(
    before: Sequence[ModelMessage],
    after: Sequence[ModelMessage],
    per_before: Sequence[int],
    per_after: Sequence[int],
) -> list[MessageRow]:
    match = align(before, after)
    source = {i: k for k, i in enumerate(match) if i is not None}
    added = [k for k, i in enumerate(match) if i is None]
    new_kinds = {marker_kind(after[k]) for k in added}
    dropped = _dropped(before, after, source, added, new_kinds)
    keyed: list[tuple[float, int, MessageRow]] = []
    for i, message in enumerate(before):
        k = source.get(i)
        if k is None:
            action = 'dropped' if i in dropped or not new_kinds else 'summarized'
            row = MessageRow(i, None, message_role(message), part_summary(message), per_before[i], 0, action)
        else:
            row = _kept_row(i, k, message, after[k], per_before[i], per_after[k])
        keyed.append((float(i), 0, row))
    for k in added:
        anchor = max((i for i in match[:k] if i is not None), default=-1)
        keyed.append((anchor + 0.5, k, _added_row(k, after[k], per_after[k])))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return [row for _, _, row in keyed]


def _dropped(
    before: Sequence[ModelMessage],
    after: Sequence[ModelMessage],
    source: Mapping[int, int],
    added: Sequence[int],
    new_kinds: set[str | None],
) -> set[int]:
    """The removed inputs the window dropped (the rest of the removed ones were summarized)."""
    if 'window' not in new_kinds:
        return set()
    removed = [i for i in range(len(before)) if i not in source]
    # with a summary too, the window's note says how many of the newest removed ones it dropped
    count = sum(dropped_count(after[k]) or 0 for k in added) if 'summary' in new_kinds else len(removed)
    return set(removed[len(removed) - count :])


def _kept_row(
    i: int, k: int, message: ModelMessage, new: ModelMessage, tokens: int, after: int
) -> MessageRow:
    action, detail = ('kept', '') if new is message or new == message else _change(message, new)
    return MessageRow(i, k, message_role(message), part_summary(message), tokens, after, action, detail)


def _added_row(k: int, message: ModelMessage, tokens: int) -> MessageRow:
    kind = marker_kind(message)
    detail = {'summary': 'summary of earlier messages', 'window': 'note for dropped messages'}.get(
        kind or '', 'new'
    )
    return MessageRow(None, k, message_role(message), part_summary(message), 0, tokens, 'added', detail)


def render_inspect(report: InspectReport) -> str:
    """The report as text: settings, the per-message table with totals, actions, violations, events."""
    lines = [*_header(report), _table(report), '']
    saved = report.tokens_before - report.tokens_after
    pct = 100 * saved / report.tokens_before if report.tokens_before else 0.0
    lines.append(f'tokens: {report.tokens_before:,} -> {report.tokens_after:,} ({pct:.1f}% less)')
    if report.next_request_added:
        lines.append(
            "the history ends with the model's answer: inspected as the next request finds it "
            f'(with a placeholder user message after it, {NEXT_REQUEST!r})'
        )
    lines.append('actions: ' + ', '.join(f'{a} {n}' for a, n in report.actions.items()))
    lines.extend(f'event: {_describe(e)}' for e in report.events if e.kind != 'RequestProcessed')
    lines.extend(_violation_lines(report))
    return '\n'.join(lines)


def _header(report: InspectReport) -> list[str]:
    settings = ', '.join(
        f'{k}={v:,}' if isinstance(v, int) else f'{k}={v}' for k, v in report.settings.items()
    )
    window = f'{report.context_window:,}' if report.context_window else 'unknown'
    return [
        f'file: {report.file or "-"}',
        f'model: {report.model or "(unknown)"}  context window: {window}'
        + (f'  settings: {settings}' if settings else '')
        + '  (dry run)' * ('summarizer_model' not in report.settings),
        '',
    ]


def _table(report: InspectReport) -> str:
    # a row's fields are the table's columns, in order; an added or removed message has no index on one side
    placeholder = report.messages_before - 1 if report.next_request_added else None
    rows = [
        tuple('' if v is None else v for v in dataclasses.astuple(_labelled(r, placeholder)))
        for r in report.rows
    ]
    if report.framing_before or report.framing_after:
        rows.append(('', '', '', '(no message)', report.framing_before, report.framing_after, '', 'framing'))
    total = f'{report.messages_before} -> {report.messages_after} messages'
    if placeholder is not None:
        total = f'{placeholder} saved + 1 placeholder -> {report.messages_after} messages'
    return format_table(
        ['#', 'out', 'role', 'parts', 'tokens', 'after', 'action', 'detail'],
        rows,
        align='rrllrrll',
        footer=[('', '', 'total', total, report.tokens_before, report.tokens_after, '', '')],
    )


def _labelled(row: MessageRow, placeholder: int | None) -> MessageRow:
    """The row of the placeholder next request says so (it is not in the file)."""
    if placeholder is None or row.index != placeholder:
        return row
    return dataclasses.replace(row, detail=f'placeholder {NEXT_REQUEST}, not in the file')


def _violation_lines(report: InspectReport) -> list[str]:
    new = [v for v in report.output_violations if v not in report.input_violations]
    lines = _listed('input violations', report.input_violations) or ['input violations: none']
    return lines + _listed('output violations', new)


def _listed(title: str, items: Sequence[str]) -> list[str]:
    return [f'{title} ({len(items)}):', *(f'  {item}' for item in items)] if items else []


def _describe(event: HistoryEvent) -> str:
    data = dataclasses.asdict(event)
    data.pop('at', None)
    data.pop('run_id', None)
    if 'summary' in data:
        summary = str(data['summary'])
        data['summary'] = summary[:60] + ('...' if len(summary) > 60 else '')
    return event.kind + ' ' + ' '.join(f'{k}={v}' for k, v in data.items() if v not in (None, '', {}))
