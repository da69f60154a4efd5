"""A compaction event at the trigger: the cheap tier of stubs into the store first, then a bounded summarizer
view and a summary with its trail of exact details, carried forward and pruned."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

import pytest
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from _compaction import (
    HAS_MESSAGE_METADATA,
    TASK,
    SetupCompactor,
    StubSummarizer,
    compaction_setup,
    context,
    prompt_block,
    text,
    tool_loop,
)
from _history import call, reply, result, user
from pydantic_ai_history import CompactionResult, HistoryWarning, assert_valid_history
from pydantic_ai_history._compat import part_metadata, with_part_metadata
from pydantic_ai_history.messages._marks import MARKER_KEY, marker_kind, seal
from pydantic_ai_history.readback import names_readback, read_artifact_text
from pydantic_ai_history.stages.compactor import summary_sections
from pydantic_ai_history.stages.compactor._trail import (
    TrailEntry,
    extract_trail,
    parse_trail,
    prune_trail,
    render_trail,
    trail_from_data,
)
from pydantic_ai_history.store import MemoryStore, StoreError
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio

COUNTER = TokenCounter('gpt-4o')


class CountingStore(MemoryStore):
    """A memory store that counts its writes (what was really stored, not what was asked)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.fail = fail

    async def _put(self, artifact_id: str, data: bytes, *args: Any) -> Any:
        if self.fail:
            raise StoreError('disk full')
        self.writes.append(artifact_id)
        return await super()._put(artifact_id, data, *args)


async def run(
    messages: list[ModelMessage], store: MemoryStore | None = None, **settings: Any
) -> tuple[list[ModelMessage], list[Any], StubSummarizer, Any]:
    stub = StubSummarizer()
    settings.setdefault('max_tokens', 20_000)
    settings.setdefault('target_tokens', 8_000)
    ctx, events = context(store=store if store is not None else MemoryStore())
    before = copy.deepcopy(messages)
    out = await SetupCompactor(compaction_setup(summarizer_model=stub.model(), **settings))(messages, ctx)
    assert messages == before, 'the input was mutated'
    assert_valid_history(out, original=messages)
    return out, events, stub, ctx


def stubbed(message: ModelMessage) -> list[ToolReturnPart]:
    return [
        p
        for p in message.parts
        if isinstance(p, ToolReturnPart) and part_metadata(p).get(MARKER_KEY, {}).get('strategy') == 'stub'
    ]


async def test_at_the_trigger_old_outputs_become_stubs_and_no_summarizer_is_called() -> None:
    messages = tool_loop(30)  # about 31K tokens: over the 20K trigger; stubs alone reach the 8K target
    store = CountingStore()
    out, events, stub, ctx = await run(messages, store)
    assert stub.calls == 0
    [done] = [e for e in events if isinstance(e, CompactionResult)]
    assert (done.method, done.summarizer_calls, done.evicted_messages, done.summary) == ('stubs', 0, 0, '')
    assert done.tokens_after == ctx.estimate(out).total <= 8_000
    assert len(out) == len(messages), 'nothing is summarized: every message stays, old outputs as stubs'
    assert out[-2] is messages[-2]
    assert out[-1] is messages[-1], 'the verbatim tail is kept as it is'
    parts = [p for m in out for p in stubbed(m)]
    assert done.stubbed_parts == len(parts) == len(store.writes) >= 20
    first = parts[0]
    assert isinstance(first.content, str)
    assert 'fetch(page=0) returned' in first.content, 'the call and its arguments'
    assert 'characters' in first.content, 'its size'
    assert 'It began: STEP-000 the quick brown fox' in first.content, 'how it began'
    ours = part_metadata(first)[MARKER_KEY]
    assert ours['strategy'] == 'stub'
    assert ours['original_tokens'] > 900
    assert f'read_artifact(artifact_id="{ours["artifact_id"]}"' in first.content
    assert names_readback(next(m for m in out if stubbed(m)))
    original = messages[2].parts[0].content
    assert await read_artifact_text(store, ours['artifact_id'], limit=100_000, scope=ctx.scope) == (
        f'[{ours["artifact_id"]}: characters 0-{len(original):,} of {len(original):,}.]\n{original}'
    ), 'read back exactly'


async def test_stubs_below_the_trigger_and_on_demand_never_happen() -> None:
    messages = tool_loop(10)
    out, events, _, _ = await run(messages)
    assert out is messages
    assert events == []
    stub = StubSummarizer()
    ctx, events = context(store=MemoryStore())
    compactor = SetupCompactor(
        compaction_setup(summarizer_model=stub.model(), max_tokens=20_000, target_tokens=8_000)
    )
    out = await compactor.compact_history(tool_loop(30), ctx)
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['llm'], (
        'compact() asks for a summary: it gets one'
    )


async def test_repeated_results_are_stored_once_and_a_call_made_again_is_said_so() -> None:
    page = text(1_000, 'SAME-PAGE')
    messages = tool_loop(1)
    for i in range(3):  # the same call, the same content, three times
        messages += [call('read', f'same{i}', {'path': 'a.txt'}), result('read', f'same{i}', page)]
    messages += [call('read', 'v1', {'path': 'b.txt'}), result('read', 'v1', text(1_000, 'B-OLD'))]
    messages += tool_loop(20, tag='pad')[1:]
    messages += [call('read', 'v2', {'path': 'b.txt'}), result('read', 'v2', text(1_000, 'B-NEW'))]
    messages += tool_loop(3, tag='end')[1:]
    store = CountingStore()
    out, events, stub, _ = await run(messages, store)
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['stubs']
    assert stub.calls == 0
    same = [p for m in out for p in stubbed(m) if p.tool_call_id.startswith('same')]
    assert len(same) == 3
    ids = {part_metadata(p)[MARKER_KEY]['artifact_id'] for p in same}
    assert len(ids) == 1, 'one stored copy'
    assert store.writes.count(ids.pop()) == 1
    assert all('returned the same' in str(p.content) for p in same[1:]), 'later stubs point to the first'
    [older] = [p for m in out for p in stubbed(m) if p.tool_call_id == 'v1']
    assert 'the same call was made again later' in str(older.content)
    assert 'It began' not in str(older.content)


async def test_an_output_the_artifact_stage_reduced_points_to_its_stored_original() -> None:
    messages = tool_loop(30)
    reduced = messages[4].parts[0]
    assert isinstance(reduced, ToolReturnPart)
    marker = {'artifact_id': 'art_' + 'a' * 64, 'original_tokens': 50_000, 'strategy': 'extract'}
    messages[4] = ModelRequest(
        parts=[
            with_part_metadata(
                dataclasses.replace(reduced, content=text(2_000, 'EXTRACT')), {MARKER_KEY: marker}
            )
        ]
    )
    store = CountingStore()
    out, _, _, _ = await run(messages, store)
    [part] = stubbed(out[4])
    assert part_metadata(part)[MARKER_KEY]['artifact_id'] == 'art_' + 'a' * 64
    assert '~50,000 tokens' in str(part.content)
    assert 'art_' + 'a' * 64 not in store.writes, 'already stored: not written again'


async def test_an_old_attachment_becomes_a_stub_and_its_bytes_are_stored() -> None:
    png = BinaryContent(data=b'\x89PNG\r\n\x1a\n' + bytes(range(256)) * 400, media_type='image/png')
    messages = tool_loop(1)
    messages += [reply('Send the screenshot.'), ModelRequest(parts=[UserPromptPart(['here it is', png])])]
    messages += [reply('Thanks.'), user('now fetch the pages')]
    messages += tool_loop(30, tag='page')[1:]
    store = CountingStore()
    out, _, _, ctx = await run(messages, store, stub_min_tokens=100)
    request = out[4]
    assert isinstance(request, ModelRequest)
    [part] = request.parts
    assert isinstance(part, UserPromptPart)
    assert part.content[0] == 'here it is', "the user's words stay"
    assert isinstance(part.content[1], str)
    assert 'attached file' in part.content[1]
    [artifact] = re.findall(r'art_[0-9a-f]{32}', part.content[1])
    assert await store.get(artifact, scope=ctx.scope) == png.data


async def test_when_the_store_fails_the_outputs_stay_and_the_summary_decides() -> None:
    messages = tool_loop(30)
    store = CountingStore(fail=True)
    ctx, events = context(store=store, context_window=128_000)
    stub = StubSummarizer()
    compactor = SetupCompactor(
        compaction_setup(summarizer_model=stub.model(), max_tokens=20_000, target_tokens=8_000)
    )
    out = await compactor(messages, ctx)
    assert out is messages, 'nothing stored, nothing removed: the history still fits the window'
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes == ['artifact_store_failed', 'transcript_store_failed', 'compaction_deferred']


async def test_when_stubs_are_not_enough_the_summary_goes_deep() -> None:
    messages = tool_loop(80, tokens=400)  # 80 stubs of ~130 tokens would still be over the 8K target
    out, events, stub, ctx = await run(messages)
    [done] = [e for e in events if isinstance(e, CompactionResult)]
    assert done.method == 'llm'
    assert stub.calls == 1
    assert marker_kind(out[1]) == 'summary'
    tail = ctx.counter.count_messages(out[2:])
    assert tail <= 8_000 // 4 or len(out) == 4, 'the verbatim tail is a quarter of the target (or one unit)'


async def test_the_latest_user_prompt_stays_out_of_the_summary_when_it_fits() -> None:
    messages = tool_loop(55, tokens=400)
    messages += [reply('Done with that.'), user('NEW-TASK: now compare page 3 with page 30.')]
    messages += tool_loop(8, tokens=400, tag='cmp')[1:]
    out, _, _, _ = await run(messages, stub_tool_results=False)
    assert marker_kind(out[1]) == 'summary'
    kept = [m for m in out[2:] if isinstance(m, ModelRequest)]
    assert any('NEW-TASK' in str(p.content) for m in kept for p in m.parts if isinstance(p, UserPromptPart))


async def test_the_summarizer_sees_a_bounded_view_and_the_store_keeps_everything() -> None:
    messages = tool_loop(60, tokens=2_000)  # about 120K tokens evicted
    store = MemoryStore()
    out, _, stub, ctx = await run(
        messages,
        store,
        max_tokens=100_000,
        target_tokens=30_000,
        stub_tool_results=False,
        summarizer_view_tokens=12_000,
    )
    [prompt] = stub.prompts
    view = prompt_block(prompt, 'messages')
    assert ctx.counter.count_text(view) <= 12_000
    assert 'STEP-000' in view
    assert 'tokens in all (stored whole)' in view
    sections = summary_sections(out[1])
    assert sections is not None
    [reference] = [line for line in sections.reference.split('read_artifact(artifact_id="')[1:]]
    stored = await store.get(reference.split('"', 1)[0], scope=ctx.scope)
    assert stored is not None
    assert all(f'STEP-{i:03d}' in stored.decode() for i in range(50)), 'the whole transcript is stored'


async def test_the_trail_keeps_exact_details_as_data_carried_forward_and_pruned() -> None:
    budget_target = 8_000  # the trail may take a tenth: 800 tokens
    messages = [
        *tool_loop(1, task=TASK),
        call('shell', 'c1', {'command': 'pytest -q tests/test_billing.py --maxfail=1'}),
        result(
            'shell', 'c1', 'FAILED tests/test_billing.py::test_refund - ValueError: amount must be positive'
        ),
        user('Never touch the production replica before Friday.'),
        reply('Understood: the replica stays until Friday. Order ORD-77812 costs $1,249.50.'),
        *tool_loop(45, tokens=500, tag='first')[1:],
    ]
    out, _, _, ctx = await run(messages, stub_tool_results=False, target_tokens=budget_target)
    sections = summary_sections(out[1])
    assert sections is not None
    values = [entry.value for entry in sections.trail]
    for detail in (
        'pytest -q tests/test_billing.py --maxfail=1',
        'tests/test_billing.py',
        'ValueError: amount must be positive',
        'Never touch the production replica before Friday.',
        'ORD-77812',
        '$1,249.50',
    ):
        assert detail in values, detail
    assert not any(v.startswith('art_') for v in values), 'our own ids are not details of the conversation'
    assert ctx.counter.count_text(render_trail(sections.trail)) <= budget_target // 10
    kept_tail = '\n'.join(str(getattr(p, 'content', '')) for m in out[2:] for p in m.parts)
    assert not any(v in kept_tail for v in values if v.startswith('FIRST-')), (
        'what stays verbatim is not repeated'
    )
    if HAS_MESSAGE_METADATA:
        assert trail_from_data(out[1].metadata[MARKER_KEY]['trail']) == sections.trail  # type: ignore[attr-defined]

    # the next compaction carries the trail forward and prunes it to the budget
    later = [*out, *tool_loop(40, tokens=500, tag='second')[1:]]
    again, events, _, ctx = await run(later, stub_tool_results=False, target_tokens=budget_target)
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['llm']
    carried = summary_sections(again[1])
    assert carried is not None
    kept = [entry.value for entry in carried.trail]
    assert 'Never touch the production replica before Friday.' in kept, 'the constraint is carried forward'
    assert 'ORD-77812' in kept
    assert any(v.startswith('SECOND-') for v in kept), 'and the new details join it'
    assert ctx.counter.count_text(render_trail(carried.trail)) <= budget_target // 10


def test_the_trail_reads_back_from_its_text_where_messages_have_no_metadata() -> None:
    entries = [
        TrailEntry('path', 'src/app.py', 'edit_file path'),
        TrailEntry('identifier', 'ORD-77812'),
        TrailEntry('constraint', 'Never on Fridays.'),
    ]
    text_form = render_trail(entries)
    assert parse_trail(seal('trail', text_form).rsplit('\n', 1)[0]) == [
        ('constraint', 'Never on Fridays.', ''),
        ('path', 'src/app.py', 'edit_file path'),
        ('identifier', 'ORD-77812', ''),
    ]
    found = extract_trail([user('Deploy api-gateway-7 to eu-west-3 before 2026-01-01; never on Fridays.')])
    assert ('identifier', 'api-gateway-7', 'Deploy … to eu-west-3') in found
    amounts = [TrailEntry('amount', str(n)) for n in range(1000, 1400)]
    pruned = prune_trail([], amounts, budget=100, counter=COUNTER)
    assert 0 < len(pruned) < 400
    assert pruned[-1] == ('amount', '1399', ''), 'the newest details of a kind are kept first'
    # summaries written before details had their meaning read back as they were
    assert trail_from_data([['amount', '$300']]) == (('amount', '$300', ''),)


def test_each_detail_keeps_what_it_is_about() -> None:
    details = {
        'user_id': 'mohamed_silva_9265',
        'payment_methods': {
            'gift_card_7219': {'source': 'gift_card', 'amount': 300},
            'certificate_9984806': {'source': 'certificate', 'amount': 500},
        },
    }
    found = extract_trail(
        [
            user('Change reservation ABC123 and pay $500 with the gift card.'),
            call('get_user_details', 'c1', {'user_id': 'mohamed_silva_9265'}),
            result('get_user_details', 'c1', json.dumps(details)),
            reply('The total is $1,200: $400 remains to pay by card.'),
        ]
    )
    # a field names what its value is, after the object it belongs to
    assert ('amount', '300', 'gift_card_7219 amount') in found
    assert ('amount', '500', 'certificate_9984806 amount') in found
    assert ('identifier', 'mohamed_silva_9265', 'get_user_details user_id') in found, 'the call that sent it'
    # in prose, the words around the value in its sentence
    assert ('amount', '$500', 'ABC123 and pay … with the') in found
    assert ('amount', '$400', 'total is $1,200: … remains to') in found
    assert [e.about for e in found if e.value == 'mohamed_silva_9265'] == ['get_user_details user_id'], 'once'
    assert '  300 — gift_card_7219 amount' in render_trail(found)


async def test_a_read_back_is_stubbed_without_storing_it_again() -> None:
    messages = tool_loop(2)
    read = {'artifact_id': 'art_' + 'b' * 64, 'query': 'STEP-001'}
    messages += [call('read_artifact', 'r1', read), result('read_artifact', 'r1', text(1_500, 'READ-BACK'))]
    messages += tool_loop(30, tag='more')[1:]
    store = CountingStore()
    out, _, _, _ = await run(messages, store)
    [part] = [p for m in out for p in stubbed(m) if p.tool_call_id == 'r1']
    assert 'from the store: the same call reads them again' in str(part.content)
    assert "read_artifact(artifact_id='art_bbbb" in str(part.content)
    assert len(store.writes) == len([p for m in out for p in stubbed(m)]) - 1, 'everything but the read-back'


def test_a_repeat_stub_points_only_to_an_original_that_is_stored() -> None:
    """The first copy of an output can be too small to stub (its stub, with the head it began with, costs
    more); a later identical copy must then not become a repeat stub naming an id nothing stored."""
    import hashlib

    from pydantic_ai_history.stages.compactor._stubs import plan_stubs

    output = ' '.join(f'row {n}: status ok, latency {n * 7} ms' for n in range(18))
    messages = [
        user('check the service'),
        call('probe', 'c1', {'target': 'api'}),
        result('probe', 'c1', output),
        call('probe', 'c2', {'target': 'api-replica'}),
        result('probe', 'c2', output),
        reply('done'),
        user('and now?'),
    ]
    stubs = plan_stubs(
        messages,
        [(0, len(messages))],
        counter=COUNTER,
        make_id=lambda data: f'art_{hashlib.sha256(data).hexdigest()}',
        min_tokens=1,
        head_chars=len(output),  # a first stub carries the whole output: never smaller than it
    )
    stored = {s.artifact_id for s in stubs if s.data is not None}
    assert [s.artifact_id for s in stubs if s.artifact_id not in stored] == []
