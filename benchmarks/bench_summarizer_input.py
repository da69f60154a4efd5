"""What the summarizer is sent per compaction, against what it replaces, over two compactions in a row.

A ~1,000-message history (real conversations, `_sizes.build`) is compacted; 1,200 more messages arrive and it
is compacted again. Per compaction: tokens sent to the summarizer (every call, instructions and prompt
included), tokens of the messages it replaced, the share of the replaced messages' texts that appear in what
it was sent (200-character probes: a tool result cut to the cap shows as partly unseen), and how many
message objects the first compaction rendered for the summarizer are rendered again by the second (none
should be: the previous summary stands in for them).

Run: python benchmarks/bench_summarizer_input.py
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _sizes
from bench_compaction_sizes import Summarizer, processor

from pydantic_ai_history import CompactionResult
from pydantic_ai_history.stages._transcript import content_text
from pydantic_ai_history.stages.compactor import _stage
from pydantic_ai_history.tokens import TokenCounter


def texts(message: ModelMessage) -> list[str]:
    return [content_text(getattr(p, 'content', None)) for p in message.parts if getattr(p, 'content', None)]


def prompt_text(requests: list[list[ModelMessage]]) -> str:
    return '\n'.join(t for messages in requests for m in messages for t in texts(m))


def seen(message: ModelMessage, prompt: str) -> tuple[int, int]:
    """(characters of the message's texts found in the prompt, characters in all), by 200-char probes."""
    found = total = 0
    for text in texts(message):
        for start in range(0, len(text), 200):
            probe = text[start : start + 200]
            total += len(probe)
            found += len(probe) if probe.strip() and probe in prompt else 0
    return found, total


rendered: dict[int, list[ModelMessage]] = {}


def record_renders(round_number: int) -> None:
    """Wrap the compactor's transcript rendering to keep which message objects the summarizer was shown."""
    real = getattr(_stage.render_units, '__wrapped__', _stage.render_units)

    def render_units(messages: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get('tool_result_max_tokens') is not None:  # the summarizer's (the store's is uncapped)
            rendered.setdefault(round_number, []).extend(messages)
        return real(messages, *args, **kwargs)

    render_units.__wrapped__ = real  # type: ignore[attr-defined]
    _stage.render_units = render_units


async def main() -> None:
    full = _sizes.build(2_200)
    first_end = next(i for i in range(1_000, len(full)) if isinstance(full[i - 1], ModelRequest))
    counter = TokenCounter('gpt-4o')
    tokens = counter.count_messages(full[:first_end])
    summarizer = Summarizer()
    events: list[Any] = []
    p = processor(summarizer, tokens, events)
    history = full[:first_end]
    evicted_before: list[ModelMessage] = []
    for round_number, arriving in enumerate((full[:first_end], full[first_end:]), start=1):
        history = [*history, *arriving] if round_number > 1 else history
        before = len(summarizer.requests)
        record_renders(round_number)
        out = await p.process(history)
        result = [e for e in events if isinstance(e, CompactionResult)][-1]
        head = next(i for i, (a, b) in enumerate(zip(out, history, strict=False)) if a is not b)
        replaced = history[head : head + result.evicted_messages]
        if round_number > 1:
            replaced = replaced[1:]  # the previous summary message: it is passed as the previous summary
        requests = summarizer.requests[before:]
        prompt = prompt_text(requests)
        sent = sum(counter.count_messages(r) for r in requests)
        replaced_tokens = counter.count_messages(replaced)
        found = total = 0
        for message in replaced:
            f, t = seen(message, prompt)
            found, total = found + f, total + t
        again = (
            sum(1 for m in rendered[round_number] if id(m) in {id(x) for x in rendered[1]})
            if round_number > 1
            else 0
        )
        print(
            f'compaction {round_number}: {len(requests)} call(s), sent {sent:,} tokens, '
            f'replaced {replaced_tokens:,} '
            f'tokens in {len(replaced)} messages; {100 * found / max(total, 1):.1f}% of the replaced text '
            f'seen verbatim; messages shown to the summarizer that an earlier compaction showed: {again}'
        )
        evicted_before.extend(replaced)
        history = out


if __name__ == '__main__':
    asyncio.run(main())
