"""pydantic-ai 2.x (and late 1.x): the processor is a capability, `Agent(capabilities=[processor])`.

The capability runs the processor before every model request and adds the `read_artifact` tool. The
generic `pydantic_ai.capabilities.ProcessHistory(processor)` works too, without the read-back tool.
pydantic-ai 1.0 has no capabilities: there the example says so and exits 0 (see v1_history_processors.py).

Run: python examples/v2_capabilities.py
"""

from __future__ import annotations

from importlib.metadata import version

from _local import local_agent_model, local_summarizer, real_model_name, records, tool_loop
from pydantic_ai import Agent

from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor

PYDANTIC_AI = version('pydantic-ai-slim')


def main() -> None:
    try:
        from pydantic_ai.capabilities import ProcessHistory  # noqa: F401
    except ImportError:
        print(
            f'pydantic-ai {PYDANTIC_AI} has no capabilities; use `Agent(history_processors=[processor])`: '
            'see examples/v1_history_processors.py.'
        )
        return
    name = real_model_name()
    model = name or local_agent_model(tool_loop('lookup_customers', lambda i: {'page': i}, rounds=6), 16_000)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000, max_tokens=6_000, target_tokens=2_000),
        summarizer=SummarizerSettings(model=name or local_summarizer()),
    )
    agent = Agent(model, capabilities=[processor])

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
    main()
