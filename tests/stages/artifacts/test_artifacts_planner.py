"""Planning: when an LLM plan is worth it, the heuristic plan, the LLM plan honoured, and its fallbacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from _artifact_helpers import make_processor, marker, planner_model, tool_history, tool_returns
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.usage import RequestUsage

from _limits import artifact_limits
from pydantic_ai_history import ContextPolicy, assert_valid_history
from pydantic_ai_history.budget._policy import DEFAULT_LARGE_ITEM_TOKENS
from pydantic_ai_history.budget.model_info import ModelInfo
from pydantic_ai_history.stages.artifacts import (
    Artifact,
    ArtifactPlan,
    ArtifactSettings,
    ProcessingStrategy,
    should_use_llm_planning,
)

S = ArtifactSettings()
LARGE = DEFAULT_LARGE_ITEM_TOKENS
HALF = LARGE // 2
FITS = -(-LARGE * 10 // 7)
"""The least budget a large artifact fits with the 30% margin."""
GPT_4O = ModelInfo('openai:gpt-4o', None, 'unknown')


def art(chars: int, tokens: int | None = None, step: int = 2) -> Artifact:
    return Artifact(
        id=f'art_{chars}_{step}',
        kind='tool_result',
        source="tool 't'",
        chars=chars,
        tokens=tokens if tokens is not None else chars // 4,
        step=step,
    )


# ---- should_use_llm_planning ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('artifacts', 'budget', 'price', 'expected'),
    [
        ([], 10_000, None, False),  # nothing to plan
        ([art(4_996, HALF - 1)], 100, 50.0, False),  # under half of large_item_tokens, even over budget, dear
        ([art(5_000, HALF)], 10_000, 1.0, False),  # at that threshold, fits with margin, cheap, small
        ([art(10_000, LARGE)], FITS, 1.0, False),  # 70% of the budget still fits with the 30% margin
        ([art(10_000, LARGE)], FITS - 1, 1.0, True),  # one token less of budget is "near the budget"
        ([art(6_000, HALF), art(4_000, HALF)], 10_000, 10.0, False),  # $10 is not "more than $10"
        ([art(6_000, HALF), art(4_000, HALF)], 10_000, 10.01, True),  # expensive primary model
        ([art(6_000, HALF), art(4_000, HALF)], 10_000, None, False),  # unknown price counts as cheap
        ([art(10_001, LARGE + 1)], 10_000, 1.0, True),  # an artifact over large_item_tokens
    ],
)
def test_should_use_llm_planning_matrix(
    artifacts: list[Artifact], budget: int, price: float | None, expected: bool
) -> None:
    choice = should_use_llm_planning(artifacts, budget_tokens=budget, input_price_per_mtok=price, settings=S)
    assert bool(choice) is expected, choice.reason
    assert choice.reason


def test_thresholds_follow_the_policy() -> None:
    limits = ContextPolicy(context_window=100_000, large_item_tokens=12_500).resolve(GPT_4O)
    sizes = S.sizes(limits)
    assert not should_use_llm_planning(
        [art(20_000, 10_000)], budget_tokens=20_000, input_price_per_mtok=1.0, sizes=sizes
    )
    assert should_use_llm_planning([art(60_000, 12_501)], budget_tokens=20_000, sizes=sizes)


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_the_deprecated_thresholds_are_honoured() -> None:
    settings = ArtifactSettings(
        large_artifact_chars=50_000, skip_below_chars=100, expensive_price_per_mtok=100.0, margin=0.0
    )
    assert not should_use_llm_planning(
        [art(20_000, 10_000)], budget_tokens=10_000, input_price_per_mtok=50.0, settings=settings
    )
    assert should_use_llm_planning([art(20_000, 10_001)], budget_tokens=10_000, settings=settings)


def test_llm_planning_is_off_by_default() -> None:
    assert not ArtifactSettings().uses_llm_planning
    assert ArtifactSettings(planner_model='openai:gpt-4o-mini').uses_llm_planning
    assert ArtifactSettings(llm_planning=True).uses_llm_planning
    assert not ArtifactSettings(llm_planning=False, planner_model='openai:gpt-4o-mini').uses_llm_planning


# ---- heuristic and LLM plans through the stage ---------------------------------------------------------


def _three_tools(fixtures_dir: Path) -> list[Any]:
    """One user question, then one response calling three tools, whose returns are the current request."""
    out = fixtures_dir / 'tool_outputs'
    contents = {
        'products': json.loads((out / 'tau-bench_retail_products.json').read_text()),
        'airports': (out / 'vega_datasets/airports.csv').read_text(),
        'stocks': (out / 'vega_datasets/stocks.csv').read_text()[:4_000],
    }
    calls = [ToolCallPart(tool_name=n, args={}, tool_call_id=f'c_{n}') for n in contents]
    returns = [ToolReturnPart(tool_name=n, content=c, tool_call_id=f'c_{n}') for n, c in contents.items()]
    return [
        ModelRequest(parts=[UserPromptPart(content='What does the Bicycle cost?')]),
        ModelResponse(parts=calls, usage=RequestUsage(input_tokens=30, output_tokens=20)),
        ModelRequest(parts=returns),
    ]


@pytest.mark.anyio
async def test_heuristic_plan_smallest_first_and_budgeted(fixtures_dir: Path) -> None:
    processor, recorder = make_processor(
        context_window=16_000, large_item_tokens=3_500
    )  # the ~2,550-token stocks stay whole
    history = _three_tools(fixtures_dir)
    out = await processor.process(history)
    assert_valid_history(out)
    by_tool = {p.tool_name: p for p in tool_returns(out)}
    assert by_tool['stocks'].content == tool_returns(history)[2].content  # small: always included
    sizes = [e.tokens_before for e in recorder.artifacts]
    assert sizes == sorted(sizes)
    assert recorder.artifacts[0].source == "tool 'stocks'"
    assert all(marker(by_tool[n])['strategy'] in {'extract', 'exclude'} for n in ('products', 'airports'))
    # the current request's artifacts are never excluded without a useful preview
    assert all(marker(by_tool[n])['strategy'] == 'extract' for n in ('products', 'airports'))
    counter = processor.counter_for('gpt-4o')
    assert (
        sum(counter.count_part(p) for p in by_tool.values())
        <= S.resolve_budget(artifact_limits(16_000)) + 2 * S.sizes().least_preview
    )


@pytest.mark.anyio
async def test_llm_plan_is_honoured(fixtures_dir: Path) -> None:
    prompts: list[str] = []

    def build(ids: list[str], prompt: str) -> dict[str, Any]:
        assert 'What does the Bicycle cost?' in prompt
        assert 'Budget for all artifacts together' in prompt
        return {
            'decisions': [
                {
                    'artifact_id': ids[1],
                    'strategy': 'exclude',
                    'priority': 1,
                    'rationale': 'airports are irrelevant',
                },
                {
                    'artifact_id': ids[0],
                    'strategy': 'extract',
                    'priority': 0,
                    'rationale': 'need the price',
                    'extraction_query': 'Bicycle',
                },
            ],
            'reasoning': 'products answer the question',
        }

    settings = ArtifactSettings(planner_model=planner_model(build, prompts))
    processor, recorder = make_processor(settings, context_window=16_000)
    out = await processor.process(_three_tools(fixtures_dir))
    assert_valid_history(out)
    assert len(prompts) == 1
    by_tool = {p.tool_name: p for p in tool_returns(out)}
    assert marker(by_tool['products'])['strategy'] == 'extract'
    assert '"name":"Bicycle"' in by_tool['products'].content
    assert marker(by_tool['airports'])['strategy'] == 'exclude'
    assert "read_artifact(artifact_id='art_" in by_tool['airports'].content
    assert 'preview: iata,name,city' in by_tool['airports'].content
    # priority order: products (0) before airports (1); the small stocks table, not in the plan, comes last
    assert [e.source for e in recorder.artifacts] == ["tool 'products'", "tool 'airports'", "tool 'stocks'"]
    assert recorder.artifacts[1].rationale == 'airports are irrelevant'


def _fails(output: Any) -> Any:
    return lambda ids, prompt: output(ids) if callable(output) else output


@pytest.mark.anyio
@pytest.mark.parametrize(
    'output',
    [
        pytest.param('not json at all', id='garbage'),
        pytest.param(
            lambda ids: {'decisions': [{'artifact_id': 'art_' + '0' * 64, 'strategy': 'exclude'}]},
            id='unknown-id',
        ),
        pytest.param(
            lambda ids: {'decisions': [{'artifact_id': ids[0], 'strategy': 'shrink'}]}, id='bad-strategy'
        ),
        pytest.param(lambda ids: {'decisions': []}, id='empty'),
        pytest.param(RuntimeError('planner provider is down'), id='exception'),
    ],
)
async def test_bad_planner_output_falls_back_to_heuristic(fixtures_dir: Path, output: Any) -> None:
    heuristic, heuristic_events = make_processor(context_window=16_000)
    expected = await heuristic.process(_three_tools(fixtures_dir))

    settings = ArtifactSettings(planner_model=planner_model(_fails(output)))
    processor, recorder = make_processor(settings, context_window=16_000)
    out = await processor.process(_three_tools(fixtures_dir))
    assert_valid_history(out)
    assert [p.content for p in tool_returns(out)] == [p.content for p in tool_returns(expected)]
    assert [e.strategy for e in recorder.artifacts] == [e.strategy for e in heuristic_events.artifacts]
    assert recorder.warnings('artifact_planner_failed')


@pytest.mark.anyio
async def test_planner_timeout_falls_back(fixtures_dir: Path) -> None:
    from pydantic_ai.models.function import FunctionModel

    async def slow(messages: Any, info: Any) -> Any:
        await anyio.sleep(5)
        raise AssertionError('not reached')

    settings = ArtifactSettings(planner_model=FunctionModel(slow), planner_timeout=0.05)
    processor, recorder = make_processor(settings, context_window=16_000, large_item_tokens=3_500)
    out = await processor.process(_three_tools(fixtures_dir))
    assert_valid_history(out)
    assert recorder.warnings('artifact_planner_failed')
    assert {e.strategy for e in recorder.artifacts} == {'include_full', 'extract'}


@pytest.mark.anyio
async def test_llm_planner_skipped_when_not_worth_it() -> None:
    """Small artifacts on a cheap model: the planner model is never called."""
    prompts: list[str] = []
    settings = ArtifactSettings(planner_model=planner_model(lambda ids, p: {'decisions': []}, prompts))
    processor, recorder = make_processor(settings, context_window=128_000, large_item_tokens=3_500)
    out = await processor.process(tool_history('hi', 'small', 'x ' * 3_000))
    assert out[-1] is not None
    assert prompts == []
    assert recorder.artifacts == []


def test_plan_is_a_pydantic_model() -> None:
    plan = ArtifactPlan.model_validate(
        {
            'decisions': [
                {'artifact_id': 'a', 'strategy': 'summarize', 'priority': 2},
                {'artifact_id': 'b', 'strategy': 'extract', 'priority': 1},
            ]
        }
    )
    assert [d.artifact_id for d in plan.ordered()] == ['b', 'a']
    assert plan.decisions[0].strategy is ProcessingStrategy.SUMMARIZE
    schema = ArtifactPlan.model_json_schema()
    assert 'decisions' in schema['properties']
