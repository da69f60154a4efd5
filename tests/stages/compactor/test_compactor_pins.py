"""Pinned units and the compactor: kept ahead of older unpinned ones, never summarized away.

Pinned units before the cut are carried verbatim in the summary's pinned section, through incremental
compactions, the prefix cache and the deterministic fallbacks; the summarizer never sees them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import UsageLimits

from _compaction import (
    SetupCompactor,
    StubSummarizer,
    agent_with,
    compaction_setup,
    context,
    prompt_block,
    text,
    tool_loop,
    transcript_records,
)
from _history import call, is_suffix_by_identity, result
from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    HistoryWarning,
    StageFailed,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
    pin,
    pin_tool_errors,
)
from pydantic_ai_history.messages.pinning import PinPredicate, is_pinned
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages.compactor import (
    PINNED_HEADING,
    CompactionSettings,
    summary_text,
)
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings('ignore:`RetryPromptPart` is deprecated'),
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]

TRIGGER, TARGET = 20_000, 8_000
HAS_OUTCOME = 'outcome' in {f.name for f in dataclasses.fields(ToolReturnPart)}
ERROR = 'ERROR: permission denied on /srv/billing (deploy token dt-4471 expired at 09:14)'
ERROR2 = 'ERROR: schema migration 0042 failed: column "invoice_ref" already exists'


def tool_error(tool: str, call_id: str, message: str) -> ModelRequest:
    """A failed tool call's answer as the running version records it (what `pin_tool_errors` matches)."""
    if HAS_OUTCOME:
        part: Any = ToolReturnPart(tool, message, call_id, outcome='failed')  # type: ignore[call-arg]
    else:
        part = RetryPromptPart(content=message, tool_name=tool, tool_call_id=call_id)
    return ModelRequest(parts=[part])


def marked_error(tool: str, call_id: str, message: str) -> ModelRequest:
    """A tool return pinned by its marker (`pin()` on the part: metadata exists on every version)."""
    return ModelRequest(parts=[pin(ToolReturnPart(tool, message, call_id))])


Maker = Callable[[str, str, str], ModelRequest]
WAYS: dict[str, tuple[Maker, PinPredicate | None]] = {
    'pin_tool_errors': (tool_error, pin_tool_errors),
    'pin_marker': (marked_error, None),
}


def rounds(
    start: int, count: int, errors: dict[int, str] | None = None, make: Maker = tool_error
) -> list[Any]:
    """`count` tool rounds of about 1,000 tokens; `errors` maps a round number to a failed call's message."""
    out: list[ModelMessage] = []
    for i in range(start, start + count):
        if errors and i in errors:
            out += [call('deploy', f'd{i}', {'env': 'staging'}), make('deploy', f'd{i}', errors[i])]
        else:
            out += [
                call('fetch', f'step{i}', {'page': i}),
                result('fetch', f'step{i}', text(1_000, f'STEP-{i:03d}')),
            ]
    return out


def settings(stub: StubSummarizer, **kwargs: Any) -> CompactionSettings:
    return compaction_setup(max_tokens=TRIGGER, target_tokens=TARGET, summarizer_model=stub.model(), **kwargs)


def reload(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history as an app gets it back from its database: new objects, same content."""
    return list(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages)))


def texts(messages: Sequence[ModelMessage]) -> str:
    """Every string content the model is sent (summaries, tool results, errors), joined."""
    return '\n'.join(
        p.content for m in messages for p in m.parts if isinstance(getattr(p, 'content', None), str)
    )


def pinned_section(message: ModelMessage) -> str:
    summary = summary_text(message) or ''
    assert summary.count(PINNED_HEADING) == 1, summary
    return summary.split(PINNED_HEADING)[1]


def previous_summaries(stub: StubSummarizer) -> list[str]:
    return [prompt_block(p, 'previous_summary') for p in stub.prompts]


def compactions(events: list[HistoryEvent]) -> list[CompactionResult]:
    return [e for e in events if isinstance(e, CompactionResult)]


@pytest.mark.parametrize('way', list(WAYS))
async def test_a_pinned_tool_error_survives_two_compactions_and_a_reload(way: str):
    make, predicate = WAYS[way]
    stub = StubSummarizer()
    compactor = SetupCompactor(settings(stub, pin=predicate))
    ctx, events = context()
    full = [*tool_loop(0), *rounds(0, 40, {2: ERROR}, make)]  # the error is deep in the evicted region

    first = await compactor(full, ctx)
    assert_valid_history(first, original=full)
    section = pinned_section(first[1])
    assert ERROR in section
    assert ('assistant_tool_call', 'deploy', '{"env":"staging"}') in transcript_records(section), (
        'the call is kept with its error'
    )
    assert 'summary number 1' in (summary_text(first[1]) or '').split(PINNED_HEADING)[0]
    assert ctx.estimate(first).total <= TARGET
    assert compactions(events)[-1].pinned_units == 1
    assert ERROR in compactions(events)[-1].summary

    # in the run: more rounds, a second error; compacted again from the first summary
    new = rounds(40, 30, {45: ERROR2}, make)
    second = await compactor([*first, *new], ctx)
    assert_valid_history(second, original=[*first, *new])
    assert stub.calls == 2
    assert 'summary number 1' in previous_summaries(stub)[1]
    summary = summary_text(second[1]) or ''
    assert 'summary number 2' in summary
    assert (summary.count(ERROR), summary.count(ERROR2), summary.count(PINNED_HEADING)) == (1, 1, 1)
    assert summary.index(ERROR) < summary.index(ERROR2), 'the pinned section keeps the original order'
    assert ctx.estimate(second).total <= TARGET

    # the app reloads its full uncompacted history: the recorded prefix brings the pins back
    stored = [*full, *new]
    reloaded = await compactor(reload(stored), ctx)
    assert_valid_history(reloaded)
    assert compactions(events)[-1].method == 'cache'
    assert stub.calls == 2
    assert summary_text(reloaded[1]) == summary
    assert reloaded[2:] == second[2:]

    # later, reloaded and over the trigger again: compacted incrementally from the cached, pinned summary
    more = rounds(70, 25)
    third = await compactor(reload([*stored, *more]), ctx)
    assert_valid_history(third)
    assert stub.calls == 3
    assert compactions(events)[-1].method == 'llm'
    final = texts(third)
    assert (final.count(ERROR), final.count(ERROR2)) == (1, 1)
    assert ctx.estimate(third).total <= TARGET

    # the summarizer never saw a pinned unit, neither as messages nor in the previous summary
    assert all(ERROR not in p and ERROR2 not in p and PINNED_HEADING not in p for p in stub.prompts)


async def test_without_a_pin_the_same_error_is_summarized_away():
    stub = StubSummarizer()
    full = [*tool_loop(0), *rounds(0, 40, {2: ERROR})]
    ctx, _ = context()
    out = await SetupCompactor(settings(stub))(full, ctx)
    assert_valid_history(out, original=full)
    assert ERROR not in texts(out)
    assert ERROR in stub.prompts[0], 'the summarizer was given the error to summarize'


async def test_pinned_units_are_reserved_and_never_push_the_cut():
    stub = StubSummarizer()
    errors = {i: f'ERROR-{i}: deploy to shard {i} refused' for i in range(0, 40, 4)}
    full = [*tool_loop(0), *rounds(0, 40, errors)]
    ctx, _ = context()
    # the tail the target allows, not the quarter of it an event at the trigger keeps: room for pins in both
    compactor = SetupCompactor(settings(stub, pin=pin_tool_errors, keep_recent_tokens=TARGET))
    out = await compactor(full, ctx)
    assert_valid_history(out, original=full)
    assert ctx.estimate(out).total <= TARGET
    tail = out[2:]
    assert is_suffix_by_identity(tail, full), 'the tail is the contiguous run of newest units'
    section = pinned_section(out[1])
    in_tail = texts(tail)
    for message in errors.values():
        # each pinned unit is either a message of the tail or verbatim in the section, never both
        assert (message in section) != (message in in_tail), message
        assert message not in stub.prompts[0]
    assert any(m in in_tail for m in errors.values()), 'some pinned units are in the tail, as messages'
    # the walk stopped at an unpinned unit: a pinned unit costs nothing in it
    units = split_units(full)
    first_kept = next(i for i, u in enumerate(units) if full[u.start] is tail[0])
    before = units[first_kept - 1]
    assert not is_pinned(full[before.start : before.end], pin_tool_errors)


async def test_pins_alone_over_the_target_are_kept_whole_with_a_warning():
    stub = StubSummarizer()
    big = {i: f'ERROR-{i}-START ' + text(2_500) + f' ERROR-{i}-END' for i in (3, 9, 15, 21)}
    full = [*tool_loop(0), *rounds(0, 40, big)]
    ctx, events = context()
    out = await SetupCompactor(settings(stub, pin=pin_tool_errors))(full, ctx)
    assert_valid_history(out, original=full)
    final = texts(out)
    for message in big.values():
        assert message in final, 'kept whole: the pinned section is not cut to tool_result_max_tokens'
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['compaction_over_target']
    assert ctx.estimate(out).total > TARGET
    llm_part = (summary_text(out[1]) or '').split(PINNED_HEADING)[0]
    assert ctx.counter.count_text(llm_part) <= 2_000, 'the summary cap applies to the summarizer text only'


def boom(prompt: str, number: int) -> str:
    raise RuntimeError('provider exploded')


@pytest.mark.parametrize('fallback', ['digest', 'truncate'])
async def test_the_fallbacks_carry_the_pinned_section_once(fallback: Any):
    stub = StubSummarizer(boom)
    compactor = SetupCompactor(settings(stub, pin=pin_tool_errors, fallback=fallback))
    ctx, events = context()
    full = [*tool_loop(0), *rounds(0, 40, {2: ERROR})]
    first = await compactor(full, ctx)
    new = rounds(40, 30, {45: ERROR2})
    second = await compactor([*first, *new], ctx)
    assert_valid_history(second, original=[*first, *new])
    assert [c.method for c in compactions(events)] == [fallback, fallback]
    summary = summary_text(second[1]) or ''
    assert (summary.count(ERROR), summary.count(ERROR2), summary.count(PINNED_HEADING)) == (1, 1, 1)
    assert ctx.estimate(second).total <= TARGET
    # a fallback is never recorded in the prefix cache: a reload compacts again (here, still failing), and
    # the pins are carried once all the same
    reloaded = await compactor(reload([*full, *new]), ctx)
    assert compactions(events)[-1].method == fallback
    again = summary_text(reloaded[1]) or ''
    assert (again.count(ERROR), again.count(ERROR2), again.count(PINNED_HEADING)) == (1, 1, 1)


# ---- end to end ----------------------------------------------------------------------------------------

E2E_TRIGGER, E2E_TARGET, E2E_WINDOW = 8_000, 3_500, 16_000
LOCKED = 'page 2 is locked: retry later with unlock_token=7F3A-QX9'


def pages(fixtures_dir: Path, lines_per_page: int = 30) -> list[str]:
    """Real tool outputs (CSV rows, JSON records) cut into pages."""
    lines: list[str] = []
    for name in ('airports.csv', 'seattle-weather.csv', 'cars.json'):
        lines.extend((fixtures_dir / 'tool_outputs' / 'vega_datasets' / name).read_text().splitlines())
    return ['\n'.join(lines[i : i + lines_per_page]) for i in range(0, len(lines), lines_per_page)]


@pytest.mark.e2e
async def test_pin_tool_errors_keeps_an_early_tool_error_in_every_later_request(fixtures_dir: Path):
    data = pages(fixtures_dir)
    steps = 45

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(provider.requests)
        if step >= steps:
            return ModelResponse(parts=[TextPart('All pages analysed.')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'page': step}, tool_call_id=f'call_{step}')])

    provider = StrictProvider(respond, context_window=E2E_WINDOW)
    summarizer = StubSummarizer()
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        pin=pin_tool_errors,
        policy=ContextPolicy(context_window=E2E_WINDOW, max_tokens=E2E_TRIGGER, target_tokens=E2E_TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        # summaries carry the evicted error in their pinned section (stubs would keep the unit in place)
        compaction=CompactionSettings(summary_max_tokens=600, stub_tool_results=False),
        on_event=events.append,
    )
    agent = agent_with(provider.model(), processor, system_prompt='Read every page with the fetch tool.')

    @agent.tool_plain
    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        if page == 2:
            raise ModelRetry(LOCKED)
        return data[page % len(data)]

    result = await agent.run('Analyse every page.', usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages analysed.'

    # the failed call reached the model as the running version records it, and pin_tool_errors matches it
    assert any(
        pin_tool_errors(m) and LOCKED in texts([m]) + _retry_texts(m) for m in provider.requests[3].history
    )
    assert not [e for e in events if isinstance(e, StageFailed)]
    assert not provider.rejected
    for record in provider.requests:
        assert_valid_history(list(record.history))
    done = compactions(events)
    assert len(done) >= 2
    assert all(c.tokens_after <= E2E_TARGET for c in done)
    evicted_at = next(i for i, c in enumerate(done) if c.pinned_units == 1)
    assert done[evicted_at + 1 :], 'compacted again after the error was evicted'
    assert LOCKED in done[-1].summary
    # the last request the model saw still carries the error, verbatim, in the summary's pinned section
    last = list(provider.requests[-1].history)
    assert not any(pin_tool_errors(m) for m in last), 'the failed call itself was evicted long ago'
    # (2.x merges the summary request into the head request before the model sees it: read it in order)
    seen = '\n'.join(str(getattr(p, 'content', '')) for m in last for p in m.parts)
    assert seen.count(PINNED_HEADING) == 1
    assert LOCKED in seen.split(PINNED_HEADING)[1]
    assert all(LOCKED not in p for p in summarizer.prompts)


def _retry_texts(message: ModelMessage) -> str:
    return '\n'.join(p.model_response() for p in message.parts if isinstance(p, RetryPromptPart))


async def test_a_summary_without_pins_has_no_pinned_heading():
    from pydantic_ai_history.store import MemoryStore

    stub = StubSummarizer()
    compactor = SetupCompactor(settings(stub, stub_tool_results=False))
    ctx, events = context(store=MemoryStore())  # the evicted transcript is stored: the summary names it
    full = [*tool_loop(0), *rounds(0, 40, {}, result)]
    out = await compactor(full, ctx)
    assert_valid_history(out, original=full)
    summary = summary_text(out[1]) or ''
    assert 'summary number 1' in summary
    assert compactions(events)[-1].pinned_units == 0
    assert 'read_artifact' in texts(out)  # the stored transcript is named, without a heading of its own
    assert PINNED_HEADING not in texts(out)
    assert PINNED_HEADING not in summary
    assert PINNED_HEADING not in compactions(events)[-1].summary
