"""`pydantic-ai-history eval` offline on the fixture sessions, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter

from _eval_session import session
from pydantic_ai_history.cli import EXIT_OK, EXIT_USAGE, main
from pydantic_ai_history.evaluation import STRATEGIES


def _sessions(fixtures_dir: Path) -> list[Path]:
    return sorted((fixtures_dir / 'conversations').glob('*.json'))


def test_offline_on_the_fixture_sessions_prints_every_strategy(
    fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picked = [
        str(p)
        for p in _sessions(fixtures_dir)
        if 'tau_bench_airline_task2_' in p.name or 'moto-6387' in p.name
    ]
    out = tmp_path / 'eval.json'
    assert main(['eval', *picked, '--keep-fraction', '0.4', '--json', str(out)]) == EXIT_OK
    text = capsys.readouterr().out
    assert 'Offline: the summarizer is scripted' in text
    assert 'Probe evaluation: 2 of 2 session(s) compacted at keep_fraction=0.4' in text
    for label in STRATEGIES.values():
        assert f'| {label} |' in text
    data = json.loads(out.read_text())
    assert data['settings']['offline'] is True
    summary = {s['strategy']: s for s in data['summary']}
    assert summary['window']['recoverable'] == 0.0
    assert summary['summary']['recoverable'] >= summary['window']['recoverable']
    assert summary['digest']['facts'] > 10


def test_the_builtin_set_is_used_when_no_history_is_given(
    fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / 'sessions'
    folder.mkdir()
    (folder / 'one.json').write_bytes(_sessions(fixtures_dir)[0].read_bytes())
    monkeypatch.setenv('PYDANTIC_AI_HISTORY_EVAL_SESSIONS', str(folder))
    assert main(['eval']) == EXIT_OK
    assert '1 of 1 session(s)' in capsys.readouterr().out


def test_bad_input_is_reported_and_fails_only_when_nothing_was_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / 'bad.json'
    bad.write_text('{"not": "a history"}')
    good = tmp_path / 'good.json'
    good.write_bytes(ModelMessagesTypeAdapter.dump_json(session()))
    assert main(['eval', str(bad), str(tmp_path / 'missing.json')]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert 'not a pydantic-ai message history' in captured.out
    assert 'cannot read' in captured.out
    assert 'nothing could be evaluated' in captured.err
    assert main(['eval', str(bad), str(good)]) == EXIT_OK
    assert '1 of 1 session(s)' in capsys.readouterr().out


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / 'good.json'
    good.write_bytes(ModelMessagesTypeAdapter.dump_json(session()))
    assert main(['eval', str(good), '--keep-fraction', '1.5']) == EXIT_USAGE
    assert main(['eval', str(good), '--answerer', 'test']) == EXIT_USAGE
    assert '--answerer and --judge go together' in capsys.readouterr().err
    assert main(['eval', str(good), '--probe-model', 'openai:gpt-4.1-mini']) == EXIT_USAGE
    assert 'generated probes are only judged' in capsys.readouterr().err
    assert main(['eval', str(good), '--json', str(tmp_path / 'no' / 'x.json')]) == EXIT_USAGE


def test_a_session_that_cannot_be_cut_is_reported_and_the_others_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_history.evaluation import _strategies

    real = _strategies.digest_strategy
    calls: list[int] = []

    async def flaky(*args: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError('cannot cut this one')
        return await real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_strategies, 'digest_strategy', flaky)
    good = tmp_path / 'good.json'
    good.write_bytes(ModelMessagesTypeAdapter.dump_json(session()))
    assert main(['eval', str(good), str(good)]) == EXIT_OK
    out = capsys.readouterr().out
    assert '1 of 2 session(s)' in out
    assert '- good: it could not be compacted (RuntimeError: cannot cut this one)' in out


def test_eval_runs_after_install_on_the_sessions_that_ship_with_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No history, no folder named, no `../shared` beside the working directory: the packaged set."""
    from pydantic_ai_history.evaluation._sessions import BUILTIN_SESSIONS

    monkeypatch.delenv('PYDANTIC_AI_HISTORY_EVAL_SESSIONS', raising=False)
    monkeypatch.chdir(tmp_path)
    shipped = sorted(BUILTIN_SESSIONS.glob('*.json'))
    assert len(shipped) == 10  # five sessions, each with its probes
    assert sum(p.stat().st_size for p in BUILTIN_SESSIONS.iterdir()) < 1_000_000
    assert main(['eval']) == EXIT_OK
    out = capsys.readouterr().out
    assert '5 of 5 session(s)' in out
    assert '| all | ours: LLM summary + stored transcript | 34 |' in out  # every shipped probe answered


def _saved(tmp_path: Path) -> str:
    good = tmp_path / 'good.json'
    good.write_bytes(ModelMessagesTypeAdapter.dump_json(session()))
    return str(good)


def test_strategies_picks_what_runs_in_the_order_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / 'eval.json'
    command = ['eval', _saved(tmp_path), '--strategies', 'window, digest,window,', '--json', str(out)]
    assert main(command) == EXIT_OK
    text = capsys.readouterr().out
    assert f'| {STRATEGIES["digest"]} |' in text
    assert f'| {STRATEGIES["summary"]} |' not in text
    data = json.loads(out.read_text())
    assert data['settings']['strategies'] == ['window', 'digest']
    assert [r['strategy'] for r in data['results']] == ['window', 'digest']


@pytest.mark.parametrize(('given', 'said'), [('ours,digest', "unknown 'ours'"), (',', 'names no strategy')])
def test_an_unknown_strategy_exits_2_with_the_valid_names(
    given: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(['eval', _saved(tmp_path), '--strategies', given]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert said in err
    assert 'valid names: summary, digest, window, harness, summarization' in err


def test_a_peer_asked_for_but_not_installed_names_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_history.evaluation import _strategies

    monkeypatch.setitem(_strategies.PEER_PACKAGES, 'harness', ('no_such_module_here', 'pydantic-ai-harness'))
    assert main(['eval', _saved(tmp_path), '--strategies', 'digest,harness']) == EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        'harness needs pydantic-ai-harness, which is not installed (pip install pydantic-ai-harness)' in err
    )


def test_without_strategies_a_missing_peer_is_listed_with_its_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, 'pydantic_ai_harness', None)  # imports of it raise ImportError
    monkeypatch.setitem(sys.modules, 'pydantic_ai_harness.compaction', None)
    out = tmp_path / 'eval.json'
    assert main(['eval', _saved(tmp_path), '--json', str(out)]) == EXIT_OK
    [harness] = [r for r in json.loads(out.read_text())['results'] if r['strategy'] == 'harness']
    assert (harness['status'], harness['note']) == ('not installed', 'pip install pydantic-ai-harness')
    assert 'not installed: pip install pydantic-ai-harness' in capsys.readouterr().out
