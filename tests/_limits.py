"""The policy artifact-stage tests plan against: the window less the 1,024 reserve, trigger at that budget."""

from __future__ import annotations

from pydantic_ai_history import ContextLimits, ContextPolicy
from pydantic_ai_history.budget.model_info import ModelInfo


def artifact_policy(
    context_window: int, *, large_item_tokens: int | None = None, item_tokens: int | None = None
) -> ContextPolicy:
    """The whole window less the 1,024 reserve, with the compaction trigger at that budget: the artifact
    stage's hard limit is then `context_window - 1,024`. `large_item_tokens`, `item_tokens`: the defaults
    unless given."""
    given = {'large_item_tokens': large_item_tokens, 'item_tokens': item_tokens}
    sizes = {name: value for name, value in given.items() if value is not None}
    return ContextPolicy(context_window=context_window, max_tokens=context_window - 1_024, **sizes)


def artifact_limits(context_window: int) -> ContextLimits:
    """`artifact_policy(context_window)` resolved (the model does not matter: the window is given)."""
    return artifact_policy(context_window).resolve(ModelInfo('openai:gpt-4o', None, 'unknown'))
