"""Background summaries in a chat of long runs: summarizer calls per compaction (issue 37).

    python benchmarks/bench_chat_background.py                       # 5 chats of 60 turns, 20 lookups a turn
    python benchmarks/bench_chat_background.py --lookups 1,3,8 --repeat 1
    python benchmarks/bench_chat_background.py --background-start none
    python benchmarks/bench_chat_background.py --no-stubs     # the event summarizes what it adds, unstubbed
    python benchmarks/bench_chat_background.py --question-words 1000  # questions over the tail's budget

One conversation reloaded each turn (a run per user message, given the history the last run returned), on a
new processor each time (`--repeat`): the model calls a `lookup` tool `--lookups` times a run, then answers,
at once (a `FunctionModel`, its usage estimated by pydantic-ai); the summarizer sleeps `--summarizer-seconds`
before it answers, slower than the requests between a summary's start and its event. A 32K window, a 12K
trigger, a 4K target (`--max-tokens`, `--target-tokens`). Printed per chat: compactions, summarizer calls
(started, so a call cancelled on the way counts), background summaries started / used / discarded (by
reason). Offline; the counts are the result, no wall-clock figure is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import (
    BackgroundSummaryDiscarded,
    BackgroundSummaryStarted,
    BackgroundSummaryUsed,
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)


async def chat(
    turns: int,
    lookups: int,
    start: float | None,
    seconds: float,
    stubs: bool,
    question_words: int = 0,
    limits: tuple[int, int] = (12_000, 4_000),
) -> dict[str, Any]:
    calls = 0

    async def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        await asyncio.sleep(seconds)
        return ModelResponse(parts=[TextPart('## Summary\nthe chat so far: ' + 'x ' * 200)])

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = 0
        for message in reversed(messages):
            if any(isinstance(p, UserPromptPart) for p in message.parts):
                break
            done += isinstance(message, ModelResponse)
        if done >= lookups:
            return ModelResponse(parts=[TextPart('Here is what I found. ' + 'answer words ' * 120)])
        return ModelResponse(
            parts=[ToolCallPart('lookup', {'q': len(messages)}, tool_call_id=f'c{len(messages)}')]
        )

    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=32_000, max_tokens=limits[0], target_tokens=limits[1]),
        summarizer=SummarizerSettings(model=FunctionModel(summarize, model_name='gpt-4o-mini')),
        compaction=CompactionSettings(background_start=start, stub_tool_results=stubs),
        on_event=events.append,
    )
    agent = Agent(FunctionModel(respond, model_name='gpt-4o'), capabilities=[processor])

    @agent.tool_plain
    def lookup(q: int) -> str:
        """Look a record up."""
        return f'record {q}: ' + 'field value ' * 150

    history: list[ModelMessage] = []
    for turn in range(turns):
        question = f'Question {turn}: tell me about item {turn}.' + ' and its history' * (question_words // 3)
        result = await agent.run(question, message_history=history)
        history = result.all_messages()
    return {
        'lookups': lookups,
        'compactions': sum(isinstance(e, CompactionResult) for e in events),
        'summarizer_calls': calls,
        'bg_started': sum(isinstance(e, BackgroundSummaryStarted) for e in events),
        'bg_used': sum(isinstance(e, BackgroundSummaryUsed) for e in events),
        'bg_discarded': dict(Counter(e.reason for e in events if isinstance(e, BackgroundSummaryDiscarded))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('--turns', type=int, default=60)
    parser.add_argument('--lookups', default='20', help='comma-separated lookups per run')
    parser.add_argument('--repeat', type=int, default=5, help='chats per setting, a new processor each')
    parser.add_argument('--summarizer-seconds', type=float, default=0.05)
    parser.add_argument('--background-start', default='0.4', help="a fraction, or 'none'")
    parser.add_argument('--no-stubs', action='store_true', help='CompactionSettings(stub_tool_results=False)')
    parser.add_argument(
        '--question-words',
        type=int,
        default=0,
        help='about this many more words in each user question (1,000: about 1,000 tokens, twice the '
        "verbatim tail's budget)",
    )
    parser.add_argument('--max-tokens', type=int, default=12_000, help='the trigger (12,000)')
    parser.add_argument('--target-tokens', type=int, default=4_000, help='the target (4,000)')
    args = parser.parse_args(argv)
    start = None if args.background_start == 'none' else float(args.background_start)
    for lookups in (int(n) for n in args.lookups.split(',')):
        for _ in range(args.repeat):
            found = chat(
                args.turns,
                lookups,
                start,
                args.summarizer_seconds,
                not args.no_stubs,
                args.question_words,
                (args.max_tokens, args.target_tokens),
            )
            print(asyncio.run(found))
    return 0


if __name__ == '__main__':
    sys.exit(main())
