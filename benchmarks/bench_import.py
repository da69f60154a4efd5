"""What `import pydantic_ai_history` adds over `import pydantic_ai`, against harness's compaction module.

For each variant, fresh interpreters run `python -c "import pydantic_ai"` (the base) and
`python -c "import pydantic_ai, MODULE"` alternately, RUNS times each after one warm-up pair (which also
writes the bytecode caches); the figure is the median of the per-pair differences of wall time (the pairs
share the machine's momentary load). A second figure comes from `python -X importtime -c "import pydantic_ai,
MODULE"`: the summed cumulative time of what the second import statement loads, median over RUNS runs (this
excludes interpreter start-up and is less noisy, but adds importtime's own overhead per module). The modules
the import loads beyond pydantic-ai are listed from `sys.modules`.

Variants:
  - ours: this checkout (`src/` first on PYTHONPATH), in `--python` (default: this interpreter);
  - before: another checkout of this package (`--before-src PATH`, e.g. main's `src/`), same interpreter;
  - harness: `pydantic_ai_harness.compaction` in the harness venv of `run_peers.py` (`.venvs/harness`,
    pydantic-ai-harness 0.62.0, which pins pydantic-ai-slim 2.62.0; created with uv on first use), or
    `--harness-python PATH`. `--no-harness` skips it.

Writes the "## Import time" section of benchmarks/RESULTS.md (`--no-write` only prints it).

Run: python benchmarks/bench_import.py [--runs 30] [--before-src ../main/src] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from run_peers import RESULTS, ROOT, _base_python, _cpu_model, ensure_venv

SECTION = '## Import time'
HEAVY = ('PIL', 'markitdown', 'pydantic_ai_history.files._read', 'tiktoken', 'defusedxml', 'sqlite3')
"""Modules reported as loaded or not by each variant's import."""

_PROBE = """
import json, sys, pydantic_ai
from importlib.metadata import version
before = set(sys.modules)
import {module}
added = sorted(set(sys.modules) - before)
print(json.dumps({{'added': added, 'pydantic_ai': version('pydantic-ai-slim')}}))
"""


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One interpreter and module to time."""

    label: str
    """The row's name."""
    python: str
    """The interpreter."""
    module: str
    """The module imported after pydantic_ai."""
    pythonpath: str | None
    """Prepended to PYTHONPATH (a source checkout), or None."""


def _env(variant: Variant) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ('VIRTUAL_ENV', 'PYTHONPATH', 'TIKTOKEN_CACHE_DIR')
    }
    if variant.pythonpath:
        env['PYTHONPATH'] = variant.pythonpath
    return env


def _wall(variant: Variant, code: str) -> float:
    started = time.perf_counter()
    subprocess.run([variant.python, '-c', code], check=True, env=_env(variant))
    return (time.perf_counter() - started) * 1000


def _importtime(variant: Variant) -> float:
    """ms of everything `import MODULE` loads after pydantic_ai, by `-X importtime`."""
    done = subprocess.run(
        [variant.python, '-X', 'importtime', '-c', f'import pydantic_ai, {variant.module}'],
        check=True,
        env=_env(variant),
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith('import time:') and '|' in line]
    start = max(i for i, line in enumerate(lines) if line.rstrip().endswith('| pydantic_ai'))
    total = 0
    for line in lines[start + 1 :]:
        _, cumulative, name = line.split('|')
        if not name[1:].startswith(' '):  # top level: its cumulative covers what it imported
            total += int(cumulative)
    return total / 1000


@dataclass(frozen=True, kw_only=True)
class Result:
    """One variant's figures (ms are medians)."""

    base_ms: float
    with_ms: float
    added_ms: float
    added_quartiles: tuple[float, float]
    importtime_ms: float
    modules: int
    """How many modules the import adds to `sys.modules`."""
    other_packages: list[str]
    """Top-level packages other than the measured one among them."""
    heavy: dict[str, bool]
    pydantic_ai: str
    """pydantic-ai-slim's version in the interpreter."""


def measure(variant: Variant, runs: int) -> Result:
    base_code, with_code = 'import pydantic_ai', f'import pydantic_ai, {variant.module}'
    _wall(variant, base_code), _wall(variant, with_code)  # warm-up, bytecode caches
    bases, withs, added = [], [], []
    for i in range(runs):
        if i % 2:  # alternate which runs first within a pair
            w, b = _wall(variant, with_code), _wall(variant, base_code)
        else:
            b, w = _wall(variant, base_code), _wall(variant, with_code)
        bases.append(b)
        withs.append(w)
        added.append(w - b)
    importtimes = [_importtime(variant) for _ in range(runs)]
    probe = subprocess.run(
        [variant.python, '-c', _PROBE.format(module=variant.module)],
        check=True,
        env=_env(variant),
        capture_output=True,
        text=True,
    )
    loaded = json.loads(probe.stdout)
    modules: list[str] = loaded['added']
    quartiles = statistics.quantiles(added, n=4) if runs >= 4 else [min(added), max(added)]
    return Result(
        base_ms=statistics.median(bases),
        with_ms=statistics.median(withs),
        added_ms=statistics.median(added),
        added_quartiles=(quartiles[0], quartiles[-1]),
        importtime_ms=statistics.median(importtimes),
        modules=len(modules),
        other_packages=sorted({m.split('.')[0] for m in modules} - {variant.module.split('.')[0]}),
        heavy={name: name in modules for name in HEAVY},
        pydantic_ai=loaded['pydantic_ai'],
    )


def _variants(args: argparse.Namespace) -> list[Variant]:
    variants = [
        Variant(
            label='pydantic-ai-history (this checkout)',
            python=args.python,
            module='pydantic_ai_history',
            pythonpath=str(ROOT / 'src'),
        )
    ]
    if args.before_src:
        before = Path(args.before_src).resolve()
        commit = subprocess.run(
            ['git', '-C', str(before), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True
        ).stdout.strip()
        variants.insert(
            0,
            Variant(
                label=f'pydantic-ai-history before ({commit or before})',
                python=args.python,
                module='pydantic_ai_history',
                pythonpath=str(before),
            ),
        )
    if not args.no_harness:
        harness = args.harness_python or str(ensure_venv('harness', _base_python(), []))
        variants.append(
            Variant(
                label='pydantic-ai-harness 0.62.0 compaction',
                python=harness,
                module='pydantic_ai_harness.compaction',
                pythonpath=None,
            )
        )
    return variants


def render(results: dict[str, Result], variants: list[Variant], args: argparse.Namespace) -> str:
    command = shlex.join(['python', 'benchmarks/bench_import.py', *sys.argv[1:]])
    load = os.getloadavg()[0]
    lines = [
        SECTION,
        '',
        f'Produced by `{command}` on {dt.date.today().isoformat()} ({args.runs} runs per variant). Machine: '
        f'{os.cpu_count()} CPUs, {_cpu_model()}; 1-min load average {args.load_start:.1f} at start and '
        f'{load:.1f} at end. Python {sys.version.split()[0]}. Method: the docstring of '
        '`benchmarks/bench_import.py` (wall: median of paired differences of fresh interpreters, with the '
        'interquartile range; importtime: `python -X importtime`, summed cumulative of the second import).',
        '',
        '| variant | module | pydantic-ai-slim | `import pydantic_ai` (ms) | added, wall (ms) | '
        'added, importtime (ms) | modules added | other packages loaded |',
        '|---|---|---|---:|---:|---:|---:|---|',
    ]
    for variant in variants:
        r = results[variant.label]
        low, high = r.added_quartiles
        others = ', '.join(f'`{p}`' for p in r.other_packages) or 'none'
        lines.append(
            f'| {variant.label} | `{variant.module}` | {r.pydantic_ai} | {r.base_ms:.0f} | '
            f'**{r.added_ms:.0f}** ({low:.0f}–{high:.0f}) | {r.importtime_ms:.0f} | {r.modules} | {others} |'
        )
    lines += ['', 'Loaded by the import (beyond pydantic-ai):', '']
    lines.append('| variant | ' + ' | '.join(f'`{name}`' for name in HEAVY) + ' |')
    lines.append('|---|' + '---|' * len(HEAVY))
    for variant in variants:
        heavy = results[variant.label].heavy
        lines.append(f'| {variant.label} | ' + ' | '.join('yes' if heavy[n] else 'no' for n in HEAVY) + ' |')
    return '\n'.join(lines) + '\n'


def write_section(text: str) -> None:
    current = RESULTS.read_text()
    pattern = re.compile(rf'^{re.escape(SECTION)}\n.*?(?=^## |\Z)', re.S | re.M)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text + '\n', current, count=1)
    else:
        updated = current.rstrip() + '\n\n' + text
    RESULTS.write_text(updated.rstrip() + '\n')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--runs', type=int, default=30)
    parser.add_argument('--python', default=sys.executable, help='interpreter with pydantic-ai for ours')
    parser.add_argument('--before-src', help="another checkout's src/ to measure as 'before'")
    parser.add_argument('--harness-python', help='interpreter with pydantic-ai-harness installed')
    parser.add_argument('--no-harness', action='store_true')
    parser.add_argument('--no-write', action='store_true', help='print the section, leave RESULTS.md alone')
    args = parser.parse_args()
    args.load_start = os.getloadavg()[0]
    variants = _variants(args)
    results = {}
    for variant in variants:
        print(
            f'[import] {variant.label}: {variant.python} -c "import pydantic_ai, {variant.module}"',
            flush=True,
        )
        results[variant.label] = measure(variant, args.runs)
    text = render(results, variants, args)
    print(text)
    if not args.no_write:
        write_section(text)
        print(f'[import] wrote {RESULTS.relative_to(ROOT)}')


if __name__ == '__main__':
    main()
