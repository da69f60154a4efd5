"""Measures one package in its own venv and writes JSON: token accuracy, overflows, overhead.

Run by `benchmarks/run_peers.py`:
`python benchmarks/peers/measure.py --package KEY --data DIR --out FILE [--quick] [--sections ...]`.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import RequestUsage, UsageLimits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import Call, Summarizer, instrument, summarizer_coverage
from _strict import Encoder, StrictProvider, count_history
from adapters import ADAPTERS, Adapter

SYSTEM_PROMPT = (
    'You are a careful research assistant. Use the tools to gather facts, cite what you used, '
    'and keep answers short.'
)
TOOL_NAMES = ('read_page', 'read_source', 'call_api', 'query_table', 'search_zh', 'lookup')
NO_LIMITS = UsageLimits(request_limit=None)


def load(messages_json: Any) -> list[ModelMessage]:
    return list(ModelMessagesTypeAdapter.validate_json(json.dumps(messages_json)))


def strip_usage(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [
        dataclasses.replace(m, usage=RequestUsage()) if isinstance(m, ModelResponse) else m for m in messages
    ]


# ---- accuracy ------------------------------------------------------------------------------------


def accuracy(adapter: Adapter, data: dict[str, Any], quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, samples in data.items():
        rows = []
        for sample in samples[:: 4 if quick else 1]:
            messages = load(sample['messages'])
            true = sample['true_tokens']
            anchored = adapter.estimate(messages)
            plain = adapter.estimate(strip_usage(messages))
            rows.append(
                {
                    'true': true,
                    'anchored_err': 100 * (anchored - true) / true,
                    'plain_err': 100 * (plain - true) / true,
                }
            )
        out[kind] = rows
    return out


# ---- instrumentation -----------------------------------------------------------------------------


def make_tools(contents: Callable[[int], Any]) -> list[Tool[Any]]:
    def factory(name: str) -> Tool[Any]:
        def fetch(item: int, query: str = '') -> Any:
            return contents(item)

        return Tool(fetch, name=name, description=f'{name}: returns item number `item` of its source.')

    return [factory(name) for name in TOOL_NAMES]


@dataclasses.dataclass
class Setup:
    provider: StrictProvider
    summarizer: Summarizer
    calls: list[Call]
    agent: Agent[None, str]


def build(
    adapter: Adapter,
    encode: Encoder,
    respond: Any,
    window: int,
    max_tokens: int,
    target: int,
    contents: Any,
    keep_io: bool = False,
) -> Setup:
    provider = StrictProvider(respond, window, encode=encode)
    summarizer = Summarizer()
    calls: list[Call] = []
    caps = adapter.capabilities(
        window=window, max_tokens=max_tokens, target_tokens=target, summarizer=summarizer.model()
    )
    caps = [instrument(c, calls, summarizer, keep_io=keep_io) for c in caps]
    agent: Agent[None, str] = Agent(
        provider.model(), system_prompt=SYSTEM_PROMPT, tools=make_tools(contents), capabilities=caps
    )
    return Setup(provider, summarizer, calls, agent)


def outcome(setup: Setup, error: str | None, encode: Encoder) -> dict[str, Any]:
    reqs = setup.provider.requests
    times = [c.seconds * 1000 for c in setup.calls]
    compactions = [c for c in setup.calls if c.compacted]
    inputs = setup.summarizer.input_tokens(encode)
    events = [
        summarizer_coverage(c, setup.summarizer, encode) for c in compactions if c.history_in is not None
    ]
    seen = [e['evicted_seen_pct'] for e in events if e['evicted_seen_pct'] is not None]
    return {
        'requests': len(reqs),
        'overflows': setup.provider.overflows,
        'peak_tokens': max((r.input_tokens for r in reqs), default=0),
        'pairing_errors': sum(1 for r in reqs if r.pairing_error),
        'first_pairing_error': next((r.pairing_error for r in reqs if r.pairing_error), None),
        'summarizer_calls': setup.summarizer.calls,
        'summarizer_max_input': max(inputs, default=0),
        'summarizer_total_input': sum(inputs),
        'compaction_events': len(compactions),
        'max_calls_per_event': max((c.summarizer_calls for c in compactions), default=0),
        'events': events,
        'evicted_tokens': sum(e['evicted_tokens'] for e in events),
        'evicted_seen_pct_median': statistics.median(seen) if seen else None,
        'evicted_seen_pct_min': min(seen, default=None),
        'first_ms': times[0] if times else None,
        'processor_ms_total': sum(times),
        'processor_ms_median': statistics.median(times) if times else None,
        'processor_ms_max': max(times, default=None),
        'error': error,
    }


# ---- overflow scenarios --------------------------------------------------------------------------


async def tool_loop(
    adapter: Adapter, encode: Encoder, items: list[dict[str, Any]], window: int, n_requests: int
) -> dict[str, Any]:
    step = 0

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal step
        k = step
        step += 1
        if k >= n_requests - 1:
            return ModelResponse(
                parts=[TextPart('Summary of all sources, with citations: done.')], model_name='gpt-4o'
            )
        item = items[k % len(items)]
        call = ToolCallPart(item['tool'], {'item': k, 'query': f'step {k}'}, tool_call_id=f'call_{k:04d}')
        return ModelResponse(parts=[TextPart(f'Reading source {k} next.'), call], model_name='gpt-4o')

    max_tokens = int(window * 0.8)
    setup = build(
        adapter,
        encode,
        respond,
        window,
        max_tokens,
        max_tokens // 3,
        lambda i: items[i % len(items)]['content'],
        keep_io=True,
    )
    error = None
    try:
        await setup.agent.run(
            'Collect the facts from every source and write a short, cited summary.', usage_limits=NO_LIMITS
        )
    except Exception as exc:
        error = f'{type(exc).__name__}: {exc}'[:300]
    return {'setup': adapter.setup, **outcome(setup, error, encode)}


async def reload_pattern(
    adapter: Adapter, encode: Encoder, items: list[dict[str, Any]], window: int, turns: int, store: str
) -> dict[str, Any]:
    """Each turn: a question, two tool rounds, an answer; the app stores new_messages() or all_messages()."""
    actions: list[int | None] = []
    for t in range(turns):
        actions += [2 * t, 2 * t + 1, None]
    pointer = 0

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal pointer
        action = actions[min(pointer, len(actions) - 1)]
        pointer += 1
        if action is None:
            return ModelResponse(
                parts=[TextPart(f'Answer {pointer}: the sources agree; details are cited above.')],
                model_name='gpt-4o',
            )
        item = items[action % len(items)]
        call = ToolCallPart(item['tool'], {'item': action}, tool_call_id=f'call_{action:04d}')
        return ModelResponse(parts=[call], model_name='gpt-4o')

    max_tokens = int(window * 0.8)
    setup = build(
        adapter,
        encode,
        respond,
        window,
        max_tokens,
        max_tokens // 3,
        lambda i: items[i % len(items)]['content'],
        keep_io=True,
    )
    stored: list[ModelMessage] = []
    error = None
    try:
        for t in range(turns):
            pointer = 3 * t
            result = await setup.agent.run(
                f'Question {t}: what do the next two sources say?',
                message_history=stored or None,
                usage_limits=NO_LIMITS,
            )
            stored = stored + result.new_messages() if store == 'new' else result.all_messages()
    except Exception as exc:
        error = f'{type(exc).__name__}: {exc}'[:300]
    return {'setup': adapter.setup, 'stored_messages': len(stored), **outcome(setup, error, encode)}


# ---- overhead ------------------------------------------------------------------------------------


async def idle(adapter: Adapter, encode: Encoder, history: list[ModelMessage], steps: int) -> dict[str, Any]:
    """A large history with nothing to do: `steps` tiny tool rounds, the processor timed on each."""
    step = 0

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal step
        step += 1
        if step > steps:
            return ModelResponse(parts=[TextPart('That is all.')], model_name='gpt-4o')
        return ModelResponse(
            parts=[ToolCallPart('lookup', {'item': step}, tool_call_id=f'idle_{step}')], model_name='gpt-4o'
        )

    setup = build(adapter, encode, respond, 200_000, 180_000, 60_000, lambda i: f'ok {i}')
    await setup.agent.run(
        'One more question about the sources.', message_history=history, usage_limits=NO_LIMITS
    )
    times = [c.seconds * 1000 for c in setup.calls]
    warm = times[1:]
    return {
        'messages': len(history),
        'cold_ms': times[0],
        'idle_ms_median': statistics.median(warm),
        'idle_ms_p90': sorted(warm)[int(0.9 * (len(warm) - 1))],
        'compactions': sum(c.compacted for c in setup.calls),
        'overflows': setup.provider.overflows,
    }


async def compaction(
    adapter: Adapter, encode: Encoder, prefix: list[ModelMessage], push: Any, reps: int
) -> dict[str, Any]:
    """Compaction, counts memoized: an idle request over `prefix`, then a tool output crosses the trigger."""
    prompt = ModelRequest(parts=[UserPromptPart('Fetch the full API page now.')])
    call = ModelResponse(
        parts=[ToolCallPart('call_api', {'item': 1}, tool_call_id='push')], model_name='gpt-4o'
    )
    returned = ModelRequest(parts=[ToolReturnPart('call_api', push, tool_call_id='push')])
    before = adapter.estimate([*prefix, prompt])
    after = adapter.estimate([*prefix, prompt, call, returned])
    max_tokens = (before + after) // 2  # each package triggers on its own estimate, between the two requests
    runs: list[dict[str, Any]] = []
    for rep in range(reps + 1):
        trace = rep == reps  # the last repetition runs under tracemalloc, for peak memory only
        step = 0

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            nonlocal step
            step += 1
            if step == 1:
                return ModelResponse(
                    parts=[ToolCallPart('call_api', {'item': 1}, tool_call_id='push')], model_name='gpt-4o'
                )
            return ModelResponse(parts=[TextPart('Done.')], model_name='gpt-4o')

        setup = build(adapter, encode, respond, 200_000, max_tokens, max_tokens // 3, lambda i: push)
        if trace:
            tracemalloc.start()
        try:
            await setup.agent.run(
                'Fetch the full API page now.', message_history=prefix, usage_limits=NO_LIMITS
            )
        finally:
            if trace:
                tracemalloc.stop()
        event = next((c for c in setup.calls if c.compacted), None)
        runs.append(
            {
                'traced': trace,
                'event_ms': event.seconds * 1000 if event else None,
                'event_peak_bytes': event.peak_bytes if event else None,
                'summarizer_calls': event.summarizer_calls if event else 0,
                'messages': (event.messages_in, event.messages_out) if event else None,
                'first_ms': setup.calls[0].seconds * 1000,
                'tokens_sent_after': setup.provider.requests[-1].input_tokens,
                'events': sum(c.compacted for c in setup.calls),
            }
        )
    timed = [r['event_ms'] for r in runs if not r['traced'] and r['event_ms'] is not None]
    return {
        'max_tokens': max_tokens,
        'history_tokens': (before, after),
        'event_ms_median': statistics.median(timed) if timed else None,
        'peak_mib': (runs[-1]['event_peak_bytes'] or 0) / 2**20,
        'summarizer_calls_per_event': [r['summarizer_calls'] for r in runs],
        'events_per_run': [r['events'] for r in runs],
        'runs': runs,
    }


def _prefix_under(messages: list[ModelMessage], encode: Encoder, tokens: int) -> list[ModelMessage]:
    """The longest prefix under `tokens` ending at a tool return, closed by a short answer."""
    end = len(messages)
    while end > 1 and (
        count_history(messages[:end], encode) > tokens or not isinstance(messages[end - 1], ModelRequest)
    ):
        end -= 1
    return [*messages[:end], ModelResponse(parts=[TextPart('Noted.')], model_name='gpt-4o')]


# ---- main ----------------------------------------------------------------------------------------


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--package', required=True, choices=sorted(ADAPTERS))
    parser.add_argument('--data', type=Path, required=True)
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--sections', default='accuracy,overflow,overhead')
    args = parser.parse_args()
    adapter = ADAPTERS[args.package]()
    sections = set(args.sections.split(','))
    encode = Encoder()
    result: dict[str, Any] = {
        'package': adapter.key,
        'label': adapter.label,
        'version': adapter.version(),
        'estimator': adapter.estimator,
        'python': platform.python_version(),
    }
    started = time.perf_counter()
    if 'accuracy' in sections:
        result['accuracy'] = accuracy(
            adapter, json.loads((args.data / 'accuracy.json').read_text()), args.quick
        )
    if 'overflow' in sections:
        scenarios = json.loads((args.data / 'scenarios.json').read_text())
        combos = (
            [(16_000, 50), (32_000, 120)]
            if args.quick
            else [(16_000, 50), (16_000, 120), (32_000, 50), (32_000, 120)]
        )
        result['tool_loop'] = {
            f'{w // 1000}K/{n}': await tool_loop(adapter, encode, scenarios['tool_loop'][str(w)], w, n)
            for w, n in combos
        }
        turns = 20 if args.quick else 40
        result['reload'] = {
            store: await reload_pattern(adapter, encode, scenarios['reload']['32000'], 32_000, turns, store)
            for store in ('new', 'all')
        }
        result['reload_turns'] = turns
    if 'overhead' in sections:
        data = json.loads((args.data / 'overhead.json').read_text())
        histories = {name: load(data[name]['messages']) for name in ('synthetic', 'real_joined')}
        result['idle'] = {
            name: {
                **await idle(adapter, encode, history, 10 if args.quick else 30),
                'tokens': data[name]['true_tokens'],
            }
            for name, history in histories.items()
        }
        prefix = _prefix_under(histories['synthetic'], encode, 100_000)
        result['compaction'] = await compaction(adapter, encode, prefix, data['push'], 2 if args.quick else 5)
        result['compaction']['prefix'] = (len(prefix), count_history(prefix, encode))
    result['seconds'] = time.perf_counter() - started
    args.out.write_text(json.dumps(result, indent=1, default=str))


if __name__ == '__main__':
    try:
        asyncio.run(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
