"""The judged path end to end with stand-in models: a summarizer, a probe writer, an answerer that calls
`read_artifact`, and a judge that returns structured grades."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _eval_session import session
from pydantic_ai_history.evaluation import DIMENSIONS, EvalSettings, evaluate, session_from_messages

pytestmark = pytest.mark.anyio

_ID = re.compile(r'read_artifact\(artifact_id="([^"]+)"')


def _prompt(messages: list[ModelMessage]) -> str:
    return '\n'.join(
        str(getattr(part, 'content', ''))
        for message in messages
        for part in message.parts
        if getattr(part, 'part_kind', '') == 'user-prompt'
    )


def summarizer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart('## Goal\n- fix the billing import\n## Progress\n- ran the tests')])


def probe_writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    probes = [
        {'kind': 'continuation', 'question': 'What is the next step?', 'answer': 'fix the import'},
        {
            'kind': 'decision',
            'question': 'What was decided about migrations?',
            'answer': 'never on production',
        },
    ]
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'probes': probes})])


def answerer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Reads the stored transcript once with the question as query when it can; answers with what it read."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(str(returns[-1].content))])
    prompt = _prompt(messages)
    found = _ID.search(prompt)
    if found and any(t.name == 'read_artifact' for t in info.function_tools):
        question = prompt.rsplit('Question: ', 1)[-1]
        args = {'artifact_id': found.group(1), 'query': question}
        return ModelResponse(parts=[ToolCallPart('read_artifact', args, tool_call_id='read_1')])
    return ModelResponse(parts=[TextPart('I cannot know that from this context.')])


def judge(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Grades 5 where the reference answer is in the agent's answer, else 1."""
    prompt = _prompt(messages)
    reference = prompt.split('Reference answer: ', 1)[1].split('\nAgent answer: ', 1)[0]
    answer = prompt.split('\nAgent answer: ', 1)[1]
    grade = 5 if reference.lower() in answer.lower() else 1
    grades: dict[str, Any] = {d: grade for d in DIMENSIONS}
    grades['instruction_following'] = 4
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, grades)])


async def test_the_judged_path_end_to_end(tmp_path: Any) -> None:
    settings = EvalSettings(
        summarizer=FunctionModel(summarizer, model_name='stand-in-summarizer'),
        answerer=FunctionModel(answerer, model_name='stand-in-answerer'),
        judge=FunctionModel(judge, model_name='stand-in-judge'),
        probe_model=FunctionModel(probe_writer, model_name='stand-in-prober'),
        keep_fraction=0.3,
        judged_probes=6,
        strategies=('summary', 'digest', 'window'),
    )
    report = await evaluate([session_from_messages('hand', session())], settings)
    assert report.errors == []
    assert report.sessions[0].generated_probes == 2
    by_key = {s.strategy: s for s in report.summary()}
    assert all(by_key[k].judged == 6 for k in ('summary', 'digest', 'window'))
    # the stored transcript answers the recall probes; the window alone cannot
    assert by_key['summary'].dimensions['accuracy'] > by_key['window'].dimensions['accuracy']
    assert by_key['window'].dimensions['accuracy'] == 1.0
    assert by_key['summary'].dimensions['instruction_following'] == 4.0
    results = {r.strategy: r for r in report.results}
    assert results['summary'].read_calls > 0
    assert results['window'].read_calls == 0
    assert results['summary'].answer_tokens > 0
    assert results['summary'].judge_tokens > 0

    table = report.judged_table()
    assert table.splitlines()[0].startswith(
        '| strategy | probes | accuracy | context awareness | artifact trail'
    )
    assert '| ours: LLM summary + stored transcript | 6 | 3.67 |' in table  # 4 found of 6 (2 generated)
    text = report.render()
    assert 'Judged (answerer function:stand-in-answerer, judge function:stand-in-judge)' in text
    assert 'Offline' not in text

    data = json.loads(report.to_json())
    assert data['settings']['judge'] == 'function:stand-in-judge'
    summary = {s['strategy']: s for s in data['summary']}
    assert set(summary['summary']['dimensions']) == set(DIMENSIONS)
    assert len(data['results'][0]['grades']) == 6


async def test_a_model_that_raises_is_reported_and_the_rest_still_runs() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError('provider down')

    settings = EvalSettings(
        summarizer=FunctionModel(broken),
        answerer=FunctionModel(answerer),
        judge=FunctionModel(broken),
        probe_model=FunctionModel(broken),
        judged_probes=2,
        strategies=('summary', 'window'),
    )
    seen: list[str] = []
    report = await evaluate([session_from_messages('hand', session())], settings, progress=seen.append)
    assert seen == ['[1/1] hand']
    assert report.evaluated == 1
    assert any('probe model failed' in e and 'provider down' in e for e in report.errors)
    assert any('could not be answered or judged' in e for e in report.errors)
    # our compactor falls back to its digest when the summarizer raises: still scored
    (summary,) = [r for r in report.results if r.strategy == 'summary']
    assert 'the summarizer failed' in summary.note
    assert 'digest fallback wrote the summary' in summary.note
    by_key = {s.strategy: s for s in report.summary()}
    assert by_key['summary'].sessions == 1
    assert by_key['summary'].judged == 0


async def test_models_given_by_name() -> None:
    settings = EvalSettings(
        summarizer='test', answerer='test', judge='test', judged_probes=1, strategies=('summary',)
    )
    report = await evaluate([session_from_messages('hand', session())], settings)
    assert report.errors == []
    (summary,) = report.summary()
    assert summary.judged == 1
    assert summary.tokens_spent > 0
    assert report.settings['summarizer'] == 'test'
