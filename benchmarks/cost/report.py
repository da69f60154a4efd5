"""The markdown tables of a cost run (from its JSON, so a saved run can be re-rendered)."""

from __future__ import annotations

from typing import Any

__all__ = ('judge', 'render_markdown')

HEADER = (
    '| contender | $ prefix cache | $ breakpoints | input tokens | cache hit (prefix / bp) '
    '| prefix rewrites (tokens) | summarizer calls (input) | rejected | largest request '
    '| facts: in context + one read away /{facts} | read-backs billed (input) | added s per compaction |'
)
ALIGN = '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|'


def _k(tokens: int) -> str:
    if tokens >= 1_000_000:
        return f'{tokens / 1_000_000:.2f}M'
    if tokens >= 1_000:
        return f'{tokens / 1_000:.0f}K'
    return str(tokens)


def _latency(latency: dict[str, Any] | None) -> str:
    if not latency or latency.get('added_seconds_mean') is None:
        return '-'
    mean, worst, steps = (
        latency['added_seconds_mean'],
        latency['added_seconds_max'],
        latency['compaction_steps'],
    )
    return f'{mean:.2f} (max {worst:.2f}, n={steps})'


def _readbacks(run: dict[str, Any]) -> str:
    readbacks = run.get('readbacks')  # a run saved before read-backs were billed
    return '-' if readbacks is None else f'{readbacks["calls"]} ({_k(readbacks["input_tokens"])})'


def _row(run: dict[str, Any], latency: dict[str, Any] | None) -> str:
    facts = run['facts']
    summarizer = run['summarizer']
    rejected = str(run['rejected'])
    if run['rejected']:
        rejected = f'**{run["rejected"]}** (first: request {run["first_rejected"]})'
    kept = f'{facts["in_context"]} + {facts["one_read_away"]}'
    if run['rejected']:
        kept += ' (last accepted request)'
    dollars = f'{run["automatic"]["cost"]:.2f}', f'{run["breakpoint"]["cost"]:.2f}'
    if run['first_rejected'] is not None and run['contender'] == 'none':
        dollars = (f'overflows at request {run["first_rejected"]}', '-')
    label = run['label'] + (f' (error: {run["error"]})' if run.get('error') else '')
    return (
        f'| {label} | {dollars[0]} | {dollars[1]} | {_k(run["input_tokens"])} '
        f'| {run["automatic"]["cache_hit"]:.1%} / {run["breakpoint"]["cache_hit"]:.1%} '
        f'| {run["rewrites"]} ({_k(run["rewrite_tokens"])}) '
        f'| {summarizer["calls"]} ({_k(summarizer["input_tokens"])}) | {rejected} '
        f'| {_k(run["largest_request"])} | {kept} | {_readbacks(run)} | {_latency(latency)} |'
    )


def render_markdown(payload: dict[str, Any]) -> str:
    """One table per workload and window, contenders in the order they ran, each followed by issue 37's rule
    (ours' defaults against every harness setup); the rule's summary over every workload and window; latency
    from the latency run, if any."""
    latency = {run['contender']: run['latency'] for run in payload.get('latency_runs', [])}
    lines: list[str] = []
    for workload in _workloads(payload):
        for window in sorted({run['window'] for run in payload['runs'] if _of(run) == workload}):
            runs = [run for run in payload['runs'] if run['window'] == window and _of(run) == workload]
            lines += [
                f'**{window // 1000}K window**, {runs[0]["steps"]} tool calls (workload `{workload}`):',
                '',
                HEADER.format(facts=runs[0]['facts']['total']),
                ALIGN,
            ]
            timed = workload == payload.get('latency_meta', {}).get('workload', 'tools')
            lines += [_row(run, latency.get(run['contender']) if timed else None) for run in runs]
            lines.append('')
            lines += _rule_table(runs, f"Issue 37's rule, workload `{workload}`, {window // 1000}K window")
    lines += _rule_summary(payload)
    if payload.get('latency_runs'):
        lines += _latency_table(payload)
    return '\n'.join(lines)


# ---- issue 37's rule ---------------------------------------------------------------------------------------

RULE_RATIO = 0.9
"""Ours with its defaults costs at most this much of each harness setup (in both bills)."""
RULE = (
    'Ours with its defaults costs at most {ratio}x of each harness setup, in both bills, '
    'and keeps at least as many facts (in context + one read away, strict), without a rejected request.'
)


def _of(run: dict[str, Any]) -> str:
    return run.get('workload', 'tools')


def _workloads(payload: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(_of(run) for run in payload['runs']))


def _kept(run: dict[str, Any]) -> int:
    return run['facts']['in_context'] + run['facts']['one_read_away']


def judge(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """Issue 37's rule for one harness run against ours' defaults on the same workload and window."""
    ratios = [ours[mode]['cost'] / theirs[mode]['cost'] for mode in ('automatic', 'breakpoint')]
    misses = []
    worst = max(ratios)
    if worst > RULE_RATIO:
        misses.append(f'cost {worst:.2f}x (ours {1 - RULE_RATIO / worst:.0%} too dear)')
    if _kept(ours) < _kept(theirs):
        misses.append(f'facts {_kept(ours)} < {_kept(theirs)}')
    if ours['rejected']:
        misses.append(f'ours rejected {ours["rejected"]}')
    if ours.get('error'):
        misses.append('ours errored')
    return {'ratios': ratios, 'holds': not misses, 'misses': misses}


def _pairs(runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    ours = next((run for run in runs if run['contender'] == 'ours'), None)
    if ours is None:
        return []
    return [(ours, run) for run in runs if run['contender'].startswith('harness')]


def _verdict(ruling: dict[str, Any]) -> str:
    return 'holds' if ruling['holds'] else 'misses: ' + '; '.join(ruling['misses'])


def _rule_table(runs: list[dict[str, Any]], title: str) -> list[str]:
    pairs = _pairs(runs)
    if not pairs:
        return []
    lines = [
        f'{title} (stated with the summary at the end):',
        '',
        '| harness setup | its $ prefix / bp | ours $ prefix / bp | ours / its (prefix / bp) '
        '| facts: its / ours | rule |',
        '|---|---:|---:|---:|---:|---|',
    ]
    for ours, theirs in pairs:
        ruling = judge(ours, theirs)
        note = f' ({theirs["rejected"]} rejected: billed for the accepted only)' if theirs['rejected'] else ''
        if theirs.get('error'):
            note += ' (error)'
        lines.append(
            f'| {theirs["label"]}{note} '
            f'| {theirs["automatic"]["cost"]:.2f} / {theirs["breakpoint"]["cost"]:.2f} '
            f'| {ours["automatic"]["cost"]:.2f} / {ours["breakpoint"]["cost"]:.2f} '
            f'| {ruling["ratios"][0]:.2f}x / {ruling["ratios"][1]:.2f}x '
            f'| {_kept(theirs)} / {_kept(ours)} | {_verdict(ruling)} |'
        )
    lines.append('')
    return lines


def _rule_summary(payload: dict[str, Any]) -> list[str]:
    """Every harness setup against ours' defaults on every workload and window: one table."""
    columns = [
        (workload, window)
        for workload in _workloads(payload)
        for window in sorted({run['window'] for run in payload['runs'] if _of(run) == workload})
    ]
    cells: dict[str, dict[tuple[str, int], str]] = {}
    labels: dict[str, str] = {}
    for workload, window in columns:
        runs = [run for run in payload['runs'] if run['window'] == window and _of(run) == workload]
        for ours, theirs in _pairs(runs):
            ruling = judge(ours, theirs)
            worst = max(ruling['ratios'])
            facts = f'{_kept(ours)} vs {_kept(theirs)}'
            cell = f'{worst:.2f}x, {facts}: ' + ('holds' if ruling['holds'] else '**misses**')
            cells.setdefault(theirs['contender'], {})[(workload, window)] = cell
            labels[theirs['contender']] = theirs['label']
    if not cells:
        return []
    held = sum(cell.endswith('holds') for row in cells.values() for cell in row.values())
    total = sum(len(row) for row in cells.values())
    lines = [
        f"**Issue 37's rule, every harness setup**: {RULE.format(ratio=RULE_RATIO)} Each cell: ours' cost / "
        f'its cost (the dearer ratio of the two bills), facts ours vs its. Holds in {held} of {total}.',
        '',
        '| harness setup | ' + ' | '.join(f'{w} {n // 1000}K' for w, n in columns) + ' |',
        '|---|' + '---|' * len(columns),
    ]
    for key, row in cells.items():
        lines.append(f'| {labels[key]} | ' + ' | '.join(row.get(c, '-') for c in columns) + ' |')
    lines.append('')
    return lines


def _latency_table(payload: dict[str, Any]) -> list[str]:
    meta = payload['latency_meta']
    lines = [
        f'**Added latency per compaction** ("added s per compaction" above): a separate run, '
        f'{meta["window"] // 1000}K window, {meta["steps"]} tool calls of the '
        f'`{meta.get("workload", "tools")}` workload, the model answering in '
        f'{meta["model_seconds"]} s and the summarizer in {meta["summarizer_seconds"]} s. A compaction step '
        'is one whose request rewrote what was already sent, or during which a summarizer call started; '
        "its added time is its wall time (from the model's answer to the next request) minus the median "
        'of the other steps.',
        '',
        '| contender | compaction steps | added s: mean | max | total | summarizer calls | normal step s |',
        '|---|---:|---:|---:|---:|---:|---:|',
    ]
    for run in payload['latency_runs']:
        latency = run['latency']
        mean, worst = latency['added_seconds_mean'], latency['added_seconds_max']
        lines.append(
            f'| {run["label"]} | {latency["compaction_steps"]} | {"-" if mean is None else f"{mean:.2f}"} '
            f'| {"-" if worst is None else f"{worst:.2f}"} | {latency["added_seconds_total"]:.2f} '
            f'| {run["summarizer"]["calls"]} | {latency["normal_step_seconds"]:.3f} |'
        )
    return lines
