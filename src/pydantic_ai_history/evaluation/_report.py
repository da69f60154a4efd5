"""The evaluation's report: per session and strategy, and aggregated per strategy as tables and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ._answers import CONDITIONS, ConditionResult
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
    answer_probes: int = 0
    """Hand-written probes answered (its probe file's, up to the settings' bound)."""
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
class AnswerRow:
    """The answer-based scores of one strategy on one session, or over every session."""

    session: str
    """The session's name, or `all` for the total."""
    strategy: str
    """The strategy's key."""
    probes: int
    """Probes answered in each condition."""
    full: int | None
    """Right with the full history: (a); None when (a) was not run."""
    readback: int | None
    """Right with the compacted history and `read_artifact`: (b); None when the strategy keeps nothing to
    read back (then (b) is (c))."""
    no_tools: int | None
    """Right with the compacted history and no tools: (c); None when (c) was not run."""
    read_calls: int
    """`read_artifact` calls the model made in (b)."""
    readback_tokens: int
    """Tokens the read-backs added to the requests in (b) (the requests after each run's first)."""

    def ratio(self, right: int | None) -> float | None:
        """`right` over (a)'s, None when either is unknown or (a) got none right."""
        return right / self.full if right is not None and self.full else None


def answer_rows(results: list[ConditionResult], strategies: list[str]) -> list[AnswerRow]:
    """One row per session and strategy answered after its compaction, then one total per strategy."""
    full = {r.session: r for r in results if r.condition == 'full'}
    keyed = {(r.session, r.strategy, r.condition): r for r in results if r.condition != 'full'}
    rows: list[AnswerRow] = []
    for session in dict.fromkeys(r.session for r in results):
        for key in strategies:
            b = keyed.get((session, key, 'readback'))
            c = keyed.get((session, key, 'no_tools'))
            if b is not None or c is not None:
                rows.append(_row(session, key, full.get(session), b, c))
    ran = [key for key in strategies if any(r.strategy == key for r in rows)]
    return rows + [_total(key, [r for r in rows if r.strategy == key]) for key in ran]


def _row(
    session: str,
    key: str,
    a: ConditionResult | None,
    b: ConditionResult | None,
    c: ConditionResult | None,
) -> AnswerRow:
    """One session's row for strategy `key` from its (a), (b) and (c) answers (None: not run)."""
    answered = b if b is not None else c
    return AnswerRow(
        session=session,
        strategy=key,
        probes=len(answered.answers) if answered is not None else 0,
        full=a.right if a is not None else None,
        readback=b.right if b is not None else None,
        no_tools=c.right if c is not None else None,
        read_calls=b.read_calls if b is not None else 0,
        readback_tokens=b.readback_tokens if b is not None else 0,
    )


def _total(key: str, rows: list[AnswerRow]) -> AnswerRow:
    return AnswerRow(
        session='all',
        strategy=key,
        probes=sum(r.probes for r in rows),
        full=_sum([r.full for r in rows]),
        readback=_sum([r.readback for r in rows]),
        no_tools=_sum([r.no_tools for r in rows]),
        read_calls=sum(r.read_calls for r in rows),
        readback_tokens=sum(r.readback_tokens for r in rows),
    )


def _sum(values: list[int | None]) -> int | None:
    """The total, None when a row does not know its value."""
    return None if None in values else sum(v or 0 for v in values)


def _cell(right: int | None, probes: int) -> str:
    return 'no store' if right is None else f'{right}/{probes} ({_share(right, probes):.0%})'


def _ratio(value: float | None) -> str:
    return 'n/a' if value is None else f'{value:.2f}'


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
    answers: list[ConditionResult] = field(default_factory=list)
    """The hand-written probes answered per session, condition and strategy (each answer and its cost)."""

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
            'answers': [asdict(a) for a in self.answers],
            'answer_summary': [asdict(r) for r in self.answer_rows()],
            'errors': self.errors,
        }
        return json.dumps(data, indent=2, ensure_ascii=False)

    def answer_rows(self) -> list[AnswerRow]:
        """The answer-based scores per session and strategy, then per strategy over every session."""
        return answer_rows(self.answers, list(self.settings.get('strategies', STRATEGIES)))

    def answers_table(self) -> str:
        """Markdown: probe accuracy with the full history (a), the compacted one with `read_artifact` (b) and
        without tools (c), their ratios, and the read-backs; empty when no probe was answered."""
        rows = self.answer_rows()
        if not rows:
            return ''
        recall = self.settings.get('recall_chars') or 0
        with_recall = f' (ours: + recall of {recall:,} chars)' if recall else ''
        ran = set(self.settings.get('conditions', CONDITIONS))

        def cell(right: int | None, probes: int, condition: str) -> str:
            return 'not run' if condition not in ran else _cell(right, probes)

        lines = [
            f'| session | strategy | probes | (a) full | (b) compacted + read_artifact{with_recall} '
            '| (c) compacted, no tools | (b)/(a) | (c)/(a) | read-backs | read-back tokens |',
            '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|',
        ]
        for r in rows:
            lines.append(
                f'| {r.session} | {STRATEGIES.get(r.strategy, r.strategy)} | {r.probes} '
                f'| {cell(r.full, r.probes, "full")} | {cell(r.readback, r.probes, "readback")} '
                f'| {cell(r.no_tools, r.probes, "no_tools")} '
                f'| {_ratio(r.ratio(r.readback))} | {_ratio(r.ratio(r.no_tools))} | {r.read_calls} '
                f'| {r.readback_tokens:,} |'
            )
        return '\n'.join(lines)

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

    def _answers_section(self) -> list[str]:
        table = self.answers_table()
        if not table:
            return []
        reader = self.settings.get('reader')
        lines = [
            '',
            f'Hand-written probes, answered by {reader} (right = holds the expected answer):',
            '',
            table,
        ]
        if self.settings.get('reader_offline'):
            lines += [
                '',
                'Offline: the reader is scripted (it answers with the passage that best matches the '
                'question, and reads back when none matches enough). These figures check the plumbing, not '
                'a model: pass --model to have a real model answer.',
            ]
        return lines

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
        lines += self._answers_section()
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
