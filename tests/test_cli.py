"""The command line: demo, inspect and count, their exit codes and error messages."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from _fixtures import conversation_names
from pydantic_ai_history import TokenCounter, assert_valid_history, validate_history
from pydantic_ai_history._compat import HAS_CAPABILITIES, with_part_metadata
from pydantic_ai_history.cli import EXIT_OK, EXIT_USAGE, demo, main, run_demo
from pydantic_ai_history.cli.formatting import ProgressBar, format_table
from pydantic_ai_history.cli.inspect import ACTIONS, _rows
from pydantic_ai_history.messages import _marks
from pydantic_ai_history.messages._marks import MARKER_KEY
from pydantic_ai_history.stages.compactor import build_summary_message
from pydantic_ai_history.stages.window import window_note

CONVERSATIONS = conversation_names()
SMALL_BUDGET = [
    '--model',
    'gpt-4o',
    '--max-tokens',
    '6000',
    '--target-tokens',
    '2000',
    '--context-window',
    '16000',
]


def _parse_table(text: str, header_start: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Body and footer rows of a table printed by `format_table`, cut at the columns its rule line shows."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rule = lines[top + 1]
    spans, start = [], 0
    for chunk in rule.split('  '):
        spans.append((start, start + len(chunk)))
        start += len(chunk) + 2
    names = [lines[top][a:b].strip() for a, b in spans]

    def parse(line: str) -> dict[str, str]:
        return {name: line[a:b].strip() for name, (a, b) in zip(names, spans, strict=False)}

    body, footer, in_footer = [], [], False
    for line in lines[top + 2 :]:
        if not line.strip():
            break
        if line.startswith('--'):
            in_footer = True
            continue
        (footer if in_footer else body).append(parse(line))
        if in_footer:
            break
    return body, footer


def _int(text: str) -> int:
    return int(text.replace(',', '')) if text else 0


# ---- formatting -----------------------------------------------------------------------------------------


def test_format_table_aligns_each_column_as_told():
    rows = [('a', 5), ('longer name', 12_345)]
    table = format_table(['name', 'tokens'], rows, align='lr', footer=[('total', 12_350)])
    lines = table.splitlines()
    assert lines[0] == 'name         tokens'
    assert lines[2] == 'a                 5'
    assert lines[3] == 'longer name  12,345'
    assert lines[4].startswith('-----------  ------')
    assert lines[5] == 'total        12,350'


def test_progress_bar_on_a_pipe_prints_periodic_lines():
    out = io.StringIO()
    bar = ProgressBar(20, out, tty=False)
    for done in range(1, 21):
        bar.update(done)
    bar.print('event')
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[:2] == ['progress: 2/20 requests', 'progress: 4/20 requests']
    assert lines[-2:] == ['progress: 20/20 requests', 'event']
    assert '\r' not in out.getvalue()


def test_progress_bar_on_a_terminal_redraws_one_line():
    out = io.StringIO()
    bar = ProgressBar(4, out, tty=True, width=4)
    bar.update(2)
    bar.print('an event')
    bar.update(4)
    bar.close()
    text = out.getvalue()
    assert '[##..] 2/4' in text
    assert '[####] 4/4' in text
    assert 'an event\n' in text
    assert text.endswith('\n')
    assert text.count('\n') == 2


# ---- demo -----------------------------------------------------------------------------------------------


DEMO_REQUESTS = 50
"""Enough for the demo's first compaction (its history reaches the trigger after about 45 requests)."""


@pytest.fixture(scope='module')
def demo_result():
    return run_demo(DEMO_REQUESTS, out=io.StringIO(), tty=False)


@pytest.mark.slow
def test_demo_printed_numbers_match_the_processor_stats(demo_result):
    stats = demo_result.stats
    overall = stats.overall
    rows, _ = _parse_table(demo_result.text, 'summary')
    printed = {r['summary']: r['value'] for r in rows}
    assert _int(printed['model requests']) == overall.requests == DEMO_REQUESTS
    assert _int(printed['provider requests']) == demo_result.provider_requests == DEMO_REQUESTS
    assert _int(printed['rejected by provider']) == demo_result.rejected == 0
    assert _int(printed['compactions']) == overall.compactions
    assert _int(printed['summarizer calls']) == overall.summarizer_calls
    assert _int(printed['cache hits']) == stats.cache_hits
    assert _int(printed['cache misses']) == stats.cache_misses
    assert _int(printed['window applications']) == overall.window_applications
    assert _int(printed['peak tokens after processing']) == overall.peak_tokens_out
    assert _int(printed['tokens in (sum)']) == overall.tokens_in
    assert _int(printed['artifacts']) == sum(overall.artifacts_by_strategy.values())
    for strategy, count in overall.artifacts_by_strategy.items():
        assert _int(printed[f'artifacts: {strategy}']) == count
    for method, count in overall.compaction_methods.items():
        assert _int(printed[f'compactions: {method}']) == count
    assert printed == {
        k.strip(): (f'{v:,}' if isinstance(v, int) else str(v)) for k, v in demo_result.summary.items()
    }


def test_demo_session_compacts_and_never_overflows(demo_result):
    overall = demo_result.stats.overall
    assert overall.compactions >= 1
    if HAS_CAPABILITIES:  # a plain history processor (1.0) stubs its unpersisted history afresh: enough here
        assert overall.summarizer_calls >= 1
    assert sum(overall.artifacts_by_strategy.values()) >= 1
    assert demo_result.peak_tokens_sent <= 32_000
    assert demo_result.violations == []
    history = [*demo_result.final_messages, ModelRequest(parts=[UserPromptPart('next question')])]
    assert_valid_history(history)
    text = demo_result.text
    assert sum(1 for line in text.splitlines() if line.startswith('  request ')) == DEMO_REQUESTS
    assert sum(1 for line in text.splitlines() if 'compaction #' in line) == overall.compactions
    assert f'progress: {DEMO_REQUESTS}/{DEMO_REQUESTS} requests' in text


def test_demo_tool_outputs_follow_the_call_not_the_order_the_tools_ran_in():
    # The calls of one response run at once, each in a thread: whichever runs first must not change an output.
    calls = {
        'call_00001': ('tail_logs', {'service': 'gateway', 'lines': 25}),
        'call_00002': ('get_ticket', {'ticket_id': 'T-1234'}),
    }

    def outputs(order: list[str]) -> dict[str, object]:
        tools = {tool.__name__: tool for tool in demo._tools(7, {'call_00001': 1, 'call_00002': 2})}
        return {
            call_id: tools[calls[call_id][0]](SimpleNamespace(tool_call_id=call_id), **calls[call_id][1])
            for call_id in order
        }

    assert outputs(['call_00001', 'call_00002']) == outputs(['call_00002', 'call_00001'])


def test_demo_runs_alike_in_another_process(monkeypatch):
    """Another process has another secret of its own and pydantic-ai draws another conversation id: neither
    may change an artifact id the demo prints, nor the tokens it counts."""

    def transcript() -> list[str]:
        text = run_demo(8, out=io.StringIO(), tty=False).text
        return [line for line in text.splitlines() if not line.startswith('finished in')]

    first = transcript()
    monkeypatch.setattr(_marks, '_secret', b'another process' * 2)
    again = transcript()
    assert any(' artifact art_' in line for line in first)
    assert again == first


def test_demo_command_quiet_prints_only_the_summary(capsys):
    assert main(['demo', '--requests', '12', '--quiet']) == EXIT_OK
    out = capsys.readouterr().out
    assert 'model requests' in out
    assert 'compactions' in out
    assert '  request ' not in out
    assert 'progress:' not in out


def test_demo_with_a_real_model_and_no_key_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv('OPENAI_API_KEY', raising=False)
    assert main(['demo', '--model', 'openai:gpt-4o-mini', '--requests', '3']) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("pydantic-ai-history: error: model 'openai:gpt-4o-mini' needs OPENAI_API_KEY")
    assert err.count('\n') == 0


# ---- inspect --------------------------------------------------------------------------------------------


@pytest.mark.parametrize('name', CONVERSATIONS, ids=[n.removesuffix('.json')[:40] for n in CONVERSATIONS])
def test_inspect_every_fixture_conversation(name: str, fixtures_dir: Path, tmp_path, capsys):
    path = fixtures_dir / 'conversations' / name
    original = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    assert main(['inspect', str(path), *SMALL_BUDGET]) == EXIT_OK
    text = capsys.readouterr().out
    body, footer = _parse_table(text, ' #')
    assert sum(_int(r['tokens']) for r in body) == _int(footer[0]['tokens'])
    assert sum(_int(r['after']) for r in body) == _int(footer[0]['after'])
    assert {r['action'] for r in body} <= set(ACTIONS) | {''}
    finished = isinstance(original[-1], ModelResponse) and not any(
        isinstance(p, ToolCallPart) for p in original[-1].parts
    )
    assert len([r for r in body if r['#']]) == len(original) + finished  # a finished run: the next request

    out_file = tmp_path / 'processed.json'
    assert main(['inspect', str(path), *SMALL_BUDGET, '--json', '--out', str(out_file)]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    rows, totals = report['messages'], report['totals']
    framing_before, framing_after = totals['framing_before'], totals['framing_after']
    assert sum(r['tokens'] for r in rows) + framing_before == totals['tokens_before']
    assert totals['tokens_before'] == _int(footer[0]['tokens'])
    assert sum(r['tokens_after'] for r in rows) + framing_after == totals['tokens_after']
    assert report['next_request_added'] is finished
    processed = ModelMessagesTypeAdapter.validate_json(out_file.read_bytes())
    assert len(processed) == totals['messages_after']
    counter = TokenCounter('gpt-4o')
    assert counter.count_messages(processed) + framing_after == totals['tokens_after']
    if not finished:
        assert counter.count_messages(original) + framing_before == totals['tokens_before']
    for row in rows:
        if row['action'] == 'kept':
            assert row['tokens'] == row['tokens_after']
    input_errors = {(v.code, v.index) for v in validate_history(original) if v.severity == 'error'}
    if not input_errors:
        assert_valid_history(processed, original=original)
    else:  # some real runs end with an unanswered tool call: no stage may make it worse
        assert len([v for v in validate_history(processed) if v.severity == 'error']) <= len(input_errors)
    if totals['tokens_before'] > 6_000:
        assert totals['tokens_after'] < totals['tokens_before']
        assert set(report['actions']) - {'kept'}


@pytest.mark.anyio
async def test_inspect_a_finished_run_as_the_next_request_finds_it():
    """`result.all_messages()` ends with the answer: no `not_ending_with_request` warning, and the table
    counts what the processor's own events count."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pydantic_ai_history import HistoryWarning, RequestProcessed
    from pydantic_ai_history.cli.inspect import inspect_messages, render_inspect

    def respond(messages: list, info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done < 3:
            return ModelResponse(parts=[ToolCallPart('fetch', {'i': done}, tool_call_id=f'c{done}')])
        return ModelResponse(parts=[TextPart('all fetched')])

    agent = Agent(FunctionModel(respond, model_name='gpt-4o'))

    @agent.tool_plain
    def fetch(i: int) -> str:
        return f'page {i} ' * 1_500

    result = await agent.run('fetch three pages')
    report = await inspect_messages(result.all_messages(), model='openai:gpt-4o', context_window=4_000)
    assert report.next_request_added
    assert not [e for e in report.events if isinstance(e, HistoryWarning) and e.code == 'invalid_input']
    assert report.input_violations == []
    processed = next(e for e in report.events if isinstance(e, RequestProcessed))
    assert report.messages_before == processed.messages_before
    assert report.messages_after == processed.messages_after
    assert (report.tokens_before, report.tokens_after) == (processed.tokens_before, processed.tokens_after)
    assert report.messages_before == len(result.all_messages()) + 1
    text = render_inspect(report)
    assert f'{processed.tokens_before:,}' in text.split('total', 1)[1].splitlines()[0]
    assert "ends with the model's answer" in text


def test_inspect_uses_the_model_named_in_the_history(fixtures_dir, capsys):
    path = fixtures_dir / 'conversations' / 'tau_bench_airline_task2_trial1.json'
    assert main(['inspect', str(path), '--json']) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report['model'] == 'gpt-4o'
    assert report['context_window'] == 128_000
    assert report['actions'] == {'kept': report['totals']['messages_before']}  # far below the default trigger


def test_inspect_without_any_model_name_needs_a_window(fixtures_dir, capsys):
    path = fixtures_dir / 'conversations' / 'swe_agent_function_calling_simple.json'
    assert main(['inspect', str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count('\n') == 1
    assert 'context window' in err
    assert '--context-window' in err
    assert main(['inspect', str(path), '--context-window', '8000']) == EXIT_OK


def _request(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def test_actions_are_read_from_the_difference_between_input_and_output():
    call = ToolCallPart('tail_logs', {'lines': 500}, tool_call_id='c1')
    big = ToolReturnPart('tail_logs', 'log line\n' * 2_000, tool_call_id='c1')
    before = [
        _request('the task'),
        ModelResponse(parts=[TextPart('old answer')]),
        _request('old question'),
        ModelResponse(parts=[call]),
        ModelRequest(parts=[big]),
    ]
    stub = with_part_metadata(
        dataclasses.replace(big, content='[removed: 2,000 log lines]'), {MARKER_KEY: {'strategy': 'exclude'}}
    )
    note = window_note(before[1:3], None)
    after = [before[0], note, before[3], ModelRequest(parts=[stub])]
    rows = _rows(before, after, [10, 20, 30, 40, 5_000], [10, 25, 40, 30])
    actions = [(r.index, r.out_index, r.action) for r in rows]
    stub_action = 'excluded' if getattr(stub, 'metadata', None) else 'converted'  # 1.0 parts have no metadata
    assert actions == [
        (0, 0, 'kept'),
        (None, 1, 'added'),
        (1, None, 'dropped'),
        (2, None, 'dropped'),
        (3, 2, 'kept'),
        (4, 3, stub_action),
    ]
    assert sum(r.tokens for r in rows) == 5_100
    assert sum(r.tokens_after for r in rows) == 105


def test_a_repeat_line_reads_as_content_taken_out_of_the_request():
    from pydantic_ai_history.cli.inspect import _strategy_action

    assert _strategy_action('repeat') == 'excluded'
    assert _strategy_action('extract') == 'converted'


@pytest.mark.parametrize(
    ('content', 'message'),
    [
        (None, 'no such file'),
        (b'{"not": "closed"', 'not valid JSON'),
        (b'{"parts": []}', 'not a message history (expected a JSON list of messages, found an object)'),
        (b'[1, 2, 3]', 'not a PydanticAI message history'),
        (b'[{"kind": "request", "parts": [{"part_kind": "nonsense"}]}]', 'not a PydanticAI message history'),
        (b'[]', 'the history is empty'),
    ],
)
@pytest.mark.parametrize('command', ['inspect', 'count'])
def test_bad_input_is_a_one_line_usage_error(command, content, message, tmp_path, capsys):
    path = tmp_path / 'history.json'
    if content is not None:
        path.write_bytes(content)
    assert main([command, str(path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ''
    assert captured.err.count('\n') == 1
    assert captured.err.startswith(f'pydantic-ai-history: error: {path}: ')
    assert message in captured.err


@pytest.mark.slow
def test_the_module_entry_point_exits_with_the_documented_codes(tmp_path):
    missing = tmp_path / 'missing.json'
    result = subprocess.run(
        [sys.executable, '-m', 'pydantic_ai_history', 'count', str(missing)], capture_output=True, text=True
    )
    assert result.returncode == EXIT_USAGE
    assert 'Traceback' not in result.stderr
    assert 'no such file' in result.stderr
    result = subprocess.run(
        [sys.executable, '-m', 'pydantic_ai_history', 'frobnicate'], capture_output=True, text=True
    )
    assert result.returncode == EXIT_USAGE
    assert 'Traceback' not in result.stderr
    result = subprocess.run(
        [sys.executable, '-m', 'pydantic_ai_history', '--help'], capture_output=True, text=True
    )
    assert result.returncode == EXIT_OK
    assert 'exit codes' in result.stdout


def test_inspect_rejects_a_target_above_the_trigger(fixtures_dir, capsys):
    path = fixtures_dir / 'conversations' / 'tau_bench_airline_task2_trial1.json'
    code = main(['inspect', str(path), '--max-tokens', '1000', '--target-tokens', '5000'])
    assert code == EXIT_USAGE
    assert 'target_tokens' in capsys.readouterr().err


# ---- count ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'name', ['tau_bench_airline_task33_trial0.json', 'swe_gym_openhands_getmoto__moto-6387_0.json']
)
def test_count_totals_equal_the_token_counter(name, fixtures_dir, capsys):
    path = fixtures_dir / 'conversations' / name
    messages = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    assert main(['count', str(path), '--model', 'gpt-4o', '--json']) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    counter = TokenCounter('gpt-4o')
    assert report['tokenizer'] == counter.count_messages(messages)
    assert [m['tokens'] for m in report['messages']] == [counter.count_message(m) for m in messages]
    assert report['anchored'] == TokenCounter('gpt-4o').estimate(messages).total  # no usage in these files
    assert report['profile'] == 'openai'

    assert main(['count', str(path), '--model', 'gpt-4o']) == EXIT_OK
    body, footer = _parse_table(capsys.readouterr().out, ' #')
    assert sum(_int(r['tokens']) for r in body) == _int(footer[0]['tokens']) == report['tokenizer']


def test_count_anchors_on_the_newest_usage(tmp_path, capsys):
    from pydantic_ai.usage import RequestUsage

    messages = [
        _request('hello ' * 50),
        ModelResponse(parts=[TextPart('hi')], usage=RequestUsage(input_tokens=5_000), model_name='gpt-4o'),
        _request('and now?'),
    ]
    path = tmp_path / 'h.json'
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    assert main(['count', str(path), '--json']) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    counter = TokenCounter('gpt-4o')
    assert report['model'] == 'gpt-4o'
    assert report['anchor_index'] == 1
    assert report['anchored'] == 5_000 + counter.count_message(messages[1]) + counter.count_message(
        messages[2]
    )
    assert report['tokenizer'] == counter.count_messages(messages)


def test_count_with_an_unknown_model_uses_the_other_profile(fixtures_dir, capsys):
    path = fixtures_dir / 'conversations' / 'swe_agent_function_calling_simple.json'
    assert main(['count', str(path), '--model', 'my-local-llama', '--json']) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report['profile'] == 'other'


def test_the_window_note_count_is_read_from_the_note_not_from_the_system_prompt_it_carries():
    """With both a summary and a window note, the note's count says which removed messages it stands for.
    Where messages have no metadata the count comes from the note's own text, never from a carried system
    prompt that happens to mention "N earlier messages"."""
    before = [
        _request('the task'),
        ModelResponse(parts=[TextPart('first answer')]),
        _request('second question'),
        ModelResponse(parts=[TextPart('second answer')]),
        ModelRequest(
            parts=[SystemPromptPart('Quote the 7 earlier messages verbatim.'), UserPromptPart('q4')]
        ),
        ModelResponse(parts=[TextPart('fourth answer')]),
        _request('the current question'),
    ]
    summary = build_summary_message('what happened first', details={})
    note = window_note(before[3:5], None)
    if 'metadata' in {f.name for f in dataclasses.fields(ModelRequest)}:
        note = dataclasses.replace(note, metadata=None)  # type: ignore[call-arg]
    after = [before[0], summary, note, before[5], before[6]]
    rows = _rows(before, after, [10] * 7, [10] * 5)
    actions = {r.index: r.action for r in rows if r.index is not None}
    assert actions == {
        0: 'kept',
        1: 'summarized',
        2: 'summarized',
        3: 'dropped',
        4: 'dropped',
        5: 'kept',
        6: 'kept',
    }
