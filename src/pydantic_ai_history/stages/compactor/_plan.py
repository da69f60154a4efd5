"""Where a compaction cuts: a pure function of the units' costs and the policy's target.

No cache, store, clock or model here: the compactor's effectful steps (prefix lookup, transcript spill,
summary, prefix record) run around this decision, and the property tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...messages.units import fit_suffix

__all__ = ('CutPlan', 'plan_cut')


@dataclass(frozen=True, kw_only=True)
class CutPlan:
    """The decision: where the verbatim tail starts, and what it was allowed to cost."""

    unit: int | None
    """Index (into the history's units) of the first unit of the verbatim tail; None when nothing can be
    compacted (every unit after the head is needed to reach the target)."""
    tail_budget: int
    """Tokens the unpinned units of the tail may use: the target less the head, the other fixed costs, the
    summary's reserve and the pinned units' reserve."""
    pinned_reserve: int
    """Tokens reserved up front for the pinned units (verbatim in the tail or text in the pinned section)."""
    verbatim: int | None = None
    """The first unit of the tail kept verbatim under `tail_cap` (what a cheap tier may not touch): `unit`,
    unless the summary stops earlier to keep the unit `keep_from`. None when nothing can be compacted."""


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
) -> CutPlan:
    """The first unit of the verbatim tail for a history whose units after the head cost `unit_costs`.

    Args:
        unit_costs: the cost of each unit from `body_first` to the last (the current request).
        body_first: the index of the first unit after the preserved head (and the previous summary).
        target: the policy's target for the whole history after the compaction.
        fixed_cost: what stays whatever the cut: the head's messages, instructions and tools.
        summary_reserve: the summary's cap plus its framing.
        pinned: unit index -> tokens of that pinned unit as text in the pinned section (framing included).
            A pinned unit is kept either way, so the larger of its two costs is reserved up front and it
            costs nothing in the walk: pins never push the cut.
        pinned_carried: tokens of the pins earlier compactions carried, and of the transcript reference.
        pinned_section_cost: the pinned section's own overhead (heading, framing), paid when it has content.
        manual: a compaction the user asked for evicts at least one unit when there are two or more.
        tail_cap: the most the unpinned units of the verbatim tail may cost (a deep event keeps less than the
            target allows).
        keep_from: a unit the summary should not take (the latest user prompt) when everything from it on fits
            what the target allows: the cut stops there, while `verbatim` stays under `tail_cap`.
    """
    costs = list(unit_costs)
    reserve = pinned_carried
    for index, text_cost in pinned.items():
        offset = index - body_first
        reserve += max(costs[offset], text_cost)
        costs[offset] = 0
    if reserve:
        reserve += pinned_section_cost
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
