"""The answer-based evaluation: hand-written probes answered from the full history (a), the compacted one with
`read_artifact` (b) and without tools (c), through the library and the command line, offline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _eval_session import filler, tool_round
from pydantic_ai_history.cli import EXIT_OK, EXIT_USAGE, main
from pydantic_ai_history.evaluation import (
    AnswerProbe,
    EvalSettings,
    evaluate,
    is_right,
    session_from_messages,
)
from pydantic_ai_history.evaluation._answers import READER_MAX_TOKENS
from pydantic_ai_history.evaluation._reader import read_and_answer

pytestmark = pytest.mark.anyio

REVIEWER = 'marguerite'
"""The answer: said once, in prose, in the older part only (no trail keeps a lower-case word of prose)."""
PROBE = AnswerProbe(
    question="Who is the billing service's on-call reviewer this week?",
    answer=REVIEWER,
    note='lookup_owner, in the older part',
)


def _session() -> list[ModelMessage]:
    """A task, an older part that names the reviewer once, a long recent part that never does."""
    owner = (
        f'The billing service is owned by the payments guild; its on-call reviewer this week is {REVIEWER}.'
    )
    older: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart('You are a careful engineer.'), UserPromptPart('Fix the billing.')]
        ),
        *tool_round('call_owner', 'lookup_owner', {'service': 'billing'}, owner),
        ModelResponse(parts=[TextPart('Noted the owner; now the logs.')]),
    ]
    recent = [m for i in range(12) for m in filler(i)]
    return [*older, *recent, ModelRequest(parts=[UserPromptPart('Carry on.')])]


def _visible(messages: list[ModelMessage]) -> str:
    """Everything the model was sent except what `read_artifact` returned."""
    return '\n'.join(
        str(getattr(part, 'content', '') or getattr(part, 'args', ''))
        for message in messages
        for part in message.parts
        if not (isinstance(part, ToolReturnPart) and part.tool_name == 'read_artifact')
    )


async def test_only_the_read_back_answers_a_probe_whose_answer_was_evicted() -> None:
    """(a) sees the answer, (b) must read it back to answer, (c) and the window cannot: the plumbing is right
    only if the compacted history does not hold the answer and the read-back returns it."""
    full = _session()
    seen: list[tuple[bool, bool, str, Any]] = []

    def spy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [part for message in messages for part in message.parts]
        compacted = not any(getattr(part, 'tool_name', '') == 'lookup_owner' for part in parts)
        offered = any(t.name == 'read_artifact' for t in info.function_tools)
        seen.append((compacted, offered, _visible(messages), info.model_settings))
        return read_and_answer(messages, info)

    settings = EvalSettings(
        strategies=('summary', 'window'), reader=FunctionModel(spy, model_name='spy'), reader_timeout=42.0
    )
    report = await evaluate([session_from_messages('hand', full, [PROBE])], settings)
    assert report.errors == []
    by = {(r.strategy, r.condition): r for r in report.answers}
    assert set(by) == {('', 'full'), ('summary', 'readback'), ('summary', 'no_tools'), ('window', 'no_tools')}

    [a] = by['', 'full'].answers
    assert a.right
    assert a.read_calls == 0
    [b] = by['summary', 'readback'].answers
    assert b.right, b.reply
    assert b.read_calls == 1
    assert b.readback_tokens > 0
    assert b.tokens > b.readback_tokens
    for key in ('summary', 'window'):
        [c] = by[key, 'no_tools'].answers
        assert not c.right
        assert c.read_calls == 0

    # what the model was sent: the answer only in the full history or in a read-back's return
    compacted_calls = [(offered, text) for compacted, offered, text, _ in seen if compacted]
    assert len(compacted_calls) == 4  # (b): the question, then the read; (c) twice
    assert all(REVIEWER not in text.lower() for _, text in compacted_calls)
    assert [offered for offered, _ in compacted_calls].count(True) == 2  # (b): the question, then the read
    assert all(s is not None and s.get('timeout') == 42.0 for *_, s in seen)
    assert all(s is not None and s.get('max_tokens') == READER_MAX_TOKENS for *_, s in seen)  # bounded

    summary = {(r.session, r.strategy): r for r in report.answer_rows()}
    row = summary['hand', 'summary']
    assert (row.probes, row.full, row.readback, row.no_tools, row.read_calls) == (1, 1, 1, 0, 1)
    assert row.ratio(row.readback) == 1.0
    assert row.ratio(row.no_tools) == 0.0
    assert summary['hand', 'window'].readback is None  # nothing stored: no (b)
    assert summary['all', 'summary'].readback_tokens == row.readback_tokens
    table = report.answers_table()
    ours = '| hand | ours: LLM summary + stored transcript | 1 | 1/1 (100%) | 1/1 (100%) | 0/1 (0%) |'
    assert f'{ours} 1.00 | 0.00 | 1 |' in table
    assert (
        '| hand | sliding window alone | 1 | 1/1 (100%) | no store | 0/1 (0%) | n/a | 0.00 | 0 | 0 |' in table
    )


async def test_a_reader_that_never_reads_back_gets_nothing_from_the_compacted_history() -> None:
    """The control: the same run with a reader that ignores the tool. (b) is then no better than (c), so the
    right answer above came from the read-back, not from the compacted history."""

    def incurious(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return read_and_answer(messages, dataclasses.replace(info, function_tools=[]))

    settings = EvalSettings(strategies=('summary',), reader=FunctionModel(incurious))
    report = await evaluate([session_from_messages('hand', _session(), [PROBE])], settings)
    by = {(r.strategy, r.condition): r.answers[0] for r in report.answers}
    assert by['', 'full'].right
    assert not by['summary', 'readback'].right
    assert by['summary', 'readback'].read_calls == 0


async def test_with_recall_a_reader_that_never_reads_back_sees_the_answer_with_the_question() -> None:
    """The same incurious reader with ours' recall (`recall_chars`): the passage naming the reviewer comes
    with the question, so (b) is right with no read-back; (c), with no processor, still cannot answer."""
    seen: list[str] = []

    def incurious(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(_visible(messages))
        return read_and_answer(messages, dataclasses.replace(info, function_tools=[]))

    settings = EvalSettings(strategies=('summary',), reader=FunctionModel(incurious), recall_chars=4_000)
    report = await evaluate([session_from_messages('hand', _session(), [PROBE])], settings)
    by = {(r.strategy, r.condition): r.answers[0] for r in report.answers}
    assert by['summary', 'readback'].right, by['summary', 'readback'].reply
    assert by['summary', 'readback'].read_calls == 0
    assert not by['summary', 'no_tools'].right
    assert sum(REVIEWER in text for text in seen) == 2  # (a), and (b) through the recall
    assert report.settings['recall_chars'] == 4_000
    assert '(b) compacted + read_artifact (ours: + recall of 4,000 chars)' in report.answers_table()


async def test_only_the_conditions_asked_for_are_answered() -> None:
    settings = EvalSettings(strategies=('summary', 'window'), conditions=('readback',))
    report = await evaluate([session_from_messages('hand', _session(), [PROBE])], settings)
    assert {(r.strategy, r.condition) for r in report.answers} == {('summary', 'readback')}
    table = report.answers_table()
    assert (
        '| hand | ours: LLM summary + stored transcript | 1 | not run | 1/1 (100%) | not run | n/a |' in table
    )
    with pytest.raises(ValueError, match='conditions must be some of'):
        EvalSettings(conditions=('everything',))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='recall_chars must not be negative'):
        EvalSettings(recall_chars=-1)


async def test_a_reader_that_fails_counts_the_probe_wrong_and_says_why() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise TimeoutError('the local server took too long')

    settings = EvalSettings(strategies=('window',), reader=FunctionModel(broken), answer_probes=1)
    two = [PROBE, AnswerProbe(question='Which guild owns the billing service?', answer='payments')]
    report = await evaluate([session_from_messages('hand', _session(), two)], settings)
    assert report.sessions[0].answer_probes == 1
    assert all(len(r.answers) == 1 and not r.answers[0].right for r in report.answers)
    assert report.answers[0].answers[0].error == 'TimeoutError: the local server took too long'
    assert (
        'hand / full history / (a) full history: probe 1 was not answered (TimeoutError' in report.errors[0]
    )


async def test_the_scripted_reader_never_answers_what_it_was_not_shown() -> None:
    """Asked after a history that lacks the answer and with no tool, it cannot give it."""
    settings = EvalSettings(strategies=('window',))
    report = await evaluate([session_from_messages('hand', _session(), [PROBE])], settings)
    window = next(r for r in report.answers if r.strategy == 'window')
    assert REVIEWER not in window.answers[0].reply.lower()
    assert report.settings['reader_offline'] is True
    assert 'These figures check the plumbing, not a model' in report.render()


def _saved(tmp_path: Path, probes: object | None) -> Path:
    path = tmp_path / 'hand.json'
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(_session()))
    if probes is not None:
        (tmp_path / 'hand.probes.json').write_text(json.dumps(probes))
    return path


def test_eval_prints_the_probe_table_and_writes_each_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probes = [{'question': PROBE.question, 'answer': 'Marguerite', 'note': 'lookup_owner'}]
    path = _saved(tmp_path, probes)
    out = tmp_path / 'report.json'
    # a probe file globbed with its session is skipped, not read as a history
    command = ['eval', str(path), str(tmp_path / 'hand.probes.json'), '--strategies', 'digest,window']
    assert main([*command, '--json', str(out)]) == EXIT_OK
    text = capsys.readouterr().out
    assert '1 of 1 session(s)' in text
    assert 'Hand-written probes, answered by the scripted reader (offline)' in text
    assert (
        '| (a) full | (b) compacted + read_artifact | (c) compacted, no tools | (b)/(a) | (c)/(a) |' in text
    )
    assert (
        '| all | ours: fallback digest + stored transcript | 1 | 1/1 (100%) | 1/1 (100%) | 0/1 (0%) |' in text
    )
    data = json.loads(out.read_text())
    assert data['sessions'][0]['answer_probes'] == 1
    conditions = {(a['strategy'], a['condition']): a['answers'][0] for a in data['answers']}
    assert conditions['digest', 'readback']['read_calls'] == 1
    assert conditions['digest', 'readback']['expected'] == 'Marguerite'
    assert {r['strategy'] for r in data['answer_summary']} == {'digest', 'window'}


def test_probes_0_leaves_the_table_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path, [{'question': PROBE.question, 'answer': REVIEWER}])
    assert main(['eval', str(path), '--strategies', 'window', '--probes', '0']) == EXIT_OK
    assert 'Hand-written probes' not in capsys.readouterr().out
    assert main(['eval', str(path), '--probes', '-1']) == EXIT_USAGE
    assert main(['eval', str(path), '--reader-timeout', '0']) == EXIT_USAGE
    assert main(['eval', str(path), '--conditions', 'full,everything']) == EXIT_USAGE
    assert (
        "--conditions: unknown 'everything'; valid names: full, readback, no_tools" in capsys.readouterr().err
    )
    assert main(['eval', str(path), '--recall-chars', '-5']) == EXIT_USAGE


@pytest.mark.parametrize(
    ('probes', 'said'),
    [
        ([{'question': 'Who?', 'answr': 'x'}], 'entry 1: answer: Field required; entry 1: answr:'),
        (
            [{'question': 'Who?', 'answer': 'a'}, {'question': ' ', 'answer': 'b'}],
            'entry 2: question: String',
        ),
        ([{'question': 'Who?', 'answer': 'x', 'accept': 'y'}], 'entry 1: accept: Input should be'),
        (
            [{'question': 'Is it $500?', 'answer': '500'}],
            "entry 1: the question gives its answer away ('500')",
        ),
        ([{'question': 'Who?', 'answer': '$'}], 'entry 1: an answer is empty once normalised'),
        ({'question': 'Who?', 'answer': 'x'}, 'must be a JSON list of probes'),
        ([], 'holds no probes'),
    ],
)
def test_a_bad_probe_file_names_the_file_and_the_entry(
    probes: object, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _saved(tmp_path, probes)
    assert main(['eval', str(path), '--strategies', 'window']) == EXIT_USAGE
    out = capsys.readouterr().out
    assert f'{tmp_path / "hand.probes.json"}: {said}' in out


def test_a_probe_file_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path, None)
    (tmp_path / 'hand.probes.json').write_text('[{"question": ')
    assert main(['eval', str(path), '--strategies', 'window']) == EXIT_USAGE
    assert 'hand.probes.json: not valid JSON' in capsys.readouterr().out


@pytest.mark.parametrize(
    ('expected', 'reply', 'right'),
    [
        ('$159', 'The difference is 159.0 dollars.', True),
        ('1,249.50', 'TOTAL = 1249.50', True),
        ('MasterCard', 'the rest goes on the mastercard', True),
        ('123, 15', 'print(division(123, 15))', True),
        ('123', 'order 41234', False),
        ('HAT072', 'HAT0721', False),
    ],
)
def test_answers_are_matched_normalised_as_whole_tokens(expected: str, reply: str, right: bool) -> None:
    assert is_right(AnswerProbe(question='q', answer=expected), reply) is right


def test_an_accepted_spelling_counts() -> None:
    probe = AnswerProbe(question='How many?', answer='three', accept=('3',))
    assert is_right(probe, 'They proposed 3 reservations.')
    assert not is_right(probe, 'They proposed two.')
