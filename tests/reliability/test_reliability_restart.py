"""A conversation saved in one process and continued in another with the same `DirectoryStore`.

No environment variable is needed, and none changes anything: the package's notes are marked with the store's
own secret, kept beside its data. The second process (a real subprocess) recognises every note the first one
wrote, never hands one of them to the summarizer as the user's text, and reads the old transcript back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pydantic_ai_history
from _compaction import prompt_block, transcript_records
from pydantic_ai_history.messages._marks import SECRET_ENV

pytestmark = pytest.mark.slow

APP = Path(__file__).with_name('_restart_app.py')
SRC = Path(pydantic_ai_history.__file__).resolve().parents[1]
OURS = ('[pydantic-ai-history', 'The full transcript of the', 'earlier messages removed')


def run_app(phase: str, scenario: str, tmp: Path, secret: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    env['PYTHONPATH'] = os.pathsep.join([str(SRC), env.get('PYTHONPATH', '')])
    if secret is not None:
        env[SECRET_ENV] = secret
    report = tmp / f'{phase}.json'
    args = [
        sys.executable,
        str(APP),
        phase,
        scenario,
        str(tmp / 'store'),
        str(tmp / 'history.json'),
        str(report),
    ]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def kinds(report: dict[str, Any]) -> set[str]:
    return {kind.split()[0] for _, _, kind in report['recognised']}


def test_compacted_conversation_continues_in_a_new_process(tmp_path: Path) -> None:
    first = run_app('first', 'compaction', tmp_path, None)
    assert first['prompts'], 'the first process never compacted'
    assert {'summary', 'transcript', 'pinned', 'artifact'} <= kinds(first)

    # no environment variable, then one the first process never had: neither changes anything
    for secret in (None, 'another-secret'):
        second = run_app('second', 'compaction', tmp_path, secret)
        # every part the first process marked is the package's in the second one, and nothing else is
        assert second['recognised'] == first['recognised']
        # the old transcript is read back through the tool, in the new process
        assert second['transcripts']
        assert second['read_back']
        assert [t for t in second['read_back'] if t.startswith('Error')] == []
        assert any(re.search(r'PAGE-(\d+) FACT-\1-', text) for text in second['read_back'])
        # the next compaction updates the old summary; none of the package's notes reach it as user text
        assert second['prompts'], 'the second process never compacted'
        for prompt in second['prompts']:
            records = transcript_records(prompt_block(prompt, 'messages'))
            users = [body for role, _, body in records if role == 'user']
            assert not [u for u in users if any(mark in u for mark in OURS)], users
        assert any('FACT-' in prompt_block(p, 'previous_summary') for p in second['prompts'])


def test_window_notes_are_recognised_in_a_new_process(tmp_path: Path) -> None:
    first = run_app('first', 'window', tmp_path, 'first-process')
    assert 'window' in kinds(first)
    second = run_app('second', 'window', tmp_path, 'another-secret')
    assert second['recognised'] == first['recognised']
    assert second['read_back']
    assert [t for t in second['read_back'] if t.startswith('Error')] == []
    assert any(re.search(r'PAGE-(\d+) FACT-\1-', text) for text in second['read_back'])
