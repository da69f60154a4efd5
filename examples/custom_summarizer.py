"""A custom summarizer: a separate (usually cheaper) model, with your own instructions.

`SummarizerSettings(model=...)` takes a model name or any pydantic-ai `Model`; here a local `FunctionModel`
that writes a ticket-style summary (or `EXAMPLE_SUMMARIZER`, default `openai:gpt-4o-mini`, when
`OPENAI_API_KEY` is set). `SummarizerSettings(instructions=...)` replaces the default section list and rules.

Run: python examples/custom_summarizer.py
"""

from __future__ import annotations

import os
import re

from _local import local_agent_model, real_model_name, records, tool_loop, wire
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import (
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    SummarizerSettings,
    create_history_processor,
)

INSTRUCTIONS = (
    'Summarize the support session as a ticket: a one-line title, then "Customer facts", "Actions taken" and '
    '"Still open" as bullet lists. Keep ids and amounts exactly.'
)

calls: list[int] = []


def ticket_summarizer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Writes the summary the instructions ask for, from the transcript it is given."""
    calls.append(len(messages))
    prompt = '\n'.join(str(getattr(p, 'content', '')) for m in messages for p in m.parts)
    prompt += '\n'.join(str(getattr(m, 'instructions', None) or '') for m in messages)
    customers = sorted(set(re.findall(r'C\d{4}', prompt)))
    overdue = prompt.count('overdue')
    followed = (
        'ticket' in (getattr(info, 'instructions', None) or prompt).lower()
    )  # 1.0: no instructions field
    return ModelResponse(
        parts=[
            TextPart(
                f'Title: overdue-balance review ({len(customers)} customers)\n'
                f'Customer facts:\n- {overdue} overdue records; customers {", ".join(customers[:5])}...\n'
                f'Actions taken:\n- listed customer pages\nStill open:\n- contact overdue customers\n'
                f'(format: {"ticket" if followed else "default"})'
            )
        ]
    )


def main() -> None:
    name = real_model_name()
    summarizer = os.environ.get('EXAMPLE_SUMMARIZER', 'openai:gpt-4o-mini') if name else None
    model = name or local_agent_model(tool_loop('lookup_customers', lambda i: {'page': i}, rounds=8), 16_000)
    summaries: list[CompactionResult] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000, max_tokens=6_000, target_tokens=2_000),
        summarizer=SummarizerSettings(
            model=summarizer or FunctionModel(ticket_summarizer, model_name='ticket-summarizer'),
            instructions=INSTRUCTIONS,
        ),
        # Every event is summarized here, to show the summarizer at work; by default, an event whose stubbed
        # history already fits the target calls no summarizer at all.
        compaction=CompactionSettings(stub_tool_results=False, on_compaction=summaries.append),
    )
    agent = Agent(model, **wire(processor))

    @agent.tool_plain
    def lookup_customers(page: int) -> str:
        """One page of customer records."""
        return records(page, 25)

    agent.run_sync('Review the overdue balances, page by page.')
    for result in summaries:
        print(f'compaction ({result.method}), {result.tokens_before:,} -> {result.tokens_after:,} tokens:')
        print(result.summary)
    print(f'summarizer calls: {processor.stats().overall.summarizer_calls}')


if __name__ == '__main__':
    main()
