"""Where a compaction cuts: a pure function of the units' costs and the policy's target.

No cache, store, clock or model here: the compactor's effectful steps (prefix lookup, transcript spill,
summary, prefix record) run around this decision, and the property tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...messages.units import fit_suffix


@dataclass(frozen=True, kw_only=True)
class CutPlan:
    """The decision: where the verbatim tail starts, and what it was allowed to cost."""

    unit: int | None
    """The first unit of the verbatim tail; None when every unit after the head is needed for the target."""
    tail_budget: int
    """Tokens the unpinned units of the tail may use after fixed costs and reserves."""
    pinned_reserve: int
    """Tokens reserved up front for the pinned units (verbatim in the tail or text in the pinned section) and
    the current run's question (verbatim wherever the cut falls)."""
    verbatim: int | None = None
    """The first unit kept under `tail_cap` (the cheap tier may not touch it): `unit`, unless the summary
    stops earlier to keep `keep_from`."""


def plan_cut(
    *,
    unit_costs: Sequence[int],
    body_first: int,
    target: int,
    fixed_cost: int,
    summary_reserve: int,
    pinned: Mapping[int, int],
    pinned_carried: int = 0,
    pinned_section_cost: int = 0,
    manual: bool = False,
    tail_cap: int | None = None,
    keep_from: int | None = None,
    question: int | None = None,
) -> CutPlan:
    """The first unit of the verbatim tail for a body (from `body_first`) whose units cost `unit_costs`.

    `pinned` maps unit index -> its cost as pinned-section text: a pin is kept either way, so the larger of
    its two costs is reserved up front and it costs nothing in the walk (pins never push the cut).
    `pinned_carried`: earlier pins and the transcript reference. `manual` evicts at least one unit when there
    are two or more. `tail_cap` bounds the verbatim tail (a deep event). `keep_from` (the latest user prompt)
    is left out of the summary when everything from it on fits the target; `verbatim` stays under `tail_cap`.
    `question` (the current run's, not pinned) is kept verbatim wherever the cut falls: reserved like a pin.
    """
    costs = list(unit_costs)
    reserve = pinned_carried
    for index, text_cost in pinned.items():
        offset = index - body_first
        reserve += max(costs[offset], text_cost)
        costs[offset] = 0
    if reserve:
        reserve += pinned_section_cost
    if question is not None and question not in pinned and 0 <= question - body_first < len(costs):
        reserve += costs[question - body_first]
        costs[question - body_first] = 0
    allowed = target - fixed_cost - summary_reserve - reserve
    budget = allowed if tail_cap is None else min(allowed, tail_cap)
    cut = fit_suffix(costs, budget, at_least=1)
    if cut == 0:
        last = len(costs) - 1
        return CutPlan(
            unit=body_first + last if manual and last > 0 else None,
            tail_budget=budget,
            pinned_reserve=reserve,
        )
    unit = body_first + cut
    if (
        keep_from is not None
        and body_first <= keep_from < unit
        and sum(costs[keep_from - body_first :]) <= allowed
    ):
        unit = keep_from
    return CutPlan(unit=unit, tail_budget=budget, pinned_reserve=reserve, verbatim=body_first + cut)
