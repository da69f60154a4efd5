"""Issue 39: what one search of the stored transcript, with a probe's own question as the query, finds.

For each built-in session of `pydantic-ai-history eval`: the eval's cut (`keep_fraction` 0.3), our compaction
with the scripted summarizer (offline; the stored transcript is the same whatever the summarizer), then, for
each hand-written probe, `recall_passages(store, question, limit)` at several limits (what recall sends: the
passages, the question not echoed). A probe counts as
found when the answer holds its expected answer as `eval` scores it (normalised, as a whole token run). Beside
it: how many expected answers the compacted context itself holds. This is the ceiling of recall
(`CompactionSettings.recall_chars`), which puts the passages matching a new question into its request (a model
that never calls `read_artifact` then sees them); `pydantic-ai-history eval --recall-chars N` measures it with
a model answering.

Run: python benchmarks/bench_recall.py [--limits 2000,4000,8000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'src'))


async def main(limits: list[int]) -> None:
    from pydantic_ai_history.evaluation import builtin_session_paths
    from pydantic_ai_history.evaluation._probe_files import is_right
    from pydantic_ai_history.evaluation._scripted import scripted_summarizer
    from pydantic_ai_history.evaluation._sessions import load_session
    from pydantic_ai_history.evaluation._strategies import compact_with_ours, session_cut
    from pydantic_ai_history.evaluation._text import context_text
    from pydantic_ai_history.readback import recall_passages
    from pydantic_ai_history.tokens import TokenCounter

    counter = TokenCounter()
    found = dict.fromkeys(limits, 0)
    in_context = probes = 0
    print(f'| session | probes | in the compacted context | {" | ".join(f"found @ {n:,}" for n in limits)} |')
    print('|---|---:|---:|' + '---:|' * len(limits))
    for path in builtin_session_paths():
        session = load_session(path)
        split = await session_cut(session.messages, 0.3, counter)
        if split.cut is None or not session.probes:
            continue
        compacted, _ = await compact_with_ours(
            'summary', session.messages, split.total, split.target, scripted_summarizer()
        )
        assert compacted.store is not None
        context = context_text(compacted.messages, counter)
        row = dict.fromkeys(limits, 0)
        for probe in session.probes:
            for limit in limits:
                # what recall sends: the passages alone, no echo of the question to count as a find
                answer = await recall_passages(
                    compacted.store, probe.question, limit, opening='', scope=compacted.scope
                )
                row[limit] += is_right(probe, answer or '')
        held = sum(is_right(probe, context) for probe in session.probes)
        probes, in_context = probes + len(session.probes), in_context + held
        for limit in limits:
            found[limit] += row[limit]
        cells = ' | '.join(f'{row[n]}' for n in limits)
        print(f'| {session.name} | {len(session.probes)} | {held} | {cells} |')
    print(f'| all | {probes} | {in_context} | {" | ".join(str(found[n]) for n in limits)} |')


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--limits', default='2000,4000,8000', help='answer sizes in characters')
    args = parser.parse_args()
    asyncio.run(main([int(n) for n in args.limits.split(',')]))
