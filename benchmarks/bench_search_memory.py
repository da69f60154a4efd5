"""Memory of `read_artifact(query=...)` without an id: a search over everything a conversation stored.

A `DirectoryStore` scope holds `--mb` MB of text artifacts (500 KB each, varied log-like lines with rare ids).
Each case runs in a fresh subprocess and prints its peak RSS (`resource.getrusage(RUSAGE_SELF).ru_maxrss`),
the RSS before the search (imports and store loaded), CPU seconds and wall time:

- `one`: one search.
- `eight`: eight searches with different queries at once (as one model response with eight parallel calls).

Run: python benchmarks/bench_search_memory.py [--mb 60] [--cases one eight]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARTIFACT_CHARS = 500_000
SCOPE = 'conversation:bench'
QUERIES = [
    'timeout in region eu-west-3 for order ORD-4417',
    'which customer was refunded 9,412.50 EUR',
    'error E1042 database lock',
    'latency above 900 ms checkout',
    'audit line for user u-77120',
    'retry budget exhausted payment gateway',
    'cache miss ratio report',
    'deployment 2024-11-03 rollback',
]


def _artifact(n: int) -> str:
    rng = random.Random(n)
    regions = ['eu-west-3', 'us-east-1', 'ap-south-2', 'sa-east-1']
    lines: list[str] = []
    size = 0
    while size < ARTIFACT_CHARS:
        status, note = rng.choice([200, 404, 500]), rng.choice(['cache miss', 'retry', 'lock', 'refund'])
        line = (
            f'{rng.randrange(10**9):09d} request ORD-{rng.randrange(10**5)} user u-{rng.randrange(10**6)} '
            f'region {rng.choice(regions)} took {rng.randrange(2_000)} ms status {status} '
            f'code E{rng.randrange(2_000)} note {note}\n'
        )
        lines.append(line)
        size += len(line)
    return ''.join(lines)[:ARTIFACT_CHARS]


async def _fill(root: Path, megabytes: int) -> None:
    from pydantic_ai_history.store import DirectoryStore

    store = DirectoryStore(root, max_bytes=None, secret=b'bench-secret-0123456789')
    for n in range(megabytes * 1_000_000 // ARTIFACT_CHARS):
        data = _artifact(n).encode()
        aid = store.artifact_id(data, scope=SCOPE)
        await store.put(aid, data, media_type='text/plain', source=f'tool log_{n}', scope=SCOPE)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _child(root: str, case: str) -> dict[str, float]:
    from pydantic_ai_history.readback import search_artifacts_text
    from pydantic_ai_history.store import DirectoryStore

    store = DirectoryStore(root, max_bytes=None, secret=b'bench-secret-0123456789')
    await store.list_artifacts(scope=SCOPE, limit=1)
    before = _rss_mb()
    queries = QUERIES[:1] if case == 'one' else QUERIES
    cpu, wall = time.process_time(), time.perf_counter()
    answers = await asyncio.gather(*(search_artifacts_text(store, q, 20_000, scope=SCOPE) for q in queries))
    assert all(a.startswith('[') for a in answers), answers
    return {
        'searches': len(queries),
        'rss_before_mb': round(before),
        'peak_rss_mb': round(_rss_mb()),
        'cpu_s': round(time.process_time() - cpu, 1),
        'wall_s': round(time.perf_counter() - wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('--mb', type=int, default=60, help='MB of text the scope holds (default 60)')
    parser.add_argument('--cases', nargs='*', default=['one', 'eight'], choices=['one', 'eight'])
    parser.add_argument('--child', nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(*args.child))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / 'store'
        asyncio.run(_fill(root, args.mb))
        held = sum(p.stat().st_size for p in root.rglob('*.bin'))
        print(f'scope holds {held / 1e6:.0f} MB in {len(list(root.rglob("*.bin")))} artifacts')
        for case in args.cases:
            out = subprocess.run(
                [sys.executable, __file__, '--child', str(root), case],
                capture_output=True,
                text=True,
                check=True,
                env=os.environ,
            )
            print(f'{case}: {out.stdout.strip()}')


if __name__ == '__main__':
    main()
