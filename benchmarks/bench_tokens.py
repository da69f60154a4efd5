"""Token counting speed on a ~130K-token, 300-message history built from the real conversations.

Reports: raw tiktoken `encode_ordinary` over the same part texts (the floor), a cold `TokenCounter` count
(fresh counter, nothing memoized), the ratio (target <= 1.2), a re-count after appending one message
(target < 1 ms median) and a count of the same history reloaded from JSON (text memo only).

Run: `TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache python benchmarks/bench_tokens.py`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import tiktoken
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

from pydantic_ai_history.messages._nesting import json_text
from pydantic_ai_history.tokens import TokenCounter

CONVERSATIONS = Path(__file__).resolve().parents[2] / 'shared/fixtures/conversations'


def build_history(target_messages: int = 300) -> list[ModelMessage]:
    """The real SWE-Gym (OpenHands, gpt-4o) runs joined and repeated.

    Every repeated copy gets a distinct suffix on each text so nothing is counted twice by accident: the
    comparison with raw tiktoken is on the same, all-distinct texts.
    """
    files = sorted(CONVERSATIONS.glob('swe_gym_*.json'))
    history: list[ModelMessage] = []
    copy = 0
    while len(history) < target_messages:
        messages = ModelMessagesTypeAdapter.validate_json(files[copy % len(files)].read_bytes())
        if history:  # one system prompt at the head
            messages = messages[1:]
        if copy >= len(files):
            messages = [_mark(m, copy) for m in messages]
        history.extend(messages[: target_messages - len(history)])
        copy += 1
    return history


def _mark(message: ModelMessage, copy: int) -> ModelMessage:
    parts = [
        dataclasses.replace(p, content=f'{p.content} (copy {copy})')
        if isinstance(getattr(p, 'content', None), str)
        else p
        for p in message.parts
    ]
    return dataclasses.replace(message, parts=parts)  # type: ignore[arg-type]


def part_texts(history: list[ModelMessage]) -> list[str]:
    texts: list[str] = []
    for message in history:
        for part in message.parts:
            for attr in ('content', 'tool_name'):
                value = getattr(part, attr, None)
                if isinstance(value, str):
                    texts.append(value)
            args = getattr(part, 'args', None)
            if args is not None:
                texts.append(args if isinstance(args, str) else json_text(args))
    return texts


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    history = build_history()
    texts = part_texts(history)
    encoding = tiktoken.get_encoding('o200k_base')
    raw_tokens = sum(len(encoding.encode_ordinary(t)) for t in texts)

    raw = best_of(lambda: [encoding.encode_ordinary(t) for t in texts], 7)
    cold = best_of(lambda: TokenCounter('openai:gpt-4o').count_messages(history), 7)
    counter = TokenCounter('openai:gpt-4o')
    counted = counter.estimate(history).tokenizer

    recounts = []
    for i in range(200):
        grown = [*history, ModelRequest(parts=[UserPromptPart(content=f'next question number {i}, please')])]
        start = time.perf_counter()
        counter.estimate(grown)
        recounts.append(time.perf_counter() - start)
    reloaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(history))
    reload = best_of(lambda: counter.count_messages(reloaded), 1)

    rows = [
        ('messages', f'{len(history)}'),
        ('characters', f'{sum(map(len, texts)):,}'),
        ('o200k tokens (raw part texts)', f'{raw_tokens:,}'),
        ('TokenCounter tokens (with overheads)', f'{counted:,}'),
        ('raw tiktoken encode_ordinary', f'{raw * 1000:.1f} ms'),
        ('TokenCounter cold count', f'{cold * 1000:.1f} ms'),
        ('cold / raw (target <= 1.2)', f'{cold / raw:.2f}x'),
        ('re-count after +1 message, median', f'{statistics.median(recounts) * 1000:.3f} ms'),
        ('re-count after +1 message, p90', f'{sorted(recounts)[int(0.9 * len(recounts))] * 1000:.3f} ms'),
        ('count of the history reloaded from JSON', f'{reload * 1000:.2f} ms'),
    ]
    width = max(len(k) for k, _ in rows)
    print(f'| {"measure":{width}} | value |')
    print(f'|{"-" * (width + 2)}|-------|')
    for key, value in rows:
        print(f'| {key:{width}} | {value} |')


if __name__ == '__main__':
    main()
