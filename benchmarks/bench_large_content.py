"""Time, event-loop stalls and peak memory of one request carrying very large content, through a real `Agent`.

Run from the repo root, with `PYTHONPATH=src`: `python benchmarks/bench_large_content.py [--cases a,b]`.
Each case runs in its own fresh process: the content is built (not measured), one small run warms the process
up (pydantic-ai's price data, the tokenizer, the conversion worker), the peak resident size is reset
(`/proc/self/clear_refs`), then one agent run sends the content through the default processor and the strict
provider while a 10 ms ticker on the event loop records the longest stall. Reported: the processor's time for
the request that carried the content (its `RequestProcessed.duration_ms`), the whole run's wall time, the
longest loop stall, the peak resident size above the process before the content existed (the content itself
included) as a multiple of the content's size, what the provider received, and the events worth knowing.
Targets (issue 25): no stall over 100 ms at 20 MB; peak at most 3x the content.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = (
    'tool_return_20mb',
    'tool_return_200mb',
    'pdf_200mb',
    'xlsx_export_3m_rows',
    'user_prompt_2_3m_tokens',
)

_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import hostile_files
    from helpers import filler
    from pydantic_ai import Agent
    from pydantic_ai.messages import BinaryContent, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor
    from pydantic_ai_history.events import ContentLost, HistoryWarning, RequestProcessed, StageFailed
    from pydantic_ai_history.testing import StrictProvider
    from pydantic_ai_history.files._worker import peak_resident_bytes_of_self

    case = sys.argv[1]
    WINDOW = 128_000

    def resident():
        with open('/proc/self/statm') as f:
            return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')

    def build():
        prompt, attachment, output = 'Go.', None, None
        if case == 'tool_return_20mb':
            output = filler(20_000_000)
        elif case == 'tool_return_200mb':
            output = filler(200_000_000)
        elif case == 'pdf_200mb':
            data = b'%PDF-1.4\\n' + os.urandom(200 * 1024 * 1024 - 9)
            attachment = BinaryContent(data=data, media_type='application/pdf')
        elif case == 'xlsx_export_3m_rows':
            data = hostile_files.xlsx_export(3_000_000)
            attachment = BinaryContent(data=data, media_type=hostile_files.XLSX)
        elif case == 'user_prompt_2_3m_tokens':
            prompt = filler(8_000_000) + '\\n\\nWhat is the total for alpha?'
        return prompt, attachment, output

    def agent_for(events, content):
        state = {'called': False}
        def respond(messages, info):
            if content is not None and not state['called']:
                state['called'] = True
                return ModelResponse(parts=[ToolCallPart('fetch', {}, tool_call_id='f1')])
            return ModelResponse(parts=[TextPart('Done.')])
        provider = StrictProvider(respond, context_window=WINDOW)
        summary = lambda m, i: ModelResponse(parts=[TextPart('summary')])
        summarizer = StrictProvider(summary, context_window=WINDOW)
        processor = create_history_processor(
            policy=ContextPolicy(context_window=WINDOW),
            summarizer=SummarizerSettings(model=summarizer.model()),
            on_history_event=events.append,
        )
        agent = Agent(provider.model(), capabilities=[processor])
        @agent.tool_plain
        def fetch() -> str:
            return content
        return agent, provider

    async def measure():
        warm, _ = agent_for([], 'warm up')
        await warm.run('Go.')
        # the conversion worker starts once per process: outside the measurement
        await warm.run(['Go.', BinaryContent(data=hostile_files.pdf_pages(2), media_type='application/pdf')])
        base = resident()  # the warmed-up process, before the content exists
        prompt, attachment, output = build()
        size = len(output or '') + (len(attachment.data) if attachment else 0) + len(prompt)
        events = []
        agent, provider = agent_for(events, output)
        stalls = []
        done = asyncio.Event()
        async def ticker():
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                stalls.append(now - last - 0.01)
                last = now
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')  # the peak resident size starts again from here (the content itself included)
        task = asyncio.create_task(ticker())
        start = time.perf_counter()
        user = [prompt, attachment] if attachment is not None else prompt
        error = None
        try:
            await agent.run(user)
        except Exception as exc:
            error = f'{type(exc).__name__}: {exc}'[:300]
        wall = time.perf_counter() - start
        done.set()
        await task
        processed = [e.duration_ms for e in events if isinstance(e, RequestProcessed)]
        peak = peak_resident_bytes_of_self()
        print(json.dumps({
            'case': case,
            'size': size,
            'processing_ms': max(processed, default=0.0),
            'wall': wall,
            'max_stall_ms': max(stalls, default=0.0) * 1000,
            'peak_over_base': (peak or 0) - base,
            'requests': len(provider.requests),
            'rejected': len(provider.rejected),
            'largest_request': provider.peak_input_tokens,
            'stage_failed': [e.error[:120] for e in events if isinstance(e, StageFailed)],
            'warnings': sorted({e.code for e in events if isinstance(e, HistoryWarning)}),
            'content_lost': [e.code for e in events if isinstance(e, ContentLost)],
            'error': error,
        }))

    asyncio.run(measure())
    """
)


def _measure(case: str) -> dict[str, object]:
    env = {
        **os.environ,
        'PYTHONPATH': os.pathsep.join(
            [
                str(ROOT / 'src'),
                str(ROOT / 'tests' / 'reliability'),
                str(ROOT / 'tests'),
                os.environ.get('PYTHONPATH', ''),
            ]
        ),
    }
    completed = subprocess.run(
        [sys.executable, '-c', _SCRIPT, case], capture_output=True, env=env, timeout=1800, check=False
    )
    if completed.returncode != 0:
        return {'case': case, 'error': completed.stderr.decode(errors='replace')[-800:]}
    report: dict[str, object] = json.loads(completed.stdout.decode().strip().splitlines()[-1])
    return report


def _size(n: int) -> str:
    return f'{n / 1024 / 1024:,.0f} MB' if n >= 1024 * 1024 else f'{n / 1024:,.0f} KB'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('--cases', default=','.join(CASES))
    args = parser.parse_args()
    print(
        '| case | content | processing | run | longest loop stall | peak above base (x content) '
        '| requests (rejected) | largest request | StageFailed | events |'
    )
    print('|---|---|---|---|---|---|---|---|---|---|')
    for case in args.cases.split(','):
        r = _measure(case)
        if 'size' not in r:
            print(f'| {case} | | failed: {str(r.get("error"))!r} | | | | | | | |')
            continue
        size = int(r['size'])  # type: ignore[call-overload]
        peak = int(r['peak_over_base'])  # type: ignore[call-overload]
        events = ', '.join([*r['warnings'], *(f'ContentLost {c}' for c in r['content_lost'])])  # type: ignore[misc]
        failed = r['stage_failed'] or r['error'] or 'none'
        print(
            f'| {case} | {_size(size)} | {float(r["processing_ms"]) / 1000:.1f} s '  # type: ignore[arg-type]
            f'| {float(r["wall"]):.1f} s | {float(r["max_stall_ms"]):.0f} ms '  # type: ignore[arg-type]
            f'| {_size(peak)} ({peak / size:.1f}x) | {r["requests"]} ({r["rejected"]}) '
            f'| {int(r["largest_request"]):,} tokens | {failed} | {events} |'  # type: ignore[call-overload]
        )


if __name__ == '__main__':
    main()
