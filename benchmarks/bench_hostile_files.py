"""Time and peak memory of reading each hostile attachment of issue 17, as the artifact stage and window do.

Run from the repo root, with `PYTHONPATH=src`:
`python benchmarks/bench_hostile_files.py [--runs 3] [--cases docx_bomb_10mb,pdf_10k_pages]`.
Each case runs in its own fresh process: the file is built there (not timed), one small document is
converted first (and again after each run) so the worker process has started and loaded its converters
(its start is reported once, separately), then `read_file` plus the `TokenCounter` count of the raw
attachment are timed `--runs` times (median reported). Peaks are the peak resident sizes (VmHWM)
of the reading process (which holds the file itself, size shown) and of the conversion worker(s), over
all runs of the case.
Targets (issue 17): under 10 s and under 500 MB each.
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

_SCRIPT = textwrap.dedent(
    """
    import json, statistics, sys, time
    import hostile_files
    from pydantic_ai_history._compat import BinaryContent
    from pydantic_ai_history.files import read_file
    from pydantic_ai_history.files import _worker
    from pydantic_ai_history.files._worker import shutdown_workers, worker_peak_bytes
    from pydantic_ai_history.tokens import TokenCounter

    name, runs = sys.argv[1], int(sys.argv[2])
    case = hostile_files.CASES[name]
    start = time.monotonic()
    read_file(hostile_files.pdf_pages(2), media_type='application/pdf', name='warm.pdf')
    worker_start = time.monotonic() - start
    counter = TokenCounter('gpt-4o')
    counter.count_text('warm up the tokenizer')
    data = case.build()
    times = []
    for _ in range(runs):
        start = time.monotonic()
        result = read_file(data, media_type=case.media_type, name=case.filename)
        tokens = TokenCounter('gpt-4o')._count_media(BinaryContent(data=data, media_type=case.media_type))
        times.append(time.monotonic() - start)
        # a worker retired after a large case is replaced in the background: wait for it, untimed
        read_file(hostile_files.pdf_pages(2), media_type='application/pdf', name='warm.pdf')
    worker_peak = worker_peak_bytes()
    shutdown_workers()
    print(json.dumps({
        'case': name,
        'size': len(data),
        'seconds': statistics.median(times),
        'worker_start': worker_start,
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the process that started this one
        'self_peak': _worker.peak_resident_bytes_of_self(),
        'worker_peak': worker_peak,
        'tokens': tokens,
        'manifest': result.manifest,
    }))
    """
)


def _measure(name: str, runs: int) -> dict[str, object]:
    env = {
        **os.environ,
        'PYTHONPATH': os.pathsep.join(
            [str(ROOT / 'src'), str(ROOT / 'tests' / 'reliability'), os.environ.get('PYTHONPATH', '')]
        ),
    }
    completed = subprocess.run(
        [sys.executable, '-c', _SCRIPT, name, str(runs)],
        capture_output=True,
        env=env,
        timeout=900,
        check=False,
    )
    if completed.returncode != 0:
        return {'case': name, 'error': completed.stderr.decode(errors='replace')[-500:]}
    report: dict[str, object] = json.loads(completed.stdout.decode().strip().splitlines()[-1])
    return report


def _mb(n: object) -> str:
    return f'{int(n) / 1024 / 1024:,.0f}' if isinstance(n, int) else '?'  # type: ignore[arg-type]


def main() -> None:
    sys.path.insert(0, str(ROOT / 'tests' / 'reliability'))
    from hostile_files import CASES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--cases', default=','.join(CASES))
    args = parser.parse_args()
    print(
        f'| case | file | time (median of {args.runs}) | reader peak RSS | worker peak RSS '
        '| tokens counted | note |'
    )
    print('|---|---|---|---|---|---|---|')
    starts: list[float] = []
    for name in args.cases.split(','):
        r = _measure(name, args.runs)
        if 'error' in r:
            print(f'| {name} | | failed: {r["error"]!r} | | | | |')
            continue
        starts.append(float(r['worker_start']))  # type: ignore[arg-type]
        size = int(r['size'])  # type: ignore[call-overload]
        file = f'{size / 1024:,.0f} KB' if size < 10 * 1024 * 1024 else f'{size / 1024 / 1024:,.0f} MB'
        print(
            f'| {name} | {file} | {float(r["seconds"]):.2f} s | {_mb(r["self_peak"])} MB '  # type: ignore[arg-type]
            f'| {_mb(r["worker_peak"])} MB | {int(r["tokens"]):,} | {r["manifest"]} |'  # type: ignore[call-overload]
        )
    if starts:
        span = f'{min(starts):.1f}-{max(starts):.1f} s'
        print(f'\nworker start (once per process, not in the times above): {span}')


if __name__ == '__main__':
    main()
