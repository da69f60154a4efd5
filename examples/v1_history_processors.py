"""Early pydantic-ai 1.x: the processor goes in `Agent(history_processors=[processor])`.

On 2.x `history_processors=` no longer exists (it raises TypeError), so this example prints where to look
instead and exits 0: see `v2_capabilities.py`. On late 1.x (1.7x+) capabilities exist too: there
`Agent(capabilities=[processor])` is the better form, and `history_processors=` still works with a
deprecation warning.

Run: python examples/v1_history_processors.py
"""

from __future__ import annotations

import sys
import warnings
from importlib.metadata import version

from _local import local_agent_model, local_summarizer, real_model_name, records, tool_loop
from pydantic_ai import Agent

from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor

PYDANTIC_AI = version('pydantic-ai-slim')


def main() -> None:
    if int(PYDANTIC_AI.split('.')[0]) >= 2:
        print(
            f'pydantic-ai {PYDANTIC_AI} has no `history_processors=` (removed in 2.0); '
            'this example is for 1.x. '
            'On 2.x use `Agent(capabilities=[processor])`: see examples/v2_capabilities.py.'
        )
        return
    name = real_model_name()
    model = name or local_agent_model(tool_loop('lookup_customers', lambda i: {'page': i}, rounds=6), 16_000)
    processor = create_history_processor(
        # a small window, so the example compacts
        policy=ContextPolicy(context_window=16_000, max_tokens=6_000, target_tokens=2_000),
        summarizer=SummarizerSettings(model=name or local_summarizer()),
    )
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)  # late 1.x prefers capabilities
        agent = Agent(
            model,
            history_processors=[processor],
            toolsets=[processor.readback_toolset()],  # `read_artifact` for anything the processor shrank
        )

    @agent.tool_plain
    def lookup_customers(page: int) -> str:
        """One page of customer records."""
        return records(page, 25)

    history = []
    for question in ('Which customers are overdue?', 'And which of them are in Osaka?'):
        result = agent.run_sync(question, message_history=history)
        history = result.all_messages()
        print(f'> {question}\n{result.output}')
    stats = processor.stats().overall
    print(
        f'pydantic-ai {PYDANTIC_AI}: {stats.requests} requests, {stats.compactions} compaction(s), '
        f'peak {stats.peak_tokens_out:,} tokens after processing'
    )


if __name__ == '__main__':
    sys.exit(main())
