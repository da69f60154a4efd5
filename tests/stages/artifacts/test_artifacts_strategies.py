"""Each strategy on real large tool outputs: valid budgeted histories, exact originals stored, facts found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _artifact_helpers import (
    ART_ID,
    make_processor,
    marker,
    planner_model,
    summarizer_model,
    tool_history,
    tool_returns,
)
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.usage import RequestUsage

from _fixtures import need
from _limits import artifact_limits
from pydantic_ai_history import SummarizerSettings, assert_valid_history
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.events import ContentLost
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.stages.artifacts import ARTIFACT_MARKER, ArtifactSettings
from pydantic_ai_history.store import MemoryStore, StoreError

pytestmark = pytest.mark.anyio

WINDOW = 16_000
BUDGET = ArtifactSettings().resolve_budget(artifact_limits(WINDOW))  # 0.5 * (16,000 - 1,024)


def _fixture(fixtures_dir: Path, name: str) -> tuple[str, Any]:
    """(tool name, content as a tool would return it) for a fixture in tool_outputs/."""
    path = need(fixtures_dir / 'tool_outputs' / name)
    if name.endswith('.json'):
        return 'get_json', json.loads(path.read_text())
    return 'fetch', path.read_text(errors='replace')


FIXTURES = [
    'tau-bench_retail_products.json',
    'octokit-fixtures/paginate-issues.raw-fixture.json',
    'vega_datasets/airports.csv',
    'readability-pages/nytimes-3/source.html',
]


def _plan_all(strategy: str) -> Any:
    def build(ids: list[str], prompt: str) -> dict[str, Any]:
        return {
            'decisions': [
                {
                    'artifact_id': i,
                    'strategy': strategy,
                    'priority': n,
                    'rationale': 'test',
                    'summarization_focus': 'prices',
                }
                for n, i in enumerate(ids)
            ],
            'reasoning': f'all {strategy}',
        }

    return build


async def _stored_text(processor: Any, artifact_id: str) -> str:
    data = await processor.store.get(artifact_id)
    assert data is not None
    return data.decode()


@pytest.mark.parametrize('name', FIXTURES)
@pytest.mark.parametrize('strategy', ['include_full', 'summarize', 'extract', 'exclude'])
async def test_strategy_gives_valid_budgeted_history(fixtures_dir: Path, name: str, strategy: str) -> None:
    tool, content = _fixture(fixtures_dir, name)
    summaries: list[str] = []
    settings = ArtifactSettings(planner_model=planner_model(_plan_all(strategy)))
    processor, recorder = make_processor(
        settings, context_window=WINDOW, summarizer=SummarizerSettings(model=summarizer_model(summaries))
    )
    history = tool_history('Which items are listed, and what do they cost?', tool, content)
    out = await processor.process(history)

    assert_valid_history(out)
    counter = processor.counter_for('gpt-4o')
    part = tool_returns(out)[0]
    # include_full of something larger than the budget cannot be honoured: it is extracted instead
    expected = 'extract' if strategy == 'include_full' else strategy
    assert marker(part)['strategy'] == expected
    assert counter.count_part(part) <= BUDGET
    assert counter.count_messages(out) <= WINDOW - 1_024
    event = recorder.artifacts[0]
    assert (event.strategy, event.tokens_after) == (expected, counter.count_part(part))
    assert event.tokens_before > BUDGET
    assert len(summaries) == (1 if strategy == 'summarize' else 0)
    # the exact original, as the model would have seen it (JSON text for structured returns), is stored
    original = tool_returns(history)[0].model_response_str()
    artifact_id = marker(part)['artifact_id']
    assert await _stored_text(processor, artifact_id) == original
    assert artifact_id in part.content
    assert part.content.startswith(ARTIFACT_MARKER)


async def test_small_budget_fits_include_full(fixtures_dir: Path) -> None:
    """When the budget and the per-artifact cap allow, the plan's include_full keeps the artifact unchanged
    and unmarked."""
    tool, content = _fixture(fixtures_dir, 'vega_datasets/stocks.csv')
    settings = ArtifactSettings(
        llm_planning=True, planner_model=planner_model(_plan_all('include_full')), max_artifact_tokens=None
    )
    processor, recorder = make_processor(settings, context_window=64_000)
    history = tool_history('How did MSFT do?', tool, content)
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    assert tool_returns(out)[0] is tool_returns(history)[0]
    assert [e.strategy for e in recorder.artifacts] == ['include_full']


async def _extract(fixtures_dir: Path, name: str, question: str, *, item_tokens: int | None = None) -> str:
    tool, content = _fixture(fixtures_dir, name)
    processor, recorder = make_processor(context_window=WINDOW, item_tokens=item_tokens)
    history = tool_history(question, tool, content)
    out = await processor.process(history)
    assert_valid_history(out)
    part = tool_returns(out)[0]
    assert marker(part)['strategy'] == 'extract'
    assert processor.counter_for('gpt-4o').count_part(part) <= BUDGET
    assert [e.strategy for e in recorder.artifacts] == ['extract']
    return str(part.content)


async def test_extract_finds_product_price(fixtures_dir: Path) -> None:
    products = json.loads((fixtures_dir / 'tool_outputs' / 'tau-bench_retail_products.json').read_text())
    bicycle = next(p for p in products.values() if p['name'] == 'Bicycle')
    # the answer is several records (each variant and its price): a view with room for them all
    text = await _extract(
        fixtures_dir, 'tau-bench_retail_products.json', 'What does the Bicycle cost?', item_tokens=500
    )
    for item_id, variant in bicycle['variants'].items():
        assert f'"item_id":"{item_id}"' in text
        assert f'"price":{variant["price"]}' in text
    assert len(text) < len(json.dumps(products)) / 4


async def test_extract_finds_issue_title(fixtures_dir: Path) -> None:
    text = await _extract(
        fixtures_dir,
        'octokit-fixtures/paginate-issues.normalized-fixture.json',
        'What is the title of issue number 7?',
    )
    assert '"title":"Test issue 7"' in text
    assert '"number":7,' in text


async def test_extract_finds_airport_city(fixtures_dir: Path) -> None:
    text = await _extract(
        fixtures_dir, 'vega_datasets/airports.csv', 'In which city is the Eugenio Maria De Hostos airport?'
    )
    assert 'MAZ,Eugenio Maria De Hostos,Mayaguez,PR,USA' in text
    assert 'iata,name,city,state,country,latitude,longitude' in text  # the header is repeated before the rows
    assert 'showing chunk' in text
    assert ' of ' in text


async def test_second_identical_run_hits_cache_for_every_summary(fixtures_dir: Path) -> None:
    cache = MemoryCache()
    summaries: list[str] = []
    settings = ArtifactSettings(planner_model=planner_model(_plan_all('summarize')))
    summarizer = SummarizerSettings(model=summarizer_model(summaries))
    histories = []
    for name in ('tau-bench_retail_products.json', 'vega_datasets/airports.csv'):
        tool, content = _fixture(fixtures_dir, name)
        histories.append(tool_history('Summarize it', tool, content))
    first_outputs = []
    for history in histories:
        processor, _ = make_processor(settings, cache=cache, summarizer=summarizer)
        first_outputs.append(await processor.process(history))
    assert len(summaries) == 2
    hits_before = cache.stats.hits
    for history, first in zip(histories, first_outputs, strict=True):
        processor, recorder = make_processor(
            settings, cache=cache, summarizer=summarizer
        )  # a new process, the same shared cache
        out = await processor.process(history)
        assert_valid_history(out)
        assert tool_returns(out)[0].content == tool_returns(first)[0].content
        assert [e.cache_hit for e in recorder.artifacts] == [True]
    assert len(summaries) == 2
    assert cache.stats.hits - hits_before == 2


async def test_failing_summarizer_falls_back_to_extract(fixtures_dir: Path) -> None:
    tool, content = _fixture(fixtures_dir, 'vega_datasets/airports.csv')
    calls: list[str] = []
    settings = ArtifactSettings(planner_model=planner_model(_plan_all('summarize')))
    processor, recorder = make_processor(
        settings, summarizer=SummarizerSettings(model=summarizer_model(calls, fail=True))
    )
    out = await processor.process(tool_history('Where is Willow Run airport?', tool, content))
    assert_valid_history(out)
    assert len(calls) == 1
    part = tool_returns(out)[0]
    assert marker(part)['strategy'] == 'extract'
    assert 'YIP,Willow Run,Detroit,MI' in part.content
    assert recorder.warnings('artifact_summary_failed')


class BrokenStore(MemoryStore):
    async def _put(self, *args: Any) -> Any:
        raise StoreError('disk full')


async def test_store_failure_keeps_content_inline_when_the_request_can_carry_it(fixtures_dir: Path) -> None:
    tool, content = _fixture(fixtures_dir, 'vega_datasets/airports.csv')  # ~60K tokens
    processor, recorder = make_processor(store=BrokenStore(), context_window=100_000)
    history = tool_history('Where is Willow Run airport?', tool, content)
    out = await processor.process(history)
    assert tool_returns(out)[0].content == content
    assert recorder.warnings('artifact_store_failed')
    assert [e.strategy for e in recorder.artifacts] == ['include_full']
    assert not recorder.warnings('content_cut')


async def test_store_failure_cuts_what_no_request_can_carry_and_says_so(fixtures_dir: Path) -> None:
    """Inline, the 60K-token return would make a request the 16K window rejects: it is cut anyway, and
    `ContentLost` names the call whose content is gone beyond what is shown."""
    tool, content = _fixture(fixtures_dir, 'vega_datasets/airports.csv')
    processor, recorder = make_processor(store=BrokenStore())
    history = tool_history('Where is Willow Run airport?', tool, content)
    out = await processor.process(history)
    assert_valid_history(out)
    part = tool_returns(out)[0]
    assert 'YIP,Willow Run,Detroit,MI' in part.content
    assert 'could not be stored' in part.content
    assert processor.counter_for('gpt-4o').estimate(out).total <= artifact_limits(16_000).budget
    [lost] = recorder.warnings('content_cut')
    assert isinstance(lost, ContentLost)
    assert lost.tool_calls == (f'{tool}#call_1',)


async def test_processed_once_and_read_back_exact(fixtures_dir: Path) -> None:
    tool, content = _fixture(fixtures_dir, 'tau-bench_retail_products.json')
    processor, recorder = make_processor()
    history = tool_history('What does the Bicycle cost?', tool, content)
    out = await processor.process(history)
    assert len(recorder.artifacts) == 1
    again = await processor.process(out)
    assert len(recorder.artifacts) == 1  # nothing redone
    assert [id(m) for m in again] == [id(m) for m in out]
    artifact_id = ART_ID.search(tool_returns(out)[0].content).group()  # type: ignore[union-attr]
    original = json.dumps(content, separators=(',', ':'))
    pieces, offset = [], 0
    while True:
        text = await read_artifact_text(processor.store, artifact_id, offset=offset, limit=30_000)
        header, _, chunk = text.partition('\n')
        assert header.startswith(f'[{artifact_id}: characters')
        pieces.append(chunk)
        offset += len(chunk)
        if 'Call again' not in header:
            break
    assert ''.join(pieces) == original
    passages = await read_artifact_text(processor.store, artifact_id, query='Bicycle price', limit=3_000)
    assert '"name":"Bicycle"' in passages
    assert len(passages) <= 3_000


async def test_older_artifacts_are_not_replanned_under_budget(fixtures_dir: Path) -> None:
    """An include_full artifact from an earlier step stays as sent while the history is under budget."""
    tool, content = _fixture(fixtures_dir, 'vega_datasets/stocks.csv')  # 12 KB: large, but fits
    processor, recorder = make_processor(ArtifactSettings(max_artifact_tokens=None), context_window=128_000)
    history = tool_history('How did MSFT do?', tool, content)
    out = await processor.process(history)
    assert tool_returns(out)[0] is tool_returns(history)[0]
    later = [
        *out,
        ModelResponse(
            parts=[TextPart('MSFT went up.')], usage=RequestUsage(input_tokens=4_000, output_tokens=5)
        ),
        ModelRequest(parts=[UserPromptPart('And AAPL?')]),
    ]
    result = await processor.process(later)
    assert result is later or result == later
    assert len(recorder.artifacts) == 1
