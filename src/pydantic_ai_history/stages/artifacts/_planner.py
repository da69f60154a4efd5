"""Deciding what to do with each artifact: when an LLM plan is worth it, the heuristic plan, the LLM plan."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...context._artifact_models import Artifact, ArtifactDecision, ArtifactPlan, ProcessingStrategy
from ...context._artifact_settings import ArtifactSettings, ArtifactSizes
from ...context._context import StageOperations
from ._extract import Candidate

logger = logging.getLogger('pydantic_ai_history.artifacts')

_DEFAULT_SETTINGS = ArtifactSettings()


@dataclass(frozen=True)
class PlanningChoice:
    """Whether an LLM plan is worth its cost, and why. Truthy when it is."""

    use_llm: bool
    reason: str

    def __bool__(self) -> bool:
        return self.use_llm


def should_use_llm_planning(
    artifacts: Sequence[Artifact],
    *,
    budget_tokens: int,
    input_price_per_mtok: float | None = None,
    settings: ArtifactSettings = _DEFAULT_SETTINGS,
    sizes: ArtifactSizes | None = None,
) -> PlanningChoice:
    """Whether one extra LLM call to plan is worth it: not when there is little to plan; yes when near or over
    budget, on an expensive model (a wrong include costs more than the plan), or when an artifact is large."""
    if not artifacts:
        return PlanningChoice(False, 'no artifacts')
    sizes = sizes or settings.sizes()
    total_tokens = sum(a.tokens for a in artifacts)
    if total_tokens < sizes.skip_below:
        return PlanningChoice(False, f'artifacts total {total_tokens:,} tokens < {sizes.skip_below:,}')
    if total_tokens > budget_tokens * (1 - settings.margin):
        return PlanningChoice(
            True, f'artifacts ({total_tokens:,} tokens) are near or over the budget of {budget_tokens:,}'
        )
    if input_price_per_mtok is not None and input_price_per_mtok > settings.expensive_price_per_mtok:
        return PlanningChoice(
            True, f'expensive primary model (${input_price_per_mtok:g} per million input tokens)'
        )
    largest = max(artifacts, key=lambda a: a.tokens)
    if largest.tokens > sizes.large:
        return PlanningChoice(
            True, f'artifact {largest.id[:16]} has {largest.tokens:,} tokens > {sizes.large:,}'
        )
    return PlanningChoice(False, 'everything fits with margin on a cheap model')


def query_for(candidate: Candidate, question: str) -> str:
    """The question and the call's arguments: what an extraction or a summary looks for."""
    return ' '.join(p for p in (question, candidate.hint) if p)


def heuristic_plan(
    candidates: Sequence[Candidate],
    *,
    question: str,
    budget_tokens: int,
    settings: ArtifactSettings = _DEFAULT_SETTINGS,
    sizes: ArtifactSizes | None = None,
) -> ArtifactPlan:
    """The deterministic plan: newest and smallest first; include what fits, reduce the rest (a large artifact
    with `default_reduction` to its share of what is left, at least `sizes.least_preview`)."""
    sizes = sizes or settings.sizes()
    order = sorted(candidates, key=lambda c: (-c.artifact.step, c.artifact.tokens, c.id))
    remaining = budget_tokens
    large_left = sum(1 for c in order if c.artifact.tokens > sizes.large)
    decisions: list[ArtifactDecision] = []
    for priority, candidate in enumerate(order):
        a = candidate.artifact
        query = query_for(candidate, question) or None
        large = a.tokens > sizes.large
        if not large or a.tokens <= sizes.view_cap(remaining):
            large_left -= large
            strategy, query = ProcessingStrategy.INCLUDE_FULL, None
            rationale = f'fits: {a.tokens:,} of {remaining:,} tokens left'
            remaining -= a.tokens  # small ones always come in: what is left may go below zero
        else:
            share = sizes.view_cap(remaining // max(large_left, 1))
            large_left -= 1
            strategy = ProcessingStrategy(settings.default_reduction)
            kept = max(share, sizes.least_preview)
            rationale = (
                f'{a.tokens:,} tokens do not fit the {remaining:,} left; {strategy.value} about {kept:,}'
            )
            remaining = max(remaining - kept, 0)
        decisions.append(
            ArtifactDecision(
                artifact_id=a.id,
                strategy=strategy,
                priority=priority,
                rationale=rationale,
                summarization_focus=query,
                extraction_query=query,
            )
        )
    return ArtifactPlan(
        decisions=decisions,
        reasoning='heuristic: newest and smallest first, include what fits, reduce the rest',
    )


PLANNER_INSTRUCTIONS = """\
You plan how large tool outputs and files fit into an AI assistant's limited context.
For every artifact choose one strategy:
- include_full: keep it unchanged (only when it fits the budget and is needed),
- summarize: replace it by a summary; give a summarization_focus (what the summary must keep),
- extract: keep only passages relevant to an extraction_query (precise facts, names, ids to look up),
- exclude: drop it, leaving a stub (it stays retrievable by id).
Give each decision a priority (0 = first served from the budget) and a one-sentence rationale.
Use exactly the artifact ids listed. Prefer what the user's latest question needs; the artifacts of the
current request are what the assistant is working on right now."""


def planner_prompt(
    candidates: Sequence[Candidate], *, question: str, budget_tokens: int, preview_chars: int
) -> str:
    lines = [
        f'Budget for all artifacts together: {budget_tokens:,} tokens.',
        f"User's latest question: {question or '(none)'}",
        '',
        'Artifacts:',
    ]
    for c in candidates:
        a = c.artifact
        preview = ' '.join(c.text[: preview_chars * 3].split())[:preview_chars]
        lines.append(
            f'- id: {a.id}\n  kind: {a.kind}; source: {a.source}; message {a.step}; {a.chars:,} chars; '
            f'~{a.tokens:,} tokens\n  preview: {preview}'
        )
    return '\n'.join(lines)


class InvalidPlan(ValueError):
    """The planner's output names unknown artifacts or decides nothing."""


def validate_plan(
    plan: ArtifactPlan, candidates: Sequence[Candidate], fallback: ArtifactPlan
) -> ArtifactPlan:
    """One decision per candidate: unknown ids make the plan invalid; missing ones come from `fallback`."""
    known = {c.id for c in candidates}
    unknown = [d.artifact_id for d in plan.decisions if d.artifact_id not in known]
    if unknown:
        raise InvalidPlan(f'unknown artifact ids: {unknown[:3]}')
    if not plan.decisions:
        raise InvalidPlan('the plan has no decisions')
    decisions: dict[str, ArtifactDecision] = {}
    for decision in plan.ordered():
        decisions.setdefault(decision.artifact_id, decision)
    top = max(d.priority for d in decisions.values())
    for extra in fallback.ordered():
        if extra.artifact_id not in decisions:
            rationale = 'not in the LLM plan; ' + extra.rationale
            update = {'priority': top + 1 + extra.priority, 'rationale': rationale}
            decisions[extra.artifact_id] = extra.model_copy(update=update)
    return ArtifactPlan(decisions=list(decisions.values()), reasoning=plan.reasoning)


async def llm_plan(
    candidates: Sequence[Candidate],
    *,
    question: str,
    budget_tokens: int,
    model: Any,
    settings: ArtifactSettings = _DEFAULT_SETTINGS,
    operations: StageOperations,
) -> tuple[ArtifactPlan, str | None]:
    """One call to the planner model; returns the plan and None, or the heuristic plan and why it was used."""
    fallback = heuristic_plan(candidates, question=question, budget_tokens=budget_tokens, settings=settings)
    prompt = planner_prompt(
        candidates,
        question=question,
        budget_tokens=budget_tokens,
        preview_chars=settings.planner_preview_chars,
    )
    try:
        plan = await operations.request_plan(
            prompt, model=model, instructions=PLANNER_INSTRUCTIONS, timeout=settings.planner_timeout
        )
        return validate_plan(plan, candidates, fallback), None
    # garbage, unknown ids, provider errors, timeouts: the heuristic plan is always valid
    except Exception as exc:
        reason = f'{type(exc).__name__}: {exc}'[:300]
        logger.warning('artifact planner failed (%s); using the heuristic plan', reason)
        return fallback, reason
