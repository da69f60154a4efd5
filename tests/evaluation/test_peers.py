"""The peer strategies of `eval` run against the peers as they are installed: the versions the benchmarks pin
(`benchmarks/cost/requirements.txt`: pydantic-ai-harness 0.62.0, which pins pydantic-ai-slim 2.62.0, and
summarization-pydantic-ai 0.1.11), which CI installs from the package index. Each peer is called the way the
strategy calls it (harness: `SummarizingCompaction.compact(messages, ctx)`; summarization:
`SummarizationProcessor.execute_plan(plan)`), so a method renamed on either side fails here, not in a report
row. Skipped, saying what to install, where the peer is not installed."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _eval_session import ERROR, PATH, session
from pydantic_ai_history import TokenCounter, validate_history
from pydantic_ai_history.evaluation import EvalSettings, context_text, evaluate, session_from_messages
from pydantic_ai_history.evaluation._sessions import kept_head, tail_start
from pydantic_ai_history.evaluation._strategies import PEER_PACKAGES, PEERS, Cut, digest_strategy, metered

pytestmark = pytest.mark.anyio

COUNTER = TokenCounter('openai:gpt-4o')
MARK = 'PEER-SUMMARY-MARK'
PINS = Path(__file__).resolve().parents[2] / 'benchmarks' / 'cost' / 'requirements.txt'


def _installed(key: str) -> str:
    """The peer's version; the test is skipped, naming the package and its pin, where it is not installed."""
    module, package = PEER_PACKAGES[key]
    pins = [line for line in PINS.read_text().splitlines() if line.startswith(f'{package}==')]
    pin = pins[0] if pins else package
    pytest.importorskip(module, reason=f'{package} is not installed (pip install {pin!r}, as CI does)')
    return version(package)


def _summarizer(prompts: list[str]) -> Any:
    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(context_text(messages, COUNTER))
        return ModelResponse(parts=[TextPart(f'{MARK}: the billing import was being fixed.')])

    return metered(FunctionModel(summarize, model_name='peer-summarizer'))


async def _cut(messages: list[ModelMessage]) -> Cut:
    total = COUNTER.estimate(messages).total
    digest = await digest_strategy(messages, total, total // 3 + 2_140)
    start = tail_start(messages, digest.messages)
    assert start is not None
    return Cut(head=kept_head(messages, digest.messages), start=start)


@pytest.mark.parametrize('key', sorted(PEERS))
async def test_each_peer_summarizes_the_evicted_part_and_keeps_the_tail(key: str) -> None:
    installed = _installed(key)
    messages = session()
    cut = await _cut(messages)
    prompts: list[str] = []
    summarizer = _summarizer(prompts)
    compacted = await PEERS[key](messages, cut, summarizer)
    assert compacted.status == 'ok', f'{key} {installed}: {compacted.note}'
    assert summarizer.calls >= 1
    assert compacted.tokens_spent > 0
    assert any(ERROR in p or PATH in p for p in prompts), 'the summarizer was shown the evicted part'
    assert MARK in context_text(compacted.messages, COUNTER), 'the summary stands in for it'
    assert len(compacted.messages) < len(messages)
    assert compacted.messages[-(len(messages) - cut.start) :] == messages[cut.start :], compacted.note
    assert validate_history(compacted.messages) == []


@pytest.mark.parametrize('key', sorted(PEERS))
async def test_evaluate_reports_the_peer_as_run(key: str) -> None:
    _installed(key)
    report = await evaluate(
        [session_from_messages('hand', session())], EvalSettings(keep_fraction=0.3, strategies=(key,))
    )
    [result] = report.results
    assert (result.strategy, result.status) == (key, 'ok'), result.note
    assert result.tokens_spent > 0
    assert report.errors == []
