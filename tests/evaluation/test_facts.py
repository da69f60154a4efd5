"""Fact extraction: exact facts from hand-built histories, and every fact a substring of the evicted text."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from _eval_session import COMMAND, CONSTRAINT, ERROR, INVOICE, OLDER, PATH, TASK, session, tool_round
from pydantic_ai_history import TokenCounter
from pydantic_ai_history.evaluation import context_text, extract_facts, fact_probes, normalize, select_facts
from pydantic_ai_history.evaluation._text import contains


def _values(messages: list[ModelMessage]) -> set[tuple[str, str]]:
    return {(f.kind, f.value) for f in extract_facts(messages)}


def test_exact_facts_from_a_tool_loop_with_a_retry_and_constraints() -> None:
    older = session()[:OLDER]
    facts = _values(older)
    assert ('command', COMMAND) in facts
    assert ('error', ERROR) in facts
    assert ('path', PATH) in facts
    assert ('path', 'tests/test_invoice.py') in facts
    assert ('identifier', INVOICE) in facts
    assert ('number', '1249.50') in facts
    assert ('constraint', CONSTRAINT) in facts
    assert ('constraint', 'You must not change the public API.') in facts
    # the task's other sentence sets no constraint; the retry prompt's words are no fact
    assert not any(value == 'Fix the failing import in the billing service.' for _, value in facts)
    assert TASK  # the task is in the first message


def test_sources_and_cues_say_where_a_fact_was() -> None:
    facts = {f.value: f for f in extract_facts(session()[:OLDER])}
    assert facts[COMMAND].source == 'tool_call:run_shell'
    assert facts[ERROR].source == 'tool_return:run_shell'
    assert facts['1249.50'].cue == 'TOTAL ='
    assert facts[CONSTRAINT].source == 'user'


def test_json_keys_editor_subcommands_dates_and_small_numbers_are_no_facts() -> None:
    messages = [
        *tool_round(
            'c1',
            'edit',
            {'command': 'view', 'path': 'a/b.py'},
            '{"address1": "12 Elm", "when": "2024-05-11T08:00"}',
        ),
    ]
    values = {f.value for f in extract_facts(messages)}
    assert 'view' not in values
    assert 'address1' not in values
    assert '12' not in values
    assert not any(v.startswith('2024-05-11') for v in values)
    assert 'a/b.py' in values


def test_each_value_once_at_its_first_occurrence() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart('order ORD-12345 please')]),
        ModelResponse(parts=[TextPart('Looking at ORD-12345 now.')]),
    ]
    facts = [f for f in extract_facts(messages) if f.value == 'ORD-12345']
    assert len(facts) == 1
    assert facts[0].message == 0
    assert facts[0].source == 'user'


def test_selection_drops_what_the_kept_part_holds_and_spreads_kinds() -> None:
    facts = extract_facts(session()[:OLDER])
    kept = normalize(f'the command {COMMAND} is still in view')
    chosen = select_facts(facts, kept, limit=4)
    assert all(f.value != COMMAND for f in chosen)
    assert len(chosen) == 4
    assert len({f.kind for f in chosen}) == 4  # one of each kind before a second of any


def test_probes_carry_the_fact_as_answer_and_not_in_the_question() -> None:
    probes = fact_probes(extract_facts(session()[:OLDER]))
    assert {p.kind for p in probes} == {'recall', 'artifact'}
    for probe in probes:
        assert probe.fact is not None
        assert probe.answer == probe.fact.value
        if probe.fact.kind != 'constraint':
            assert probe.answer not in probe.question


_word = st.text(alphabet='abcXYZ019_-./:"\\ \n', min_size=1, max_size=130)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_word, _word, st.integers(0, 10**6)), min_size=1, max_size=6))
# an error string whose match ends before a `_`: the scores read `_` as part of the word it is cut from
@example([('0', '000000000000000_000000000000', 0)])
def test_every_fact_is_a_substring_of_the_evicted_text(rounds: list[tuple[str, str, int]]) -> None:
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(f'Please only use {rounds[0][0]}.')])]
    for i, (arg, text, number) in enumerate(rounds):
        result = f'{text} {number}.5 ValueError: {text * 4}'
        messages += tool_round(f'c{i}', 'tool', {'command': f'run {arg}', 'n': number}, result)
    rendered = normalize(context_text(messages, TokenCounter('openai:gpt-4o')))
    for fact in extract_facts(messages):
        assert normalize(fact.value) in rendered, fact
        # as the scores match it (whole tokens): a context that keeps everything holds every fact
        assert contains(rendered, normalize(fact.value)), fact
