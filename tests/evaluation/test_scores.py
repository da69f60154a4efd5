"""The model-free scores on a hand-built session: every strategy compacts the same cut."""

from __future__ import annotations

import pytest

from _eval_session import OLDER, session
from pydantic_ai_history import TokenCounter, validate_history
from pydantic_ai_history.evaluation import (
    EvalSettings,
    context_text,
    evaluate,
    extract_facts,
    fact_probes,
    present_share,
    recoverable_share,
    scripted_summarizer,
    session_from_messages,
)
from pydantic_ai_history.evaluation._sessions import kept_head, tail_start
from pydantic_ai_history.evaluation._strategies import (
    Cut,
    digest_strategy,
    harness_strategy,
    metered,
    summarization_strategy,
    summary_strategy,
    window_strategy,
)

pytestmark = pytest.mark.anyio
COUNTER = TokenCounter('openai:gpt-4o')


async def _cut() -> tuple[list, Cut, int, int]:
    messages = session()
    total = COUNTER.estimate(messages).total
    target = total // 3 + 2_140
    digest = await digest_strategy(messages, total, target)
    start = tail_start(messages, digest.messages)
    assert start is not None
    assert start > OLDER
    return messages, Cut(head=kept_head(messages, digest.messages), start=start), total, target


async def test_every_strategy_keeps_the_same_tail_and_a_valid_history() -> None:
    messages, cut, total, target = await _cut()
    assert cut.head == 1  # system prompt and task
    ours = await summary_strategy(messages, cut, metered(scripted_summarizer()), total, target)
    window = await window_strategy(messages, cut, None)
    digest = await digest_strategy(messages, total, target)
    assert ours.note == ''
    assert ours.calls >= 1
    assert ours.tokens_spent > 0
    for compacted in (ours, window, digest):
        assert compacted.messages[-(len(messages) - cut.start) :] == messages[cut.start :]
        assert validate_history(compacted.messages) == []


async def test_window_recovers_nothing_and_ours_recovers_at_least_as_much() -> None:
    messages, cut, total, target = await _cut()
    probes = fact_probes(extract_facts(messages[cut.head : cut.start]))
    assert len(probes) >= 6
    scores = {}
    for compacted in (
        await window_strategy(messages, cut, None),
        await digest_strategy(messages, total, target),
        await summary_strategy(messages, cut, metered(scripted_summarizer()), total, target),
    ):
        context = context_text(compacted.messages, COUNTER)
        recovered = await recoverable_share(probes, context, compacted.store, compacted.scope)
        present = present_share([p.answer for p in probes], context)
        scores[compacted.strategy] = (sum(present), sum(recovered))
    assert scores['window'][1] == 0
    assert scores['digest'][1] >= scores['window'][1]
    assert scores['summary'][1] == len(probes)  # one read of the stored transcript finds each fact
    assert scores['digest'][0] > scores['window'][0]  # the digest keeps the user's words and the calls


async def test_a_context_that_keeps_everything_scores_every_fact_present() -> None:
    messages, cut, _, _ = await _cut()
    facts = [f.value for f in extract_facts(messages[cut.head : cut.start])]
    assert all(present_share(facts, context_text(messages, COUNTER)))
    window = await window_strategy(messages, cut, None)
    assert not all(present_share(facts, context_text(window.messages, COUNTER)))


async def test_peers_run_where_installed_and_are_listed_otherwise() -> None:
    messages, cut, _, _ = await _cut()
    for strategy in (harness_strategy, summarization_strategy):
        compacted = await strategy(messages, cut, metered(scripted_summarizer()))
        assert compacted.status in ('ok', 'not installed')
        if compacted.status == 'ok':
            assert compacted.store is None
            assert compacted.tokens_spent > 0


async def test_evaluate_reports_every_strategy_and_the_cut() -> None:
    report = await evaluate(
        [session_from_messages('hand', session())], EvalSettings(keep_fraction=0.3, max_facts=20)
    )
    assert report.evaluated == 1
    assert report.errors == []
    (record,) = report.sessions
    assert 6 <= record.facts <= 20
    assert record.evicted > OLDER - 1
    by_key = {s.strategy: s for s in report.summary()}
    assert set(by_key) == {'summary', 'digest', 'window', 'harness', 'summarization'}
    assert by_key['window'].recoverable == 0.0
    assert by_key['window'].present == 0.0
    assert by_key['summary'].recoverable == 1.0
    assert by_key['digest'].tokens_spent == 0
    assert by_key['summary'].tokens_spent > 0
    assert by_key['window'].compression > 1.0
    table = report.model_free_table()
    assert f'| sliding window alone | 1 | {record.facts} | 0.0% | 0.0% |' in table
    assert report.judged_table() == ''
    window = next(r for r in report.results if r.strategy == 'window')
    assert sum(counts[0] for counts in window.by_kind.values()) == record.facts
    # summary: the scripted prose has no facts; its trail keeps the command verbatim, and it reads back
    assert '| command | 1 | 100% / 100% | ' in report.kinds_table()


def test_every_field_of_the_public_dataclasses_is_documented() -> None:
    import dataclasses
    import inspect

    from pydantic_ai_history import evaluation

    kinds = [getattr(evaluation, name) for name in evaluation.__all__]
    checked = 0
    for kind in kinds:
        if not (inspect.isclass(kind) and dataclasses.is_dataclass(kind)):
            continue
        source = inspect.getsource(kind)
        for field in dataclasses.fields(kind):
            after = source.split(f'    {field.name}:', 1)[1].split('\n', 2)
            assert after[1].strip().startswith('"""'), f'{kind.__name__}.{field.name} has no docstring'
            checked += 1
    assert checked > 40
