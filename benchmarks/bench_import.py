"""What `import pydantic_ai_history` adds over `import pydantic_ai`, against harness's compaction module.

For each variant, fresh interpreters run `python -c "import pydantic_ai"` (the base) and
`python -c "import pydantic_ai, MODULE"` alternately, RUNS rounds after one warm-up pair. Two bytecode
settings: "cached", the usual case after `pip install` (the warm-up writes the caches, for every variant under
benchmarks/.data/pycache via `PYTHONPYCACHEPREFIX`, never beside the sources: another checkout is only
read), and "none" (`PYTHONDONTWRITEBYTECODE=1` and an empty cache prefix: every run compiles every module,
as in an environment that sets it over a venv installed without bytecode, uv's default; issue 27's figures
were taken that way). Figures: the median of the per-pair differences of wall time (a pair shares the
machine's momentary load) and of CPU time (user + system of the child, less sensitive to other work on the
machine); "CPU inside", the CPU time of `import MODULE` measured around it in an interpreter that has
imported pydantic_ai (no start-up, no baseline to subtract: the steadiest figure, used for the target); and
from `python -X importtime -c "import pydantic_ai, MODULE"`, the summed cumulative time of what the second
import statement loads (importtime adds its own overhead per module). Medians over RUNS rounds; each round
measures every variant, so a burst of load hits all of them. The modules the import adds to `sys.modules`
are listed.

Variants:
  - ours: this checkout (`src/` first on PYTHONPATH), in `--python` (default: this interpreter), twice:
    `import pydantic_ai_history` (its names load on first use) and `import pydantic_ai_history.factory` (what
    `from pydantic_ai_history import create_history_processor` loads: the processor and its stages);
  - before: another checkout of this package (`--before-src PATH`, e.g. main's `src/`), same interpreter;
  - harness: `pydantic_ai_harness.compaction` in the harness venv of `run_peers.py` (`.venvs/harness`,
    pydantic-ai-harness 0.62.0, which pins pydantic-ai-slim 2.62.0; created with uv on first use), or
    `--harness-python PATH`. `--no-harness` skips it.

Writes the "## Import time" section of benchmarks/RESULTS.md (`--no-write` only prints it).

Run: python benchmarks/bench_import.py [--runs 20] [--bytecode cached,none] [--before-src ../main/src]
     [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from run_peers import DATA, RESULTS, ROOT, _base_python, _cpu_model, ensure_venv

SECTION = '## Import time'
PYCACHE = DATA / 'pycache'
"""Every variant's bytecode cache (`PYTHONPYCACHEPREFIX`) when bytecode is cached."""
NO_PYCACHE = DATA / 'pycache-none'
"""An empty cache prefix, for runs without bytecode (never written: PYTHONDONTWRITEBYTECODE)."""
OURS_MODULES = (('pydantic_ai_history', ''), ('pydantic_ai_history.factory', ', factory'))
"""What this package's rows import: the package (its names load on first use), and the module
`from pydantic_ai_history import create_history_processor` loads (the processor and its three stages)."""
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
    bytecode: bool
    """Whether bytecode is cached (else every run compiles every module)."""


def _env(variant: Variant) -> dict[str, str]:
    unset = ('VIRTUAL_ENV', 'PYTHONPATH', 'TIKTOKEN_CACHE_DIR', 'PYTHONDONTWRITEBYTECODE')
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env['PYTHONPYCACHEPREFIX'] = str(PYCACHE if variant.bytecode else NO_PYCACHE)
    if not variant.bytecode:
        env['PYTHONDONTWRITEBYTECODE'] = '1'
    if variant.pythonpath:
        env['PYTHONPATH'] = variant.pythonpath
    return env


def _run(variant: Variant, code: str) -> tuple[float, float]:
    """Wall and CPU (user + system) ms of a fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([variant.python, '-c', code], check=True, env=_env(variant))
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


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


_IN_PROCESS = """
import time, pydantic_ai
cpu, wall = time.process_time(), time.perf_counter()
import {module}
print((time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000)
"""


@dataclass(kw_only=True)
class Samples:
    """One variant's measurements, one entry per round."""

    base_wall: list[float] = field(default_factory=list)
    added_wall: list[float] = field(default_factory=list)
    added_cpu: list[float] = field(default_factory=list)
    inside_cpu: list[float] = field(default_factory=list)
    """CPU time of the second import statement, measured in the interpreter around it."""
    importtime: list[float] = field(default_factory=list)

    def round(self, variant: Variant, swap: bool) -> None:
        base_code, with_code = 'import pydantic_ai', f'import pydantic_ai, {variant.module}'
        if swap:  # alternate which runs first within a pair
            (with_wall, with_cpu), (base_wall, base_cpu) = _run(variant, with_code), _run(variant, base_code)
        else:
            (base_wall, base_cpu), (with_wall, with_cpu) = _run(variant, base_code), _run(variant, with_code)
        self.base_wall.append(base_wall)
        self.added_wall.append(with_wall - base_wall)
        self.added_cpu.append(with_cpu - base_cpu)
        self.importtime.append(_importtime(variant))
        inside = subprocess.run(
            [variant.python, '-c', _IN_PROCESS.format(module=variant.module)],
            check=True,
            env=_env(variant),
            capture_output=True,
            text=True,
        )
        self.inside_cpu.append(float(inside.stdout.split()[0]))


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """What the import adds to `sys.modules`."""

    modules: list[str]
    pydantic_ai: str
    """pydantic-ai-slim's version in the interpreter."""


def _loaded(variant: Variant) -> Loaded:
    probe = subprocess.run(
        [variant.python, '-c', _PROBE.format(module=variant.module)],
        check=True,
        env=_env(variant),
        capture_output=True,
        text=True,
    )
    loaded = json.loads(probe.stdout)
    return Loaded(modules=loaded['added'], pydantic_ai=loaded['pydantic_ai'])


def _key(variant: Variant) -> str:
    return f'{variant.label}, bytecode {"cached" if variant.bytecode else "none"}'


def measure(variants: list[Variant], runs: int) -> dict[str, Samples]:
    """RUNS rounds; each round measures every variant once, so a burst of load hits all of them."""
    samples = {_key(variant): Samples() for variant in variants}
    for variant in variants:  # warm-up: bytecode caches, file system caches
        _run(variant, 'import pydantic_ai'), _run(variant, f'import pydantic_ai, {variant.module}')
    for i in range(runs):
        for variant in variants:
            samples[_key(variant)].round(variant, swap=bool(i % 2))
        print(f'[import] round {i + 1}/{runs}', flush=True)
    return samples


def _median_iqr(values: list[float]) -> str:
    quartiles = statistics.quantiles(values, n=4) if len(values) >= 4 else [min(values), max(values)]
    return f'**{statistics.median(values):.0f}** ({quartiles[0]:.0f} to {quartiles[-1]:.0f})'


def _commit(path: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(['git', '-C', str(path), *args], capture_output=True, text=True).stdout.strip()

    commit = git('rev-parse', '--short', 'HEAD')
    return (
        f'{commit}{" + changes" if git("status", "--porcelain", "--", ".") else ""}' if commit else str(path)
    )


def _variants(args: argparse.Namespace) -> list[Variant]:
    ours = [('pydantic-ai-history', ROOT / 'src')]
    if args.before_src:
        ours.insert(0, ('pydantic-ai-history before', Path(args.before_src).resolve()))
    variants: list[Variant] = []
    for bytecode in [mode == 'cached' for mode in args.bytecode.split(',')]:
        variants += [
            Variant(
                label=f'{label} ({_commit(src)}){suffix}',
                python=args.python,
                module=module,
                pythonpath=str(src),
                bytecode=bytecode,
            )
            for label, src in ours
            for module, suffix in OURS_MODULES
        ]
        if not args.no_harness:
            harness = args.harness_python or str(ensure_venv('harness', _base_python(), []))
            variants.append(
                Variant(
                    label='pydantic-ai-harness 0.62.0',
                    python=harness,
                    module='pydantic_ai_harness.compaction',
                    pythonpath=None,
                    bytecode=bytecode,
                )
            )
    return variants


def _target(samples: dict[str, Samples], variants: list[Variant]) -> list[str]:
    """The issue-27 target, per bytecode setting: this checkout adds no more CPU time than harness's."""
    lines = []
    for bytecode in sorted({v.bytecode for v in variants}, reverse=True):
        rows = [v for v in variants if v.bytecode == bytecode]
        harness = next((v for v in rows if v.module.startswith('pydantic_ai_harness')), None)
        if harness is None:
            continue
        theirs = statistics.median(samples[_key(harness)].inside_cpu)
        for ours in (
            v
            for v in rows
            if v.module.startswith('pydantic_ai_history') and v.pythonpath == str(ROOT / 'src')
        ):
            mine = statistics.median(samples[_key(ours)].inside_cpu)
            verdict = 'met' if mine <= theirs else f'**missed** by {mine - theirs:.0f} ms'
            lines.append(
                f'- Target "adds no more than harness\'s compaction", `import {ours.module}`, bytecode '
                f'{"cached" if bytecode else "none"}: {mine:.0f} ms against {theirs:.0f} ms ("CPU inside", '
                f'{mine / theirs:.1f}x): {verdict}.'
            )
    return lines


def render(
    samples: dict[str, Samples], loaded: dict[str, Loaded], variants: list[Variant], args: argparse.Namespace
) -> str:
    command = shlex.join(['python', 'benchmarks/bench_import.py', *sys.argv[1:]])
    lines = [
        SECTION,
        '',
        f'Produced by `{command}` on {dt.date.today().isoformat()} ({args.runs} rounds). Machine: '
        f'{os.cpu_count()} CPUs, {_cpu_model()}; 1-min load average {args.load_start:.1f} at start and '
        f'{os.getloadavg()[0]:.1f} at end. Python {sys.version.split()[0]}. Method: the docstring of '
        '`benchmarks/bench_import.py`. "Added" is what `import pydantic_ai, MODULE` costs over '
        '`import pydantic_ai` in a fresh interpreter: the median, with the interquartile range, in ms.',
        '',
        '| variant | bytecode | module | pydantic-ai-slim | `import pydantic_ai`, wall | added, wall | '
        "added, CPU | added, CPU inside | added, `-X importtime` | modules added (of them pydantic-ai's) | "
        'other packages loaded |',
        '|---|---|---|---|---:|---:|---:|---:|---:|---:|---|',
    ]
    for variant in variants:
        s, found = samples[_key(variant)], loaded[variant.label]
        own = variant.module.split('.')[0]
        pai = sum(m.split('.')[0] == 'pydantic_ai' for m in found.modules)
        others = sorted({m.split('.')[0] for m in found.modules} - {own, 'pydantic_ai'})
        others = [name for name in others if not name.startswith('_')]  # C parts of stdlib modules
        lines.append(
            f'| {variant.label} | {"cached" if variant.bytecode else "none"} | `{variant.module}` | '
            f'{found.pydantic_ai} | '
            f'{statistics.median(s.base_wall):.0f} | {_median_iqr(s.added_wall)} | '
            f'{_median_iqr(s.added_cpu)} | {_median_iqr(s.inside_cpu)} | {_median_iqr(s.importtime)} | '
            f'{len(found.modules)} ({pai}) | '
            f'{", ".join(f"`{name}`" for name in others) or "none"} |'
        )
    lines += ['', *_target(samples, variants), '', 'Loaded by the import (beyond pydantic-ai):', '']
    lines.append('| variant | ' + ' | '.join(f'`{name}`' for name in HEAVY) + ' |')
    lines.append('|---|' + '---|' * len(HEAVY))
    for label, found in loaded.items():
        modules = found.modules
        lines.append(f'| {label} | ' + ' | '.join('yes' if n in modules else 'no' for n in HEAVY) + ' |')
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
    parser.add_argument('--runs', type=int, default=20)
    parser.add_argument('--bytecode', default='cached,none', help='cached, none, or both (the default)')
    parser.add_argument('--python', default=sys.executable, help='interpreter with pydantic-ai for ours')
    parser.add_argument('--before-src', help="another checkout's src/ to measure as 'before'")
    parser.add_argument('--harness-python', help='interpreter with pydantic-ai-harness installed')
    parser.add_argument('--no-harness', action='store_true')
    parser.add_argument('--no-write', action='store_true', help='print the section, leave RESULTS.md alone')
    args = parser.parse_args()
    args.load_start = os.getloadavg()[0]
    variants = _variants(args)
    for variant in variants:
        print(f'[import] {variant.label}: {variant.python} -c "import pydantic_ai, {variant.module}"')
    loaded = {variant.label: _loaded(variant) for variant in variants if variant.bytecode}
    loaded |= {variant.label: _loaded(variant) for variant in variants if variant.label not in loaded}
    samples = measure(variants, args.runs)
    text = render(samples, loaded, variants, args)
    print(text)
    if not args.no_write:
        write_section(text)
        print(f'[import] wrote {RESULTS.relative_to(ROOT)}')


if __name__ == '__main__':
    main()
