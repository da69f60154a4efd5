"""One Redis cache shared by several workers: a history compacted by one is not summarized again by the next.

Apps often save a conversation and reload it on whichever worker takes the next turn. Each worker has its
own processor, but with `redis_cache(url)` they share summaries: the first worker pays for the summary,
the others find it. When Redis cannot be reached, `redis_cache` degrades to an in-memory cache (per
worker, so no sharing) and logs a warning instead of failing; this example says which happened.

Run: REDIS_URL=redis://localhost:6379/0 python examples/redis_shared_cache.py
"""

from __future__ import annotations

import asyncio
import os
import uuid

from _local import local_summarizer, real_model_name, records
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel

from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor
from pydantic_ai_history.cache import redis_cache

URL = os.environ.get('REDIS_URL', 'redis://localhost:6379/0')


def saved_conversation() -> list[ModelMessage]:
    """A long conversation as an app would have stored it: 30 tool rounds, then a new question."""
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit every customer page.')])]
    for page in range(30):
        call = ToolCallPart('lookup_customers', {'page': page}, tool_call_id=f'call_{page}')
        messages.append(ModelResponse(parts=[call], model_name='gpt-4o'))
        messages.append(
            ModelRequest(
                parts=[ToolReturnPart('lookup_customers', records(page, 12), tool_call_id=f'call_{page}')]
            )
        )
    messages.append(ModelResponse(parts=[TextPart('All pages checked.')], model_name='gpt-4o'))
    messages.append(ModelRequest(parts=[UserPromptPart('Which customers are overdue?')]))
    return messages


async def worker(number: int, history: list[ModelMessage], prefix: str) -> tuple[str, int, bool]:
    cache = redis_cache(URL, prefix=prefix, socket_timeout=0.5)
    name = real_model_name()
    methods: list[str] = []
    processor = create_history_processor(
        model=FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('unused')]), model_name='gpt-4o'),
        policy=ContextPolicy(context_window=16_000, max_tokens=6_000, target_tokens=2_000),
        summarizer=SummarizerSettings(model=name or local_summarizer()),
        cache=cache,
        on_history_event=lambda e: (
            methods.append(getattr(e, 'method', '')) if e.kind == 'CompactionResult' else None
        ),
    )
    await processor.process(history)
    stats = processor.stats().overall
    await cache.aclose()
    return ','.join(methods) or 'none', stats.summarizer_calls, cache.degraded


async def main() -> None:
    history = saved_conversation()
    prefix = f'pydantic-ai-history-example-{uuid.uuid4().hex[:8]}:'  # a fresh namespace per run
    results = [await worker(n, history, prefix) for n in (1, 2, 3)]
    degraded = any(d for _, _, d in results)
    if degraded:
        print(
            f'Redis at {URL} is not reachable: each worker fell back to its own in-memory cache (no sharing).'
        )
    else:
        print(f'Summaries shared through Redis at {URL}.')
    for number, (methods, calls, _) in enumerate(results, start=1):
        print(f'worker {number}: compaction method {methods}, {calls} summarizer call(s)')


if __name__ == '__main__':
    asyncio.run(main())
