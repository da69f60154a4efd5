"""`plan_cut`, the compactor's pure decision, driven directly by generated unit costs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pydantic_ai_history.stages.compactor._plan import plan_cut

costs_strategy = st.lists(st.integers(0, 5_000), min_size=1, max_size=40)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    costs = draw(costs_strategy)
    body_first = draw(st.integers(0, 5))
    pinned_offsets = draw(st.sets(st.integers(0, len(costs) - 1), max_size=min(len(costs), 5)))
    return {
        'unit_costs': costs,
        'body_first': body_first,
        'target': draw(st.integers(1, 60_000)),
        'fixed_cost': draw(st.integers(0, 5_000)),
        'summary_reserve': draw(st.integers(0, 2_500)),
        'pinned': {body_first + o: draw(st.integers(1, 3_000)) for o in pinned_offsets},
        'pinned_carried': draw(st.integers(0, 2_000)),
        'pinned_section_cost': draw(st.integers(0, 60)),
        'manual': draw(st.booleans()),
    }


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_cut_is_a_unit_boundary_that_keeps_the_current_request(case: dict[str, Any]) -> None:
    plan = plan_cut(**case)
    costs = case['unit_costs']
    body_first = case['body_first']
    last = body_first + len(costs) - 1
    if plan.unit is not None:
        assert body_first < plan.unit <= last, 'at least one unit is evicted and the current request stays'


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_unpinned_tail_fits_its_budget_unless_it_is_the_current_request_alone(
    case: dict[str, Any],
) -> None:
    plan = plan_cut(**case)
    if plan.unit is None:
        return
    costs, body_first, pinned = case['unit_costs'], case['body_first'], case['pinned']
    tail = [c for i, c in enumerate(costs) if body_first + i >= plan.unit and body_first + i not in pinned]
    last = body_first + len(costs) - 1
    if plan.unit < last:
        assert sum(tail) <= plan.tail_budget
    # the walk stops at the first unit that does not fit: the unit before the cut does not fit with the tail
    before = plan.unit - 1 - body_first
    if before >= 0 and plan.unit < last and body_first + before not in pinned:
        assert sum(tail) + costs[before] > plan.tail_budget


@settings(max_examples=200, deadline=None)
@given(cases(), st.integers(1, 20_000))
def test_a_larger_target_never_cuts_later(case: dict[str, Any], extra: int) -> None:
    # (a manual compaction of a body that fits whole evicts all but the current request: not monotone)
    case = {**case, 'manual': False}
    smaller = plan_cut(**case)
    larger = plan_cut(**{**case, 'target': case['target'] + extra})
    if smaller.unit is not None and larger.unit is not None:
        assert larger.unit <= smaller.unit


@settings(max_examples=200, deadline=None)
@given(cases())
def test_pins_reserve_their_larger_cost_and_never_push_the_cut(case: dict[str, Any]) -> None:
    plan = plan_cut(**case)
    costs, body_first, pinned = case['unit_costs'], case['body_first'], case['pinned']
    expected = case['pinned_carried'] + sum(max(costs[i - body_first], t) for i, t in pinned.items())
    if expected:
        expected += case['pinned_section_cost']
    assert plan.pinned_reserve == expected


def test_a_body_that_fits_whole_is_not_cut_unless_the_user_asks() -> None:
    common = {'body_first': 2, 'target': 1_000, 'fixed_cost': 0, 'summary_reserve': 0, 'pinned': {}}
    assert plan_cut(unit_costs=[100, 100], **common).unit is None
    assert plan_cut(unit_costs=[100, 100], manual=True, **common).unit == 3
    assert plan_cut(unit_costs=[100], manual=True, **common).unit is None
    # the walk stops at the 990 that does not fit: the 100 before it goes too, though it would fit
    assert plan_cut(unit_costs=[100, 990, 50], **common).unit == 4
    # the current request stays whatever it costs
    assert plan_cut(unit_costs=[900, 5_000], **common).unit == 3
