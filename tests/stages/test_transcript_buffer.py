"""The evicted units sit in one UTF-8 transcript: the bytes the store keeps are the rendering itself."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage

from _history import call, reply, result, system_user, user
from pydantic_ai_history import TokenCounter
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages._transcript import render_units, transcript_data, transcript_preamble


def history() -> list[ModelMessage]:
    return [
        system_user('You keep the ledger.', 'Reconcile March — totals in €, please.'),
        call('query', 'c1', {'month': 'march'}),
        result('query', 'c1', 'rows: 3\nΣ = 1 204,50 €'),
        reply('Three rows; the total is 1 204,50 €.'),
        user('And April?'),
        call('query', 'c2', {'month': 'april'}),
        result('query', 'c2', {'rows': 0}),
    ]


def expected_bytes(texts: list[str], preamble: str | None) -> bytes:
    return '\n\n'.join([*([preamble] if preamble else []), *texts]).encode()


def test_units_rendered_with_their_preamble_are_stored_as_the_buffer_itself() -> None:
    messages = history()
    preamble = transcript_preamble(['earlier-1', 'earlier-2'])
    assert preamble is not None
    assert 'read_artifact(artifact_id="earlier-2")' in preamble
    units = render_units(
        messages,
        split_units(messages),
        TokenCounter('gpt-4o'),
        tool_result_max_tokens=None,
        preamble=preamble,
    )
    assert len(units) > 1
    data = transcript_data(units, preamble)
    assert data is units[0].source, 'no second copy of the transcript'
    assert data == expected_bytes([u.text for u in units], preamble)
    assert '1 204,50 €' in data.decode()


def test_another_preamble_or_a_subset_of_the_units_is_encoded_again() -> None:
    messages = history()
    units = render_units(messages, split_units(messages), TokenCounter('gpt-4o'), tool_result_max_tokens=None)
    other = transcript_preamble(['earlier-1'])
    assert transcript_data(units, None) is units[0].source
    for chosen, preamble in ((units, other), (units[1:], None), (units[:-1], None)):
        data = transcript_data(chosen, preamble)
        assert data is not units[0].source
        assert data == expected_bytes([u.text for u in chosen], preamble)


def test_a_units_records_are_found_by_their_nonce() -> None:
    messages = history()
    counter = TokenCounter('gpt-4o')
    units = render_units(messages, split_units(messages), counter, tool_result_max_tokens=None)
    unit = next(u for u in units if u.text.count(f'<msg-{u.nonce}') > 1)
    records = list(unit.record_texts(counter))
    assert '\n'.join(text for text, _ in records) == unit.text
    for text, tokens in records:
        assert text.startswith(f'<msg-{unit.nonce} ')
        assert text.endswith(f'</msg-{unit.nonce}>')
        assert tokens == counter.count_text(text)
