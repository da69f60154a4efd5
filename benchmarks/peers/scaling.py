"""The scaling run, venv side: histories of 100 to 20,000 real messages, one package variant per process.

Two commands (run by `benchmarks/bench_scaling.py`, which documents the method):

- `python scaling.py build OUT_DIR --sizes 100,1000` (any venv): builds each history from the real
  conversations in ../shared/fixtures/conversations and dumps `scaling_<n>.json`;
- `python scaling.py measure --variant KEY --data DIR --sizes ... --reps N --idle-steps K --out FILE`:
  measures one variant (see `adapters.ADAPTERS`) as a real Agent capability and writes JSON.

Depends on pydantic-ai, tiktoken and the package under test only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import platform
import statistics
import sys
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import RequestUsage, UsageLimits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import Call, Summarizer, instrument, summarizer_coverage
from _strict import REPLY_PRIMING, Encoder, StrictProvider, count_history, part_text
from adapters import ADAPTERS, Adapter

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / 'shared' / 'fixtures'
SYSTEM_PROMPT = 'You are a careful assistant. Use the tools when they help and keep answers short.'
NO_LIMITS = UsageLimits(request_limit=None)
PUSH_MAX_TOKENS = 15_000
PAGE_CHARS = 7_500

# ---- inputs ------------------------------------------------------------------------------------------------


def _conversations() -> list[tuple[str, list[ModelMessage]]]:
    """The fixture conversations, each ending at a request (a final tool call without its return dropped)."""
    out = []
    for path in sorted((FIXTURES / 'conversations').glob('*.json')):
        messages = list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
        while messages and isinstance(messages[-1], ModelResponse):
            messages.pop()
        if len(messages) >= 3:
            out.append((path.stem, messages))
    return out


def _marked(part: Any, copy: int) -> Any:
    """The part of the `copy`-th repetition: its text marked, its call id made unique.

    Without the mark every repetition would be byte-identical, and a counter memoized by content would
    count the 20,000-message history as if it were the 900 messages it repeats.
    """
    if copy == 0:
        return part
    changes: dict[str, Any] = {}
    if isinstance(part, (TextPart, SystemPromptPart, UserPromptPart, ToolReturnPart)) and isinstance(
        part.content, str
    ):
        changes['content'] = f'[{copy}] {part.content}'
    if isinstance(part, (ToolCallPart, ToolReturnPart)):
        changes['tool_call_id'] = f'{part.tool_call_id}-{copy}'
    return dataclasses.replace(part, **changes)


def scaled_history(conversations: list[tuple[str, list[ModelMessage]]], size: int) -> list[ModelMessage]:
    """The real conversations back to back (repeated, marked) to `size` messages, ending with an answer."""
    joined: list[ModelMessage] = []
    copy = 0
    while len(joined) < size:
        for name, messages in conversations:
            for index, message in enumerate(messages):
                parts = [_marked(p, copy) for p in message.parts]
                if isinstance(message, ModelRequest):
                    if joined and index == 0:  # one system prompt, at the start
                        parts = [p for p in parts if not isinstance(p, SystemPromptPart)]
                    joined.append(ModelRequest(parts=parts))
                else:
                    joined.append(
                        ModelResponse(parts=parts, model_name='gpt-4o', timestamp=message.timestamp)
                    )
            joined.append(ModelResponse(parts=[TextPart(f'Done with {name} ({copy}).')], model_name='gpt-4o'))
            if len(joined) >= size:
                break
        copy += 1
    end = size - 1
    while end > 1 and not isinstance(joined[end - 1], ModelRequest):
        end -= 1
    return [*joined[:end], ModelResponse(parts=[TextPart('Done with that task.')], model_name='gpt-4o')]


def anchored(messages: list[ModelMessage], encode: Encoder) -> list[ModelMessage]:
    """Each response carries the usage the strict provider would have reported (one pass, running total)."""
    out: list[ModelMessage] = []
    prefix = REPLY_PRIMING
    for message in messages:
        own = count_history([message], encode) - REPLY_PRIMING
        if isinstance(message, ModelResponse):
            output = sum(encode(part_text(p)) for p in message.parts)
            message = dataclasses.replace(
                message, usage=RequestUsage(input_tokens=prefix, output_tokens=output)
            )
        out.append(message)
        prefix += own
    return out


def push_content(encode: Encoder, tokens: int) -> list[str]:
    """Pages of a JSON API response (tau-bench retail products, real data) totalling about `tokens` o200k
    tokens, each under 8,000 characters: the history grows by several ordinary tool outputs, none large
    enough for an artifact stage to reduce on its own, so what follows is a compaction in every package.
    """
    text = (FIXTURES / 'tool_outputs' / 'tau-bench_retail_products.json').read_text()
    pages: list[str] = []
    size = 0
    while size < tokens:
        for start in range(0, len(text), PAGE_CHARS):
            pages.append(text[start : start + PAGE_CHARS])
            size += encode(pages[-1])
            if size >= tokens:
                break
    return pages


def build(out_dir: Path, sizes: list[int]) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    encode = Encoder()
    conversations = _conversations()
    manifest: dict[str, Any] = {}
    for size in sizes:
        history = anchored(scaled_history(conversations, size), encode)
        tokens = count_history(history, encode)
        push = push_content(encode, min(PUSH_MAX_TOKENS, max(tokens // 10, 1_000)))
        text = '\n'.join(part_text(p) for m in history for p in m.parts)
        (out_dir / f'scaling_{size}.json').write_bytes(
            b'{"push": '
            + json.dumps(push).encode()
            + b', "messages": '
            + ModelMessagesTypeAdapter.dump_json(history)
            + b'}'
        )
        manifest[str(size)] = {
            'messages': len(history),
            'tokens': tokens,
            'chars': len(text),
            'push_tokens': sum(encode(p) for p in push),
            'push_pages': len(push),
        }
        print(f'[scaling] built {size}: {manifest[str(size)]}', flush=True)
    (out_dir / 'scaling_manifest.json').write_text(json.dumps(manifest))
    return manifest


def load(path: Path) -> tuple[list[ModelMessage], list[str]]:
    raw = json.loads(path.read_bytes())
    return list(ModelMessagesTypeAdapter.validate_python(raw['messages'])), raw['push']


# ---- one Agent run per measurement ------------------------------------------------------------------------


@dataclasses.dataclass
class Setup:
    provider: StrictProvider
    summarizer: Summarizer
    calls: list[Call]
    agent: Agent[None, str]


def _lookup(item: int) -> str:
    return f'ok {item}'


def _setup(
    adapter: Adapter,
    encode: Encoder,
    respond: Any,
    *,
    window: int,
    trigger: int,
    push: list[str] | None = None,
    skip_first: int = 0,
    keep_io: bool = False,
) -> Setup:
    provider = StrictProvider(respond, window, encode=encode)
    summarizer = Summarizer()
    calls: list[Call] = []
    caps = adapter.capabilities(
        window=window, max_tokens=trigger, target_tokens=trigger // 3, summarizer=summarizer.model()
    )
    caps = [instrument(c, calls, summarizer, skip_first=skip_first, keep_io=keep_io) for c in caps]

    def fetch(item: int) -> str:
        return (push or [''])[item]

    tools = [
        Tool(_lookup, name='lookup', description='Looks an item up.'),
        Tool(fetch, name='call_api', description='Returns API page `item`.'),
    ]
    agent: Agent[None, str] = Agent(
        provider.model(), system_prompt=SYSTEM_PROMPT, tools=tools, capabilities=caps
    )
    return Setup(provider, summarizer, calls, agent)


async def idle_run(
    adapter: Adapter, encode: Encoder, history: list[ModelMessage], tokens: int, steps: int
) -> Any:
    """The loaded history with nothing to do: a first (cold) request, then `steps` tiny tool rounds."""
    step = 0

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal step
        step += 1
        if step > steps:
            return ModelResponse(parts=[TextPart('That is all.')], model_name='gpt-4o')
        call = ToolCallPart('lookup', {'item': step}, tool_call_id=f'idle_{step}')
        return ModelResponse(parts=[call], model_name='gpt-4o')

    window = 4 * tokens + 200_000
    setup = _setup(adapter, encode, respond, window=window, trigger=2 * tokens + 100_000)
    await setup.agent.run('One more question.', message_history=history, usage_limits=NO_LIMITS)
    times = [c.seconds * 1000 for c in setup.calls]
    return {
        'first_ms': times[0],
        'idle_ms': statistics.median(times[1:]),
        'idle_p90_ms': sorted(times[1:])[int(0.9 * (len(times) - 2))],
        'compactions': sum(c.compacted for c in setup.calls),
    }


def recount(adapter: Adapter, history: list[ModelMessage]) -> float:
    """The package's own estimate of the history plus one appended message, after one of the history."""
    fresh = type(adapter)()
    extra = ModelRequest(parts=[UserPromptPart('And one more thing: which of these is the newest?')])
    fresh.estimate(history)
    longer = [*history, extra]
    started = time.perf_counter()
    fresh.estimate(longer)
    return (time.perf_counter() - started) * 1000


def _push_calls(push: list[str]) -> ModelResponse:
    calls = [ToolCallPart('call_api', {'item': i}, tool_call_id=f'push_{i}') for i in range(len(push))]
    return ModelResponse(parts=calls, model_name='gpt-4o')


def compaction_trigger(
    adapter: Adapter, history: list[ModelMessage], push: list[str]
) -> tuple[int, int, int]:
    """Halfway between the two requests of the compaction run, by the package's own estimate."""
    prompt = ModelRequest(parts=[UserPromptPart('Fetch the full API listing now.')])
    call = _push_calls(push)
    returned = ModelRequest(
        parts=[ToolReturnPart('call_api', page, tool_call_id=f'push_{i}') for i, page in enumerate(push)]
    )
    before = adapter.estimate([*history, prompt])
    after = adapter.estimate([*history, prompt, call, returned])
    return (before + after) // 2, before, after


async def compaction_run(
    adapter: Adapter,
    encode: Encoder,
    history: list[ModelMessage],
    push: list[str],
    trigger: int,
    tokens: int,
    *,
    cold: bool,
    trace: bool = False,
    keep_io: bool = False,
) -> tuple[Setup, Call | None]:
    """Request 1 sends the history (warming the package unless `cold`); its tool outputs cross the trigger."""
    step = 0

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal step
        step += 1
        if step == 1:
            return _push_calls(push)
        return ModelResponse(parts=[TextPart('Done.')], model_name='gpt-4o')

    setup = _setup(
        adapter,
        encode,
        respond,
        window=4 * tokens + 200_000,
        trigger=trigger,
        push=push,
        skip_first=1 if cold else 0,
        keep_io=keep_io,
    )
    if trace:
        tracemalloc.start()
    try:
        await setup.agent.run(
            'Fetch the full API listing now.', message_history=history, usage_limits=NO_LIMITS
        )
    finally:
        if trace:
            tracemalloc.stop()
    # The request that crosses the trigger (the second): whatever the package does there is its cost.
    return setup, setup.calls[1] if len(setup.calls) > 1 else None


async def measure_size(
    adapter: Adapter, encode: Encoder, path: Path, reps: int, steps: int, raw: bool
) -> dict[str, Any]:
    history, push = load(path)
    tokens = count_history(history, encode)
    text = '\n'.join(part_text(p) for m in history for p in m.parts)
    trigger, before, after = compaction_trigger(adapter, history, push)
    out: dict[str, Any] = {
        'messages': len(history),
        'tokens': tokens,
        'trigger': trigger,
        'estimate_before_after': [before, after],
        'first_ms': [],
        'idle_ms': [],
        'idle_p90_ms': [],
        'recount_ms': [],
        'compaction_warm_ms': [],
        'compaction_cold_ms': [],
        'raw_encode_ms': [],
        'errors': [],
    }
    for rep in range(reps):
        if raw:
            started = time.perf_counter()
            encode._enc.encode_ordinary(text)
            out['raw_encode_ms'].append((time.perf_counter() - started) * 1000)
        idle = await idle_run(adapter, encode, history, tokens, steps)
        out['first_ms'].append(idle['first_ms'])
        out['idle_ms'].append(idle['idle_ms'])
        out['idle_p90_ms'].append(idle['idle_p90_ms'])
        if idle['compactions']:
            out['errors'].append(f'idle run compacted {idle["compactions"]}x')
        out['recount_ms'].append(recount(adapter, history))
        setup, event = await compaction_run(
            adapter, encode, history, push, trigger, tokens, cold=False, keep_io=rep == 0
        )
        out['compaction_warm_ms'].append(event.seconds * 1000 if event else None)
        if rep == 0:
            if event is None:
                out['errors'].append('the warm run made fewer than two requests')
            else:
                out['event'] = {
                    'compacted': event.compacted,
                    'events_in_run': sum(c.compacted for c in setup.calls),
                    'messages_in_out': [event.messages_in, event.messages_out],
                    'tokens_sent_after': setup.provider.requests[-1].input_tokens,
                    **summarizer_coverage(event, setup.summarizer, encode),
                }
        del setup, event
        _, event = await compaction_run(adapter, encode, history, push, trigger, tokens, cold=True)
        out['compaction_cold_ms'].append(event.seconds * 1000 if event else None)
    _, event = await compaction_run(adapter, encode, history, push, trigger, tokens, cold=False, trace=True)
    out['peak_mib'] = (event.peak_bytes or 0) / 2**20 if event else None
    return out


async def measure(args: argparse.Namespace) -> None:
    adapter = ADAPTERS[args.variant]()
    encode = Encoder()
    result: dict[str, Any] = {
        'variant': adapter.key,
        'label': adapter.label,
        'version': adapter.version(),
        'estimator': adapter.estimator,
        'python': platform.python_version(),
        'sizes': {},
    }
    started = time.perf_counter()
    for size in args.sizes.split(','):
        t0 = time.perf_counter()
        result['sizes'][size] = await measure_size(
            adapter, encode, args.data / f'scaling_{size}.json', args.reps, args.idle_steps, args.raw
        )
        print(f'[scaling] {adapter.key} {size}: {time.perf_counter() - t0:.1f}s', flush=True)
    result['setup'] = adapter.setup
    result['seconds'] = time.perf_counter() - started
    args.out.write_text(json.dumps(result, indent=1, default=str))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest='command', required=True)
    b = sub.add_parser('build')
    b.add_argument('out', type=Path)
    b.add_argument('--sizes', default='100,1000,5000,20000')
    m = sub.add_parser('measure')
    m.add_argument('--variant', required=True, choices=sorted(ADAPTERS))
    m.add_argument('--data', type=Path, required=True)
    m.add_argument('--out', type=Path, required=True)
    m.add_argument('--sizes', default='100,1000,5000,20000')
    m.add_argument('--reps', type=int, default=5)
    m.add_argument('--idle-steps', type=int, default=20)
    m.add_argument('--raw', action='store_true', help='also time a raw tiktoken encode of the same text')
    args = parser.parse_args()
    if args.command == 'build':
        build(args.out, [int(s) for s in args.sizes.split(',')])
    else:
        asyncio.run(measure(args))


if __name__ == '__main__':
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
