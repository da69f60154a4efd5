"""The markdown tables of a cost run (from its JSON, so a saved run can be re-rendered)."""

from __future__ import annotations

from typing import Any

__all__ = ('render_markdown',)

HEADER = (
    '| contender | $ prefix cache | $ breakpoints | input tokens | cache hit (prefix / bp) '
    '| prefix rewrites (tokens) | summarizer calls (input) | rejected | largest request '
    '| facts: in context + one read away /{facts} | added s per compaction |'
)
ALIGN = '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|'


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
        f'| {_k(run["largest_request"])} | {kept} | {_latency(latency)} |'
    )


def render_markdown(payload: dict[str, Any]) -> str:
    """One table per window, contenders in the order they ran; latency from the latency run, if any."""
    latency = {run['contender']: run['latency'] for run in payload.get('latency_runs', [])}
    lines: list[str] = []
    windows = sorted({run['window'] for run in payload['runs']})
    for window in windows:
        runs = [run for run in payload['runs'] if run['window'] == window]
        lines += [
            f'**{window // 1000}K window**, {runs[0]["steps"]} tool calls:',
            '',
            HEADER.format(facts=runs[0]['facts']['total']),
            ALIGN,
        ]
        lines += [_row(run, latency.get(run['contender'])) for run in runs]
        lines.append('')
    if payload.get('latency_runs'):
        lines += _latency_table(payload)
    return '\n'.join(lines)


def _latency_table(payload: dict[str, Any]) -> list[str]:
    meta = payload['latency_meta']
    lines = [
        f'**Added latency per compaction** ("added s per compaction" above): a separate run, '
        f'{meta["window"] // 1000}K window, {meta["steps"]} tool calls, the model answering in '
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
