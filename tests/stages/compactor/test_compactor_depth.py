"""How deep a compaction event goes (`_depth`): stubs alone when carrying what they leave costs less than a
summarizer call, a summary when it does not."""

from __future__ import annotations

import pytest

from pydantic_ai_history import ArtifactSettings, CompactionSettings, ContextPolicy
from pydantic_ai_history.budget._policy import DEFAULT_ITEM_TOKENS
from pydantic_ai_history.budget.model_info import ModelInfo
from pydantic_ai_history.stages.compactor._depth import EventCosts, stubbed_growth, stubs_suffice


def costs(*, stubbed: int, summarized: int = 6_000, trigger: int = 40_000, growth: int = 1_500) -> EventCosts:
    return EventCosts(
        stubbed=stubbed,
        summarized=summarized,
        trigger=trigger,
        growth=growth,
        view_tokens=12_000,
        summary_tokens=1_000,
    )


def test_stubs_that_leave_no_more_than_a_summary_always_suffice() -> None:
    assert stubs_suffice(costs(stubbed=5_000), cached_input_ratio=1.0)


def test_a_small_surplus_carried_for_a_few_requests_is_cheaper_than_a_summary() -> None:
    # 4,000 extra tokens for (40,000 - 10,000) / 1,500 = 20 requests at a tenth: 8,000 < 12,000 + 5 * 1,000
    assert stubs_suffice(costs(stubbed=10_000), cached_input_ratio=0.1)


def test_a_large_surplus_carried_for_many_requests_is_worth_a_summary() -> None:
    # 20,000 extra tokens for (100,000 - 26,000) / 1,500 = 49 requests at a tenth: 98,666 > 17,000
    assert not stubs_suffice(costs(stubbed=26_000, trigger=100_000), cached_input_ratio=0.1)


def test_dearer_cache_reads_make_a_summary_worth_its_call_sooner() -> None:
    event = costs(stubbed=10_000)
    assert stubs_suffice(event, cached_input_ratio=0.1)
    assert not stubs_suffice(event, cached_input_ratio=0.5)  # gpt-4o's cached input: half price


def test_at_the_trigger_already_nothing_is_carried() -> None:
    assert stubs_suffice(costs(stubbed=40_000, trigger=40_000), cached_input_ratio=1.0)


def test_growth_before_the_event_is_counted_as_its_stubs_will_leave_it() -> None:
    # stubs keep 2,000 of the 10,000 tokens they replace now: 6,000 tokens of growth keep the newest step of
    # 1,000 whole and a fifth of the other 5,000
    assert stubbed_growth(6_000, 1_000, replaced=10_000, saved=8_000) == 1_000 + 5_000 // 5
    # nothing to stub, or no more than a step: counted whole
    assert stubbed_growth(6_000, 1_000, replaced=0, saved=0) == 6_000
    assert stubbed_growth(800, 1_000, replaced=10_000, saved=8_000) == 800


@pytest.mark.parametrize('ratio', [0, -0.1, 1.5, float('nan')])
def test_a_cached_input_ratio_outside_0_1_fails_at_construction(ratio: float) -> None:
    with pytest.raises(ValueError, match='cached_input_ratio'):
        CompactionSettings(cached_input_ratio=ratio)


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('cap', [0, -1])
def test_a_max_artifact_tokens_below_one_fails_at_construction(cap: int) -> None:
    with pytest.raises(ValueError, match='max_artifact_tokens'):
        ArtifactSettings(max_artifact_tokens=cap)


def test_the_view_cap_bounds_one_artifact_and_none_lifts_it() -> None:
    assert ArtifactSettings().sizes().view_cap(8_000) == DEFAULT_ITEM_TOKENS
    assert ArtifactSettings().sizes().view_cap(DEFAULT_ITEM_TOKENS - 50) == DEFAULT_ITEM_TOKENS - 50
    unbounded = ContextPolicy(context_window=64_000, item_tokens=None).resolve(ModelInfo('gpt-4o', None, 'x'))
    assert ArtifactSettings().sizes(unbounded).view_cap(8_000) == 8_000


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_the_deprecated_view_cap_is_honoured() -> None:
    assert ArtifactSettings(max_artifact_tokens=400).sizes().view_cap(8_000) == 400
    assert ArtifactSettings(max_artifact_tokens=None).sizes().view_cap(8_000) == 8_000
