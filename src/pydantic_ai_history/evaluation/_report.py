"""The evaluation's report: per session and strategy, and aggregated per strategy as tables and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ._judge import DIMENSIONS
from ._strategies import STRATEGIES


@dataclass(kw_only=True)
class StrategyResult:
    """One strategy on one session."""

    session: str
    """The session's name."""
    strategy: str
    """The strategy's key."""
    status: str
    """`ok`, `failed` or `not installed`."""
    note: str = ''
    """Why it failed, or what differed."""
    tokens_before: int = 0
    """The session's tokens (o200k) before compaction."""
    tokens_after: int = 0
    """The compacted history's tokens (o200k)."""
    tokens_spent: int = 0
    """Tokens the strategy's own model calls spent (summarizer input + output)."""
    facts: int = 0
    """Deterministic facts asked about."""
    present: int = 0
    """Facts in the compacted context (exact text, whitespace and case aside)."""
    recoverable: int = 0
    """Facts in the answer to one `read_artifact(query=<question>)` call."""
    reachable: int = 0
    """Facts present or recoverable."""
    by_kind: dict[str, list[int]] = field(default_factory=dict)
    """Fact kind -> [facts, present, recoverable]: where a strategy loses detail."""
    grades: list[dict[str, int]] = field(default_factory=list)
    """The judge's grades, one dict per judged probe (dimension -> 0..5)."""
    answer_tokens: int = 0
    """Tokens the answering model spent on this strategy's probes."""
    judge_tokens: int = 0
    """Tokens the judge spent on them."""
    read_calls: int = 0
    """`read_artifact` calls the answering model made."""


@dataclass(kw_only=True)
class SessionResult:
    """What the evaluation did with one session."""

    name: str
    """The session's name."""
    messages: int
    """Messages in the session (up to its last request)."""
    tokens: int
    """Its tokens (o200k)."""
    evicted: int = 0
    """Messages evicted by the cut (between the kept head and the verbatim tail)."""
    kept_from: int | None = None
    """The first message of the verbatim tail; None when the session was not evaluated."""
    facts: int = 0
    """Deterministic facts (probes) asked about."""
    generated_probes: int = 0
    """Probes the probe model wrote."""
    skipped: str | None = None
    """Why it was not evaluated."""


@dataclass(kw_only=True)
class StrategySummary:
    """One strategy over every session it ran on."""

    strategy: str
    """The strategy's key."""
    label: str
    """Its label in the tables."""
    sessions: int
    """Sessions it compacted."""
    facts: int
    """Deterministic facts asked about, over those sessions."""
    present: float
    """Share of facts present (over all facts of all sessions)."""
    recoverable: float
    """Share of facts one `read_artifact(query=...)` call recovers."""
    reachable: float
    """Share of facts present or recoverable."""
    compression: float
    """Tokens before over tokens after, over all sessions."""
    tokens_spent: int
    """Tokens its own model calls spent (the summarizer's)."""
    judged: int
    """Probes judged."""
    dimensions: dict[str, float]
    """Mean grade per dimension (empty when nothing was judged)."""
    overall: float | None
    """The mean of the dimensions; None when nothing was judged."""
    answer_tokens: int
    """Tokens the answering model spent on its probes."""
    judge_tokens: int
    """Tokens the judge spent on them."""
    status: str
    """`ok`, or why it produced nothing (`not installed`, `failed`)."""


def _summary_of(key: str, mine: list[StrategyResult]) -> StrategySummary:
    ok = [r for r in mine if r.status == 'ok']
    facts = sum(r.facts for r in ok)
    grades = [g for r in ok for g in r.grades]
    dimensions = {d: sum(g[d] for g in grades) / len(grades) for d in DIMENSIONS} if grades else {}
    before, after = sum(r.tokens_before for r in ok), sum(r.tokens_after for r in ok)
    return StrategySummary(
        strategy=key,
        label=STRATEGIES.get(key, key),
        sessions=len(ok),
        facts=facts,
        present=_share(sum(r.present for r in ok), facts),
        recoverable=_share(sum(r.recoverable for r in ok), facts),
        reachable=_share(sum(r.reachable for r in ok), facts),
        compression=before / after if after else 0.0,
        tokens_spent=sum(r.tokens_spent for r in ok),
        judged=len(grades),
        dimensions=dimensions,
        overall=sum(dimensions.values()) / len(dimensions) if dimensions else None,
        answer_tokens=sum(r.answer_tokens for r in ok),
        judge_tokens=sum(r.judge_tokens for r in ok),
        status=_status(mine, ok),
    )


def _share(count: int, total: int) -> float:
    return count / total if total else 0.0


def _status(mine: list[StrategyResult], ok: list[StrategyResult]) -> str:
    """`ok` when the strategy ran on some session; else why not (the first session's reason)."""
    if ok:
        return 'ok'
    if not mine:
        return 'not run'
    return f'{mine[0].status}: {mine[0].note}' if mine[0].note else mine[0].status


@dataclass(kw_only=True)
class EvalReport:
    """An evaluation's results, its settings, and what went wrong."""

    settings: dict[str, Any]
    """The models (names) and knobs the run used; `offline` is True with the scripted summarizer."""
    sessions: list[SessionResult]
    """What was done with each session, in input order."""
    results: list[StrategyResult]
    """Each strategy on each evaluated session."""
    errors: list[str] = field(default_factory=list)
    """Problems that did not stop the run (a session that failed to load, a model that raised)."""

    @property
    def evaluated(self) -> int:
        """Sessions that were compacted and scored."""
        return sum(1 for s in self.sessions if s.skipped is None)

    def summary(self) -> list[StrategySummary]:
        """The per-strategy aggregates."""
        keys = self.settings.get('strategies', STRATEGIES)
        return [_summary_of(key, [r for r in self.results if r.strategy == key]) for key in keys]

    def to_json(self) -> str:
        """The whole report as JSON: settings, sessions, per-session results, per-strategy aggregates."""
        data = {
            'settings': self.settings,
            'sessions': [asdict(s) for s in self.sessions],
            'results': [asdict(r) for r in self.results],
            'summary': [asdict(s) for s in self.summary()],
            'errors': self.errors,
        }
        return json.dumps(data, indent=2, ensure_ascii=False)

    def model_free_table(self) -> str:
        """Markdown: the model-free scores per strategy."""
        rows = [
            '| strategy | sessions | facts | present | recoverable (1 read) | present or recoverable '
            '| compression | summarizer tokens |',
            '|---|---:|---:|---:|---:|---:|---:|---:|',
        ]
        for s in self.summary():
            if s.sessions == 0:
                rows.append(f'| {s.label} | {s.status} | | | | | | |')
                continue
            rows.append(
                f'| {s.label} | {s.sessions} | {s.facts:,} | {s.present:.1%} | {s.recoverable:.1%} '
                f'| {s.reachable:.1%} | {s.compression:.1f}x | {s.tokens_spent:,} |'
            )
        return '\n'.join(rows)

    def judged_table(self) -> str:
        """Markdown: the judge's mean grade (0-5) per dimension and per strategy; empty when none judged."""
        judged = [s for s in self.summary() if s.judged]
        if not judged:
            return ''
        heads = ' | '.join(d.replace('_', ' ') for d in DIMENSIONS)
        rows = [
            f'| strategy | probes | {heads} | overall | compression | summarizer tokens '
            '| answer + judge tokens |',
            '|---|---:|' + '---:|' * (len(DIMENSIONS) + 4),
        ]
        for s in judged:
            grades = ' | '.join(f'{s.dimensions[d]:.2f}' for d in DIMENSIONS)
            rows.append(
                f'| {s.label} | {s.judged} | {grades} | {s.overall or 0:.2f} | {s.compression:.1f}x '
                f'| {s.tokens_spent:,} | {s.answer_tokens + s.judge_tokens:,} |'
            )
        return '\n'.join(rows)

    def kinds_table(self) -> str:
        """Markdown: per fact kind, the share present / recoverable for each strategy that ran."""
        ran = [s for s in self.summary() if s.sessions]
        totals: dict[str, dict[str, list[int]]] = {}
        for r in self.results:
            for kind, counts in r.by_kind.items():
                row = totals.setdefault(kind, {}).setdefault(r.strategy, [0, 0, 0])
                row[:] = [a + b for a, b in zip(row, counts, strict=True)]
        rows = [
            '| fact kind | facts | ' + ' | '.join(s.label for s in ran) + ' |',
            '|---|---:|' + '---:|' * len(ran),
        ]
        for kind in sorted(totals):
            per_strategy = totals[kind]
            facts = next(iter(per_strategy.values()))[0]
            triples = [per_strategy.get(s.strategy, [0, 0, 0]) for s in ran]
            cells = [
                f'{_share(present, n):.0%} / {_share(recovered, n):.0%}' for n, present, recovered in triples
            ]
            rows.append(f'| {kind} | {facts:,} | ' + ' | '.join(cells) + ' |')
        return '\n'.join(rows)

    def render(self) -> str:
        """The text the CLI prints."""
        settings = self.settings
        lines = [
            f'Probe evaluation: {self.evaluated} of {len(self.sessions)} session(s) compacted at '
            f'keep_fraction={settings.get("keep_fraction")}; summarizer: {settings.get("summarizer")}.'
        ]
        if settings.get('offline'):
            lines.append(
                'Offline: the summarizer is scripted (no model). This checks the plumbing and the model-free '
                'scores, not the quality of an LLM summary.'
            )
        lines += [
            '',
            self.model_free_table(),
            '',
            'Per fact kind (present / recoverable):',
            '',
            self.kinds_table(),
        ]
        judged = self.judged_table()
        if judged:
            lines += [
                '',
                f'Judged (answerer {settings.get("answerer")}, judge {settings.get("judge")}), grades 0-5:',
                '',
                judged,
            ]
        skipped = [s for s in self.sessions if s.skipped]
        if skipped:
            lines += ['', 'Not evaluated:', *(f'- {s.name}: {s.skipped}' for s in skipped)]
        notes = [r for r in self.results if r.note and r.status == 'ok']
        if notes:
            lines += ['', 'Notes:', *(f'- {r.session} / {r.strategy}: {r.note}' for r in notes)]
        if self.errors:
            lines += ['', 'Errors:', *(f'- {e}' for e in self.errors)]
        return '\n'.join(lines)
