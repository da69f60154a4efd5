"""Log every compaction (`CompactionSettings(on_compaction=...)`) and every other decision (`on_event`).

`on_compaction` receives each `CompactionResult`: how many messages and tokens went in and out, how the
summary was made (`llm`, `cache`, or a deterministic fallback) and the summary itself. The package also
logs its decisions under the `pydantic_ai_history` logger; this example shows both.

Run: python examples/on_compaction_logging.py
"""

from __future__ import annotations

import logging

from _local import local_agent_model, local_summarizer, real_model_name, records, tool_loop, wire
from pydantic_ai import Agent

from pydantic_ai_history import (
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)

logger = logging.getLogger('myapp.history')


def log_compaction(result: CompactionResult) -> None:
    logger.info(
        'compacted %d -> %d messages, %d -> %d tokens via %s (%d summarizer call(s), %.0f ms)',
        result.messages_before,
        result.messages_after,
        result.tokens_before,
        result.tokens_after,
        result.method,
        result.summarizer_calls,
        result.duration_ms,
    )


def log_event(event: HistoryEvent) -> None:
    if event.kind != 'RequestProcessed':  # one line per model request would be noisy
        logger.debug('event %s', event.kind)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    name = real_model_name()
    model = name or local_agent_model(tool_loop('lookup_customers', lambda i: {'page': i}, rounds=12), 16_000)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000, max_tokens=5_000, target_tokens=1_500),
        summarizer=SummarizerSettings(model=name or local_summarizer()),
        compaction=CompactionSettings(on_compaction=log_compaction),
        on_history_event=log_event,
    )
    agent = Agent(model, **wire(processor))

    @agent.tool_plain
    def lookup_customers(page: int) -> str:
        """One page of customer records."""
        return records(page, 25)

    agent.run_sync('List every dormant customer, page by page.')
    stats = processor.stats().overall
    logger.info('run finished: %d requests, %d compaction(s)', stats.requests, stats.compactions)


if __name__ == '__main__':
    main()
