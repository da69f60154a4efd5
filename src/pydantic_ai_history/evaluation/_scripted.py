"""The scripted summarizer: structured summaries written from the prompt, offline (no network, no key).

The evaluation's default summarizer and the demo's; it recognises the demo session's tasks and tools.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart

from ..context._artifact_models import ArtifactPlan
from ..stages._transcript import content_text

TOOLS = ('search_orders', 'export_inventory', 'tail_logs', 'get_ticket')
"""The demo session's tools; the summary counts the calls to each."""
TASKS = (
    'Audit the EU orders: find refunds that are still pending and check the payment logs for timeouts.',
    'Here is the finance audit report (PDF). Reconcile it with the orders and the inventory in FRA-1.',
    'Check the support tickets from Japanese and Chinese customers and draft replies.',
    'This dashboard screenshot shows a spike. Find which service caused it in the logs.',
    'Compare inventory across warehouses and list SKUs below their reorder level.',
    'Summarize everything found so far for the weekly ops review.',
)
"""The demo session's user tasks, one a turn; the summary names those it finds as the goal."""


def scripted_summarizer() -> Any:
    """The offline stand-in for a summarizer: `summarize_prompt` as a `FunctionModel` (no network)."""
    from pydantic_ai.models.function import FunctionModel

    return FunctionModel(summarize_prompt, model_name='scripted-summarizer')


def text_of(messages: Sequence[ModelMessage]) -> str:
    """Every part's text and tool arguments, one chunk a line (media as placeholders)."""
    parts = [part for message in messages for part in message.parts]
    return '\n'.join(
        content_text(part.args if isinstance(part, ToolCallPart) else getattr(part, 'content', None))
        for part in parts
    )


def summarize_prompt(messages: list[ModelMessage], info: Any) -> ModelResponse:
    """The demo's summarizer (and planner): a structured summary written from the prompt it was given.

    Asked for structured output (the artifact planner's plan), it answers an empty plan, which the planner
    replaces with its heuristic plan: the scripted model has no judgement to offer.
    """
    if info.output_tools:
        plan = ArtifactPlan(decisions=[]).model_dump()
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, plan)], model_name='demo-summarizer'
        )
    text = text_of(messages)
    tools = {name: len(re.findall(rf'\b{name}\b', text)) for name in (*TOOLS, 'read_artifact')}
    orders = sorted(set(re.findall(r'ORD-\d{6}', text)))
    tickets = sorted(set(re.findall(r'T-\d{4}', text)))
    tasks = [t for t in TASKS if t[:40] in text]
    summary = '\n'.join(
        [
            '## Goal',
            *(f'- {t}' for t in tasks[:3] or ['(the user task, see the first message)']),
            '## Progress',
            *(f'- {name}: called about {n} times' for name, n in tools.items() if n),
            '## Key facts',
            f'- orders seen: {len(orders)} ({", ".join(orders[:6])}{", ..." if len(orders) > 6 else ""})',
            f'- tickets seen: {", ".join(tickets[:6]) or "none"}',
            f'- error lines in logs: {text.count("ERROR")}; timeouts: {text.count("timeout")}',
            f'- refunds mentioned: {text.count("refund")}',
            '## Open items',
            '- continue from the most recent messages below',
        ]
    )
    return ModelResponse(parts=[TextPart(summary)], model_name='demo-summarizer')
