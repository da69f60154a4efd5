"""What a long tool loop costs with each context manager: the cost benchmark of issue 27.

    python benchmarks/bench_cost.py            # every contender, 64K/128K/200K, 180 calls + the latency run
    python benchmarks/bench_cost.py --quick    # smoke test: 40 calls at 64K, no latency run (< 1 min)
    python benchmarks/bench_cost.py --contenders ours,harness-tiered --windows 128K --json out.json
    python benchmarks/bench_cost.py --workload coding   # issue 37's coding loop (240 calls) instead
    python benchmarks/bench_cost.py --workload tools,coding --no-latency   # both, one table per workload

A real pydantic-ai `Agent` runs a scripted tool loop (one tool call per step, real fixture outputs, 30
planted facts; `--workload coding`: issue 37's coding loop, real source files read and re-read and real agent
outputs) against a strict provider that counts every request with o200k, rejects what is over its
window, and bills it both as automatic prefix caching and as breakpoint caching; every contender summarizes
with the same scripted model. Method: benchmarks/README.md ("Cost"); modules: benchmarks/cost/.

pydantic-ai-harness pins pydantic-ai-slim exactly, so the contenders run in one venv on that version with
this package installed editable (benchmarks/cost/requirements.txt). When the interpreter running this script
lacks a package a chosen contender needs, the script creates benchmarks/.venvs/cost with `uv` (once) and runs
itself there. Offline except for those installs; o200k comes from ../shared/tiktoken-cache.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import importlib.util
import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from cost.contenders import CONTENDERS, NEEDS  # noqa: E402  (stdlib only: no pydantic-ai imported yet)

VENV = HERE / '.venvs' / 'cost'
REQUIREMENTS = HERE / 'cost' / 'requirements.txt'
RESULTS = HERE / 'RESULTS.md'
SECTION = '## Cost (issue 27)'
TIKTOKEN_CACHE = ROOT.parent / 'shared' / 'tiktoken-cache'
FULL = {'windows': '64K,128K,200K', 'steps': 180}
QUICK = {'windows': '64K', 'steps': 40}
WORKLOAD_STEPS = {'tools': FULL['steps'], 'coding': 240}
"""Each workload's own number of calls (`--steps` overrides both)."""
LATENCY = {'window': 64_000, 'steps': 60, 'model_seconds': 0.5, 'summarizer_seconds': 2.0}
SUMMARY_REQUESTS = round(LATENCY['summarizer_seconds'] / LATENCY['model_seconds'])
"""Cost runs: a summarizer call made while the run goes on lasts this many model requests (the latency run's
ratio), so a summary made in the background is ready when it would be, not at once nor never."""


def parse_windows(text: str) -> list[int]:
    """'64K,128000' -> [64000, 128000]."""
    out = []
    for item in text.split(','):
        item = item.strip().upper()
        out.append(int(float(item[:-1]) * 1000) if item.endswith('K') else int(item))
    return out


def _id_secret(seed: int | None) -> bytes | None:
    return None if seed is None else hashlib.sha256(f'bench_cost id seed {seed}'.encode()).digest()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='40 calls at 64K, no latency run (smoke test)')
    parser.add_argument('--windows', help=f'comma-separated, e.g. 64K,128K (default {FULL["windows"]})')
    parser.add_argument(
        '--workload',
        default='tools',
        help='tools (the tool loop, 180 calls), coding (the coding loop, 240 calls) or both: tools,coding',
    )
    parser.add_argument(
        '--steps', type=int, help='tool calls per run (default: 180 for tools, 240 for coding; --quick: 40)'
    )
    parser.add_argument('--contenders', default=','.join(CONTENDERS), help=', '.join(CONTENDERS))
    parser.add_argument(
        '--seed', type=int, help='workload seed (default: cost.workload.SEED / cost.coding.SEED)'
    )
    parser.add_argument(
        '--median-tokens', type=int, default=2_500, help='median size of the ordinary tool outputs (2,500)'
    )
    parser.add_argument(
        '--id-seed',
        type=int,
        help="key ours' artifact ids with a secret made from this number (and a fixed conversation id), so "
        'every run makes the same ids and costs: two setups compared with one seed differ by their setting '
        'alone; default: a fresh secret and conversation per run, as an app has (ids move a cell by ~1%%)',
    )
    parser.add_argument('--json', type=Path, help='write every figure to this JSON file')
    parser.add_argument(
        '--from-json',
        type=Path,
        nargs='+',
        help='render saved runs instead of running (several: one table, e.g. two workloads run side by side)',
    )
    parser.add_argument('--no-latency', action='store_true', help='skip the latency run')
    parser.add_argument('--latency-only', action='store_true', help='only the latency run')
    parser.add_argument(
        '--latency-steps', type=int, default=LATENCY['steps'], help=f'latency run steps ({LATENCY["steps"]})'
    )
    parser.add_argument(
        '--model-seconds',
        type=float,
        default=LATENCY['model_seconds'],
        help=f'latency run: the model answers in this many seconds ({LATENCY["model_seconds"]})',
    )
    parser.add_argument(
        '--summary-requests',
        type=int,
        default=SUMMARY_REQUESTS,
        help='cost runs: model requests a summarizer call lasts while the run goes on, as a summary made in '
        f"the background (default {SUMMARY_REQUESTS}: the latency run's summarizer / model seconds)",
    )
    parser.add_argument('--write', action='store_true', help='replace the section in benchmarks/RESULTS.md')
    parser.add_argument('--section', default=SECTION, help=f'its heading (default "{SECTION}")')
    parser.add_argument('--note', default='', help='a sentence added to the section header')
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    args.windows = parse_windows(args.windows or defaults['windows'])
    args.steps = args.steps or (defaults['steps'] if args.quick else None)
    args.workloads = [w.strip() for w in args.workload.split(',') if w.strip()]
    if not args.workloads or set(args.workloads) - set(WORKLOAD_STEPS):
        parser.error(f'--workload: choose from {", ".join(WORKLOAD_STEPS)} (comma-separated)')
    args.contenders = [c.strip() for c in args.contenders.split(',') if c.strip()]
    unknown = sorted(set(args.contenders) - set(CONTENDERS))
    if unknown:
        parser.error(f'unknown contender(s) {unknown}; choose from {", ".join(CONTENDERS)}')
    args.latency = not (args.quick or args.no_latency)
    return args


# ---- the interpreter ---------------------------------------------------------------------------------------


def _missing(contenders: list[str]) -> list[str]:
    modules = {'pydantic_ai', 'tiktoken', *(NEEDS[c] for c in contenders if c in NEEDS)}
    return sorted(m for m in modules if importlib.util.find_spec(m) is None)


def _venv_python() -> Path:
    """benchmarks/.venvs/cost, created or updated when requirements.txt changed (a marker holds its hash)."""
    exe = VENV / 'bin' / 'python'
    spec = hashlib.sha256(REQUIREMENTS.read_bytes() + str(ROOT).encode()).hexdigest()
    marker = VENV / '.installed'
    if exe.exists() and marker.exists() and marker.read_text() == spec:
        return exe
    print(f'[bench_cost] creating {VENV} from {REQUIREMENTS.name}', flush=True)
    subprocess.run(['uv', 'venv', '-q', '--clear', '--python', '3.11', str(VENV)], check=True)
    install = ['uv', 'pip', 'install', '-q', '--python', str(exe), '-r', str(REQUIREMENTS), '-e', str(ROOT)]
    subprocess.run(install, check=True)
    marker.write_text(spec)
    return exe


def _ensure_interpreter(args: argparse.Namespace, argv: list[str]) -> None:
    missing = _missing(args.contenders)
    if not missing:
        return
    if os.environ.get('BENCH_COST_IN_VENV'):
        raise SystemExit(f'missing in {sys.executable}: {", ".join(missing)}')
    exe = _venv_python()
    print(f'[bench_cost] {", ".join(missing)} not importable here: running in {exe}', flush=True)
    env = {**os.environ, 'BENCH_COST_IN_VENV': '1'}
    os.execve(str(exe), [str(exe), str(Path(__file__).resolve()), *argv], env)


# ---- running -----------------------------------------------------------------------------------------------


def _workload(name: str, args: argparse.Namespace, encode: Any, steps: int | None = None) -> Any:
    from cost.coding import SEED as CODING_SEED
    from cost.coding import build_coding_workload
    from cost.workload import SEED, build_workload

    steps = steps or args.steps or WORKLOAD_STEPS[name]
    if name == 'coding':
        return build_coding_workload(steps, encode, args.seed if args.seed is not None else CODING_SEED)
    seed = args.seed if args.seed is not None else SEED
    return build_workload(steps, encode, seed, median_tokens=args.median_tokens)


def _runs(args: argparse.Namespace) -> dict[str, Any]:
    from cost.pricing import Prices
    from cost.run import RunConfig, run_one, versions
    from cost.workload import SEED
    from peers._strict import Encoder

    encode = Encoder()
    seed = args.seed if args.seed is not None else SEED
    prices = Prices()
    payload: dict[str, Any] = {'runs': [], 'latency_runs': [], 'workloads': {}}
    started = time.perf_counter()
    id_secret = _id_secret(args.id_seed)
    if not args.latency_only:
        for name in args.workloads:
            workload = _workload(name, args, encode)
            payload['workloads'][name] = _describe(workload, encode)
            payload.setdefault('workload', payload['workloads'][name])
            steps = len(workload.steps)
            for window in args.windows:
                for contender in args.contenders:
                    config = RunConfig(
                        contender,
                        window,
                        steps,
                        summary_requests=args.summary_requests,
                        id_secret=id_secret,
                    )
                    result = asyncio.run(run_one(config, workload, encode, prices))
                    _progress(result)
                    payload['runs'].append(result)
    if args.latency or args.latency_only:
        latency = {**LATENCY, 'steps': args.latency_steps, 'model_seconds': args.model_seconds}
        workload = _workload(args.workloads[0], args, encode, steps=latency['steps'])
        payload['latency_meta'] = {**latency, 'workload': workload.name}
        for contender in args.contenders:
            config = RunConfig(
                contender,
                latency['window'],
                latency['steps'],
                model_seconds=latency['model_seconds'],
                summarizer_seconds=latency['summarizer_seconds'],
            )
            result = asyncio.run(run_one(config, workload, encode, prices))
            _progress(result, latency=True)
            payload['latency_runs'].append(result)
    payload['meta'] = {
        'command': 'python benchmarks/bench_cost.py ' + shlex.join(sys.argv[1:]),
        'date': dt.date.today().isoformat(),
        'seconds': round(time.perf_counter() - started, 1),
        'seed': seed,
        'summary_requests': args.summary_requests,
        'median_tokens': args.median_tokens,
        'prices': vars(prices),
        'versions': versions(),
        'python': platform.python_version(),
        'load': _load(),
    }
    return payload


def _describe(workload: Any, encode: Any) -> dict[str, Any]:
    from pydantic_ai.messages import ToolReturnPart

    # as the provider receives them (pydantic-ai serializes a dict output itself)
    sizes = sorted(encode(ToolReturnPart(s.tool, s.output).model_response_str()) for s in workload.steps)
    reads = [s.args.get('path') for s in workload.steps if s.tool == 'read_file' and s.args]
    return {
        'name': workload.name,
        'seed': workload.seed,
        'source': workload.source,
        'reads': len(reads),
        'rereads': len(reads) - len(set(reads)),
        'calls': len(sizes),
        'tokens': sum(sizes),
        'median_tokens': sizes[len(sizes) // 2],
        'largest_tokens': sizes[-1],
        'facts': len(workload.facts),
    }


def _progress(result: dict[str, Any], latency: bool = False) -> None:
    what = 'latency' if latency else f'{result["window"] // 1000}K'
    print(
        f'[bench_cost] {result.get("workload", "tools"):<6} {what:>7} {result["contender"]:<20} '
        f'${result["automatic"]["cost"]:6.2f} '
        f'/ ${result["breakpoint"]["cost"]:6.2f}  rewrites {result["rewrites"]:3}  '
        f'summarizer {result["summarizer"]["calls"]:3}  rejected {result["rejected"]:3}  '
        f'facts {result["facts"]["in_context"]}+{result["facts"]["one_read_away"]}  '
        f'read-backs {result.get("readbacks", {}).get("calls", 0)}  '
        f'{result["wall_seconds"]:.1f}s' + (f'  ERROR {result["error"]}' if result['error'] else ''),
        flush=True,
    )


def _load() -> str:
    try:
        return ' '.join(f'{x:.1f}' for x in os.getloadavg())
    except OSError:
        return '-'


# ---- output ------------------------------------------------------------------------------------------------


def section(payload: dict[str, Any], heading: str = SECTION, note: str = '') -> str:
    from cost.report import render_markdown

    meta = payload['meta']
    versions = ', '.join(f'{name} {v}' for name, v in meta['versions'].items())
    workload = payload.get('workload') or {}
    lines = [
        heading,
        '',
        f'Produced by `{meta["command"]}` on {meta["date"]} in {meta["seconds"]:.0f} s (load average '
        f'{meta["load"]} at the end; Python {meta["python"]}; {versions}). Method, setups and caveats: '
        'benchmarks/README.md, "Cost". Prices per million tokens: '
        + ', '.join(f'{k} ${v}' for k, v in meta['prices'].items())
        + '.'
        + (f' {note}' if note else ''),
        '',
    ]
    described = payload.get('workloads') or ({'tools': workload} if workload else {})
    for name, workload in described.items():
        lines += [_workload_line(name, workload, meta), '']
    lines.append(render_markdown(payload))
    return '\n'.join(lines).rstrip() + '\n'


def merge(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """Saved runs as one (runs and workloads in order; the first's meta, every command, the longest time)."""
    if len(payloads) == 1:
        return payloads[0]
    merged: dict[str, Any] = {**payloads[0], 'runs': [], 'workloads': {}, 'latency_runs': []}
    for payload in payloads:
        merged['runs'] += payload['runs']
        merged['latency_runs'] += payload.get('latency_runs', [])
        merged['workloads'].update(payload.get('workloads') or {'tools': payload['workload']})
        if 'latency_meta' in payload:
            merged['latency_meta'] = payload['latency_meta']
    meta = payloads[0]['meta']
    merged['meta'] = {
        **meta,
        'command': '` and `'.join(p['meta']['command'] for p in payloads),
        'seconds': max(p['meta']['seconds'] for p in payloads),
        'load': ' / '.join(p['meta']['load'] for p in payloads),
    }
    return merged


def _workload_line(name: str, workload: dict[str, Any], meta: dict[str, Any]) -> str:
    sizes = (
        f'{workload["calls"]} tool outputs, {workload["tokens"]:,} tokens '
        f'(median {workload["median_tokens"]:,}, largest {workload["largest_tokens"]:,}), '
        f'{workload["facts"]} facts.'
    )
    if name == 'coding':
        return (
            f'Workload `coding` (seed {workload["seed"]}): {sizes} {workload["reads"]} of the calls are '
            f'`read_file` ({workload["rereads"]} re-reads; {workload["source"]}).'
        )
    seed = workload.get('seed', meta['seed'])
    return f'Workload `tools` (seed {seed}, median size {meta.get("median_tokens", 2_500):,}): {sizes}'


def _write_results(text: str, heading: str) -> None:
    current = RESULTS.read_text()
    pattern = re.compile(rf'^{re.escape(heading)}\n.*?(?=^## |\Z)', re.S | re.M)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text + '\n', current, count=1)
    else:
        updated = current.rstrip() + '\n\n' + text
    RESULTS.write_text(updated.rstrip() + '\n')


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _arguments(argv)
    if args.from_json:
        payload = merge([json.loads(path.read_text()) for path in args.from_json])
    else:
        _ensure_interpreter(args, argv)
        # the packages' own warnings (e.g. a compaction over its target) would bury the progress lines
        logging.basicConfig(level=logging.ERROR, format='[%(name)s] %(message)s')
        os.environ.setdefault('TIKTOKEN_CACHE_DIR', str(TIKTOKEN_CACHE))
        payload = _runs(args)
    if args.json:
        args.json.write_text(json.dumps(payload, indent=1) + '\n')
    text = section(payload, args.section, args.note)
    print(text)
    if args.write:
        _write_results(text, args.section)


if __name__ == '__main__':
    main()
