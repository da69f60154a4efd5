"""The cost benchmark's instruments (benchmarks/cost): pricing, rewrite detection, fact counting, step
latency on hand-checked cases, and a small run of ours through the real `Agent` whose bill is re-derived
from the provider's records. Nothing is timed; no peer package is needed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

BENCHMARKS = Path(__file__).resolve().parents[1] / 'benchmarks'
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from cost.accounting import bill, step_latency  # noqa: E402
from cost.facts import ARTIFACT_ID, SPILL_HANDLE, count_facts, named_ids  # noqa: E402
from cost.pricing import (  # noqa: E402
    Billed,
    Block,
    BreakpointCache,
    Prices,
    automatic_billing,
    automatic_cached_tokens,
    common_prefix,
)
from cost.provider import RequestRecord  # noqa: E402
from cost.summarizer import SummarizerCall  # noqa: E402


def _words(text: str) -> list[str]:
    return text.split()


def _part(text: str, tokens: int | None = None) -> Block:
    return Block(('part', text), tokens if tokens is not None else len(text.split()), text)


# ---- automatic prefix caching ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('common', 'cached'),
    [(0, 0), (1_023, 0), (1_024, 1_024), (1_151, 1_024), (1_152, 1_152), (5_000, 4_992), (5_120, 5_120)],
)
def test_automatic_cache_counts_1024_then_steps_of_128(common: int, cached: int) -> None:
    assert automatic_cached_tokens(common) == cached


def test_automatic_billing_reads_the_cached_part_and_writes_the_rest() -> None:
    assert automatic_billing(5_000, 3_000) == Billed(5_000, 2_944, 2_056, 0)
    assert automatic_billing(900, 900) == Billed(900, 0, 900, 0)  # too short to be cached at all


def test_common_prefix_counts_equal_blocks_then_the_shared_tokens_of_the_first_that_differs() -> None:
    previous = [Block(('tool', 't'), 100, 't'), _part('a b c d'), _part('e f g h'), _part('i j')]
    same = common_prefix(previous, previous, _words)
    assert (same.tokens, same.blocks) == (110, 4)
    changed = [Block(('tool', 't'), 100, 't'), _part('a b c d'), _part('e f X h'), _part('i j')]
    prefix = common_prefix(previous, changed, _words)
    assert (prefix.tokens, prefix.blocks) == (100 + 4 + 2, 2)  # 'e f' still shared inside the third block
    other_kind = [Block(('tool', 't'), 100, 't'), Block(('header', 'request'), 4, 'a b c d')]
    assert common_prefix(previous, other_kind, _words).tokens == 100  # a different kind shares nothing


# ---- breakpoint caching ------------------------------------------------------------------------------------


def _request(parts: int, changed_at: int | None = None) -> list[Block]:
    blocks = [Block(('tool', 'tools'), 600, 'tools'), Block(('instructions', 'be brief'), 600, 'be brief')]
    for i in range(parts):
        text = f'changed {i}' if i == changed_at else f'part {i}'
        blocks.append(Block(('part', text), 100, text))
    return blocks


def _marks(blocks: list[Block]) -> list[int]:
    return [0, 1, len(blocks) - 1]  # after the tools, after the instructions, at the end


def test_breakpoint_cache_reads_the_previous_end_and_writes_what_follows() -> None:
    cache = BreakpointCache()
    first = _request(10)
    # the tools alone (600) are under the 1,024-token minimum: not written; the rest is
    assert cache.bill(first, _marks(first)) == Billed(2_200, 0, 2_200, 0)
    second = _request(12)
    assert cache.bill(second, _marks(second)) == Billed(2_400, 2_200, 200, 0)


def test_breakpoint_cache_lookback_is_twenty_content_blocks() -> None:
    cache = BreakpointCache()
    first = _request(30)
    cache.bill(first, _marks(first))
    # a change 10 blocks from the end: no entry ends after the change; the one before it (the instructions',
    # 1,200 tokens) is found from the instructions' own breakpoint, and everything after it is written
    rewritten = _request(30, changed_at=20)
    assert cache.bill(rewritten, _marks(rewritten)) == Billed(4_200, 1_200, 3_000, 0)
    # appending 21 blocks after the last entry: no entry within 20 blocks of the end; the instructions' is
    longer = _request(51, changed_at=20)
    assert cache.bill(longer, _marks(longer)).cache_read == 1_200
    # appending 20: the end of `longer` is 20 blocks back, exactly in reach
    longest = _request(71, changed_at=20)
    assert cache.bill(longest, _marks(longest)).cache_read == 1_200 + 51 * 100


def test_breakpoint_cache_bills_plain_input_without_breakpoints_or_under_the_minimum() -> None:
    assert BreakpointCache().bill(_request(3), []) == Billed(1_500, 0, 0, 1_500)
    short = [Block(('instructions', 'be brief'), 500, 'be brief'), Block(('part', 'hi'), 400, 'hi')]
    assert BreakpointCache().bill(short, [0, 1]) == Billed(900, 0, 0, 900)  # under 1,024 tokens: not cached


def test_prices_add_up_per_million() -> None:
    prices = Prices()
    billed = Billed(2_000_000, 1_000_000, 600_000, 400_000)
    assert prices.request(billed, 100_000) == pytest.approx(0.30 + 0.6 * 3.75 + 0.4 * 3.0 + 1.5)
    assert prices.uncached(1_000_000, 1_000) == pytest.approx(3.0 + 0.015)


# ---- the provider: rewrites, rejections, the bill ----------------------------------------------------------


def _history(outputs: list[str]) -> list[ModelMessage]:
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit the exports.')])]
    for i, output in enumerate(outputs):
        call = ToolCallPart('call_api', {'step': i}, tool_call_id=f'call_{i}')
        messages.append(ModelResponse(parts=[TextPart(f'Reading {i}.'), call]))
        messages.append(ModelRequest(parts=[ToolReturnPart('call_api', output, tool_call_id=f'call_{i}')]))
    return messages


@pytest.fixture
def provider(tiktoken_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(tiktoken_cache_dir))
    from cost.provider import CostProvider

    return CostProvider(lambda index: ModelResponse(parts=[TextPart('ok')]), context_window=5_000)


def test_provider_counts_a_rewrite_only_when_something_already_sent_changes(provider: object) -> None:
    from cost.provider import CostProvider

    assert isinstance(provider, CostProvider)
    outputs = [f'record {i} ' * 200 for i in range(3)]
    first = provider.record(_history(outputs[:2]), None, 0.0)
    appended = provider.record(_history(outputs), None, 0.0)
    assert not first.rewrite
    assert not appended.rewrite
    assert appended.common_tokens == first.tokens - 3  # everything but the previous reply priming
    stubbed = provider.record(_history(['[stub]', *outputs[1:]]), None, 0.0)
    assert stubbed.rewrite
    assert stubbed.rewrite_tokens == stubbed.tokens - stubbed.common_tokens > 0
    huge = provider.record(_history([*outputs, 'x ' * 6_000]), None, 0.0)
    assert huge.rejected is not None  # over the window: a 400, not billed
    assert huge.automatic is None
    broken = [*_history(outputs)[:-1], ModelRequest(parts=[UserPromptPart('next')])]
    assert provider.record(broken, None, 0.0).rejected == "tool calls without results: ['call_2']"
    # the provider's count is the peers' ruler's, instructions and tools aside
    from peers._strict import count_history

    assert stubbed.tokens == count_history(_history(['[stub]', *outputs[1:]]), provider.encode)


def _record(index: int, tokens: int, **kwargs: object) -> RequestRecord:
    fields: dict[str, object] = {
        'index': index,
        'tokens': tokens,
        'rejected': None,
        'common_tokens': 0,
        'rewrite': False,
        'rewrite_tokens': 0,
        'automatic': automatic_billing(tokens, 0),
        'breakpoint': Billed(tokens, 0, tokens, 0),
        'output_tokens': 10,
        'arrived': float(index),
        'answered': index + 0.5,
    }
    fields.update(kwargs)
    return RequestRecord(**fields)  # type: ignore[arg-type]


def test_bill_adds_main_requests_and_the_uncached_summarizer() -> None:
    requests = [
        _record(0, 2_000),
        _record(1, 3_000, automatic=automatic_billing(3_000, 2_000), rewrite=True, rewrite_tokens=1_500),
        _record(2, 9_000, rejected='over', automatic=None, breakpoint=None),
    ]
    calls = [SummarizerCall(10_000, 600, 0.6, 0.9)]
    result = bill(requests, calls, Prices())
    assert result['input_tokens'] == 5_000
    assert (result['rejected'], result['first_rejected']) == (1, 2)
    assert result['largest_request'] == 9_000
    assert (result['rewrites'], result['rewrite_tokens'], result['rewrite_at']) == (1, 1_500, [1])
    # prefix: request 1 reads 1,920 (1,024 + 7 x 128) of its 2,000 shared tokens, writes the other 1,080
    read, written = 1_920, 2_000 + 1_080
    summarizer = (10_000 * 3.0 + 600 * 15.0) / 1e6
    expected = (read * 0.30 + written * 3.75 + 20 * 15.0) / 1e6 + summarizer
    assert result['automatic']['cost'] == pytest.approx(expected, abs=1e-4)
    assert result['automatic']['cache_hit'] == pytest.approx(read / 5_000)
    assert result['summarizer']['cost'] == pytest.approx(summarizer, abs=1e-4)


def test_step_latency_is_the_compaction_steps_time_over_the_median_step() -> None:
    # answered -> next arrival: 0.1 s normally, 2.1 s when the summarizer ran in between (step 2 -> 3)
    times = [(0.0, 0.5), (0.6, 1.0), (1.1, 1.5), (3.6, 4.0), (4.1, 4.5)]
    requests = [_record(i, 100, arrived=a, answered=b, rewrite=(i == 3)) for i, (a, b) in enumerate(times)]
    latency = step_latency(requests, [SummarizerCall(1, 1, 1.6, 3.55)])
    assert latency['compaction_steps'] == 1
    assert latency['normal_step_seconds'] == pytest.approx(0.1)
    assert latency['added_seconds_mean'] == pytest.approx(2.0)


# ---- facts -------------------------------------------------------------------------------------------------


def test_named_ids_find_our_artifact_ids_and_harness_spill_handles() -> None:
    ours = 'see [pydantic-ai-history: artifact art_' + 'ab12' * 16 + ' stored] and art_' + 'cd34' * 16
    first, second = 'art_' + 'ab12' * 16, 'art_' + 'cd34' * 16
    assert named_ids(f'{ours} {first}', ARTIFACT_ID) == [first, second]
    harness = (
        "[Tool output too large (20,719 chars); stored to handle '/tmp/s/run/call_1.0'. Read it with "
        "read_tool_result(handle='/tmp/s/run/call_1.0', offset=0, limit=200, from_end=False, pattern=None).]"
    )
    assert named_ids(harness, SPILL_HANDLE) == ['/tmp/s/run/call_1.0']


@pytest.mark.anyio
async def test_count_facts_in_context_then_one_read_away() -> None:
    stored = {'art_1': 'nothing here', 'art_2': 'the amount $12,345.67 was disputed'}
    reads: list[tuple[str, str]] = []

    async def read(artifact_id: str, fact: str) -> str:
        reads.append((artifact_id, fact))
        return stored[artifact_id] if fact in stored[artifact_id] else ''

    facts = ['INV-7QXK-48213', '$12,345.67', '/srv/a/b.json']
    kept = await count_facts(facts, 'context mentions INV-7QXK-48213', ['art_1', 'art_2'], read)
    assert kept.in_context == ('INV-7QXK-48213',)
    assert kept.one_read_away == ('$12,345.67',)
    assert kept.answers == ('the amount $12,345.67 was disputed',)  # what its read-back is billed for
    assert (kept.kept, kept.ids_named) == (2, 2)
    assert ('art_1', 'INV-7QXK-48213') not in reads  # a fact in context is not read back
    no_reader = await count_facts(facts, '', ['art_2'], None)
    assert no_reader.kept == 0  # no read-back tool: nothing is one read away


def test_a_read_back_is_billed_as_one_more_request_from_the_cache_and_its_call() -> None:
    from cost.accounting import READBACK_FRAMING_TOKENS, readback_bill

    def words(text: str) -> int:
        return len(text.split())

    prices = Prices()
    one = readback_bill(10_000, [('$12,345.67', 'a b c d e f g h')], words, prices)
    call = (
        words(json.dumps({'artifact_id': 'art_' + '0' * 32, 'query': '$12,345.67'})) + READBACK_FRAMING_TOKENS
    )
    answer = 8 + READBACK_FRAMING_TOKENS
    assert (one['calls'], one['output_tokens'], one['answer_tokens']) == (1, call, answer)
    assert one['input_tokens'] == 10_000 + call + answer
    written = (call + answer) * prices.cache_write
    assert one['cost']['breakpoint'] == pytest.approx(
        (10_000 * prices.cache_read + written + call * prices.output) / 1e6, abs=1e-4
    )
    # twice the facts, twice the bill; none, nothing
    two = readback_bill(10_000, [('$12,345.67', 'a b c d e f g h')] * 2, words, prices)
    assert two['cost']['automatic'] == pytest.approx(
        2 * one['cost']['automatic'], abs=2e-4
    )  # rounded to 4 places
    assert readback_bill(10_000, [], words, prices)['cost'] == {'automatic': 0.0, 'breakpoint': 0.0}


@pytest.mark.anyio
async def test_an_echo_of_the_query_is_not_a_find() -> None:
    """A reader that repeats its query on a miss (ours: `[no stored passage matched 'X' ...]`) finds nothing;
    one that repeats it and also returns a passage holding it finds it."""
    stored = 'the amount $12,345.67 was disputed'

    async def echoing_search(query: str) -> str:
        passages = [stored] if query in stored else []
        return '\n'.join([f'[{len(passages)} passage(s) for {query!r}]', *passages])

    facts = ['$12,345.67', 'INV-7QXK-48213']
    kept = await count_facts(facts, '', [], None, echoing_search)
    assert kept.one_read_away == ('$12,345.67',)


# ---- the workload and a small real run ---------------------------------------------------------------------


@pytest.fixture
def encode(shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """The workload reads the tool outputs in ../shared/fixtures itself."""
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(shared_dir / 'tiktoken-cache'))
    from peers._strict import Encoder

    return Encoder()


def test_workload_is_deterministic_and_plants_each_fact_once(encode: object) -> None:
    from cost.workload import build_workload, fact_steps

    first = build_workload(40, encode)  # type: ignore[arg-type]
    again = build_workload(40, encode)  # type: ignore[arg-type]
    assert first == again
    assert len(first.facts) == 30
    assert [f.step for f in first.facts] == fact_steps(40)
    assert len({f.text for f in first.facts}) == 30
    texts = [s.output if isinstance(s.output, str) else json.dumps(s.output) for s in first.steps]
    for fact in first.facts:
        assert [i for i, t in enumerate(texts) if fact.text in t] == [fact.step]
    assert fact_steps(180) == [3 + 6 * k for k in range(30)]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_summary_made_while_the_run_goes_on_lasts_its_requests_and_one_waited_for_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cost runs' time in requests: a summarizer call made beside the run (a background summary) ends
    after `requests` model requests; one the run waits for (no request comes) ends without any."""
    import asyncio

    from cost import provider as provider_module
    from cost.provider import RequestClock

    monkeypatch.setattr(provider_module, 'IDLE_SECONDS', 0.05)
    monkeypatch.setattr(provider_module, 'REQUEST_SECONDS', 0.01)  # each request leaves the loop to others
    clock = RequestClock(requests=3)
    ended_at: list[int] = []

    async def summarize() -> None:
        await clock.wait()
        ended_at.append(clock.count)

    background = asyncio.create_task(summarize())
    await asyncio.sleep(0)  # the call starts before the next request
    for _ in range(5):
        await clock.tick()
    await background
    assert ended_at == [3]

    await clock.wait()  # waited for: no request comes, so it answers after IDLE_SECONDS, at no request
    assert clock.count == 5
    assert await asyncio.wait_for(RequestClock(requests=0).wait(), 1.0) is None


@pytest.mark.e2e
@pytest.mark.anyio
async def test_a_small_run_of_ours_is_billed_from_what_the_provider_received(encode: object) -> None:
    capabilities = pytest.importorskip(
        'pydantic_ai.capabilities', reason='the cost run needs pydantic-ai 2.x'
    )
    if not hasattr(capabilities, 'Caching'):
        pytest.skip('the cost run needs pydantic-ai 2.x (its Caching capability)')
    from cost.run import RunConfig, run_one
    from cost.workload import build_workload

    workload = build_workload(24, encode)  # type: ignore[arg-type]
    prices = Prices()
    # 8K: large outputs are reduced as they arrive, so a small window is what makes this loop compact
    ours = await run_one(RunConfig('ours', 8_000, 24), workload, encode, prices)  # type: ignore[arg-type]
    none = await run_one(RunConfig('none', 8_000, 24), workload, encode, prices)  # type: ignore[arg-type]

    assert ours['error'] is None
    assert (ours['requests'], ours['rejected']) == (25, 0)
    assert ours['largest_request'] <= 8_000
    assert ours['rewrites'] >= 2  # the history had to be compacted (and the read-back tool came)
    for mode in ('automatic', 'breakpoint'):
        parts = ours[mode]['cache_read'] + ours[mode]['cache_write'] + ours[mode]['uncached']
        assert parts == ours['input_tokens']
        assert 0 < ours[mode]['cache_hit'] < 1
        total = ours[mode]['main_cost'] + ours['summarizer']['cost'] + ours['readbacks']['cost'][mode]
        assert ours[mode]['cost'] == pytest.approx(total, abs=1e-3)
    # every fact one read away is paid for by one read-back of the final context, its call and its answer
    assert ours['readbacks']['calls'] == ours['facts']['one_read_away'] > 0
    readbacks = ours['readbacks']
    assert 0 < readbacks['context_tokens'] <= ours['largest_request']
    billed = (
        readbacks['calls'] * readbacks['context_tokens']
        + readbacks['output_tokens']
        + readbacks['answer_tokens']
    )
    assert readbacks['input_tokens'] == billed
    assert ours['facts']['total'] == 24
    assert ours['facts']['in_context'] + ours['facts']['one_read_away'] == 24  # none lost
    # without management the same loop overflows the window; what the model last saw kept every fact so far
    assert none['rejected'] > 0
    assert none['first_rejected'] is not None
    assert none['largest_request'] > 8_000
    assert none['facts']['in_context'] == len(
        [f for f in workload.facts if f.step < none['first_rejected'] - 1]
    )


def test_the_driver_parses_windows_and_renders_a_saved_run() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location('bench_cost', BENCHMARKS / 'bench_cost.py')
    assert spec is not None
    assert spec.loader is not None
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    assert driver.parse_windows('64K, 128000,0.5K') == [64_000, 128_000, 500]
    payload = json.loads((BENCHMARKS / 'results' / 'cost.json').read_text())
    text = driver.section(payload)
    ours = next(r for r in payload['runs'] if r['contender'] == 'ours' and r['window'] == 128_000)
    row = next(
        line for line in text.split('**128K window**')[1].splitlines() if line.startswith('| ours, defaults')
    )
    assert f'| {ours["automatic"]["cost"]:.2f} | {ours["breakpoint"]["cost"]:.2f} |' in row
    assert f'| {ours["rewrites"]} (' in row
    windows = {r['window'] for r in payload['runs']}
    assert text.count('| no context management | overflows at request') == len(windows)
