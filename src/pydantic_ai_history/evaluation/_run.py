"""`evaluate()`: compact each session once per strategy at the same cut, score what survives, and (with
models) have the probes answered and judged. The decisions are the pure functions of the other modules;
this module runs the model calls and the stores around them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.toolsets import AbstractToolset

from ..budget.model_info import model_name_of
from ..context._summarizer_settings import ModelRef
from ..tokens import TokenCounter
from ._answers import CONDITIONS, Condition, ConditionResult, answer_all
from ._facts import extract_facts, select_facts
from ._judge import DIMENSIONS, answer_probe, grade_answer
from ._probe_files import AnswerProbe, is_probe_file
from ._probes import Probe, fact_probes, generate_probes
from ._reader import scripted_reader
from ._report import EvalReport, SessionResult, StrategyResult
from ._scores import present_share, recoverable_share
from ._scripted import scripted_summarizer
from ._sessions import EvalSession, SessionError, load_session
from ._strategies import (
    COUNTING_MODEL,
    PEERS,
    STRATEGIES,
    Compacted,
    Cut,
    metered,
    recalling_processor,
    session_cut,
    summary_strategy,
    window_strategy,
)
from ._text import context_text, normalize

if TYPE_CHECKING:
    from ..processor import HistoryProcessor

_GENERATOR_INPUT_CHARS = 120_000
"""The probe model reads at most this much of the evicted and of the kept text (the newest of each)."""


@dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """What to evaluate with. Models are pydantic-ai models or their names (`openai:gpt-4.1-mini`)."""

    summarizer: ModelRef | None = None
    """Writes the LLM summaries (ours and the peers'). None: a scripted offline summarizer (no model)."""
    answerer: ModelRef | None = None
    """Answers the probes from each compacted context; with `judge`, turns on the judged path."""
    judge: ModelRef | None = None
    """Grades each answer 0-5 on the six dimensions (structured output)."""
    probe_model: ModelRef | None = None
    """Optional: writes continuation and decision probes from the evicted part."""
    keep_fraction: float = 0.3
    """The share of the session's tokens the cut keeps verbatim (the rest is evicted)."""
    max_facts: int = 40
    """Deterministic facts (probes) per session at most."""
    generated_probes: int = 4
    """Continuation and decision probes the probe model writes per session."""
    judged_probes: int = 10
    """Probes answered and judged per session and strategy (generated ones first, then an even spread of the
    deterministic ones): the judged path costs 2 model calls per probe and strategy."""
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    """Which strategies to run, by key (`summary`, `digest`, `window`, `harness`, `summarization`)."""
    reader: ModelRef | None = None
    """The model under test for the sessions' hand-written probes: it answers each from the full history (a),
    the compacted history with the strategy's `read_artifact` (b) and without tools (c). None: the scripted
    reader (offline, no model: its figures check the plumbing)."""
    answer_probes: int | None = None
    """Hand-written probes answered per session at most, the first of its probe file (None: all; 0: none)."""
    reader_timeout: float = 600.0
    """Seconds one request of the reader may take (a small model on a CPU reads a long history slowly)."""
    conditions: tuple[Condition, ...] = tuple(CONDITIONS)
    """Which conditions the reader answers in (`full` (a), `readback` (b), `no_tools` (c)); a condition left
    out reads `not run` in the report."""
    recall_chars: int = 0
    """Above 0: ours' (b) runs with our processor as the reader's capability, recalling up to this many
    characters of stored passages for each probe (`CompactionSettings.recall_chars`); 0: read-back alone."""

    def __post_init__(self) -> None:
        if not 0 < self.keep_fraction < 1:
            raise ValueError(f'keep_fraction must be in (0, 1), got {self.keep_fraction!r}')
        if self.answer_probes is not None and self.answer_probes < 0:
            raise ValueError(f'answer_probes must be 0 or more, got {self.answer_probes!r}')
        if self.reader_timeout <= 0:
            raise ValueError(f'reader_timeout must be positive, got {self.reader_timeout!r}')
        if self.recall_chars < 0:
            raise ValueError(f'recall_chars must not be negative, got {self.recall_chars!r}')
        if not self.conditions or set(self.conditions) - set(CONDITIONS):
            raise ValueError(f'conditions must be some of {", ".join(CONDITIONS)}, got {self.conditions!r}')
        unknown = sorted(set(self.strategies) - set(STRATEGIES))
        if unknown:
            raise ValueError(f'unknown strategies: {", ".join(unknown)} (known: {", ".join(STRATEGIES)})')


@dataclass
class _Run:
    settings: EvalSettings
    counter: TokenCounter = field(default_factory=lambda: TokenCounter(COUNTING_MODEL))
    errors: list[str] = field(default_factory=list)
    answers: list[ConditionResult] = field(default_factory=list)
    reader: Any = None

    def __post_init__(self) -> None:
        self.reader = self.settings.reader if self.settings.reader is not None else scripted_reader()

    def summarizer(self) -> Any:
        model = self.settings.summarizer
        return metered(model if model is not None else scripted_summarizer())

    async def session(self, session: EvalSession) -> tuple[SessionResult, list[StrategyResult]]:
        messages = session.messages
        record = SessionResult(
            name=session.name, messages=len(messages), tokens=self.counter.count_messages(messages)
        )
        split = await session_cut(messages, self.settings.keep_fraction, self.counter)
        if split.cut is None:
            record.skipped = 'nothing to compact at this keep fraction (the session is too short)'
            return record, []
        cut, digest, total, target = split.cut, split.digest, split.total, split.target
        record.kept_from, record.evicted = cut.start, cut.start - cut.head
        evicted = messages[cut.head : cut.start]
        kept = [*messages[: cut.head], *messages[cut.start :]]
        kept_text = context_text(kept, self.counter)
        facts = select_facts(extract_facts(evicted), normalize(kept_text), self.settings.max_facts)
        probes = fact_probes(facts)
        generated = await self.generated(session.name, evicted, kept_text)
        record.facts, record.generated_probes = len(probes), len(generated)
        asked = list(session.probes[: self.settings.answer_probes])
        record.answer_probes = len(asked)
        if asked and 'full' in self.settings.conditions:
            await self.answer(session.name, '', 'full', messages, asked, None)
        results = []
        for key in self.settings.strategies:
            compacted = digest if key == 'digest' else await self.compacted(key, messages, cut, total, target)
            results.append(await self.score(session, compacted, probes, generated))
            if asked and compacted.status == 'ok':
                await self.answer_compacted(session.name, compacted, asked)
        return record, results

    async def answer_compacted(self, session: str, compacted: Compacted, probes: list[AnswerProbe]) -> None:
        """The probes answered after the compacted history: (b) with the strategy's read-back (when it keeps
        what it evicted), (c) without tools."""
        history, key, conditions = compacted.messages, compacted.strategy, self.settings.conditions
        if compacted.readback is not None and 'readback' in conditions:
            # only our strategies keep a store: recall is theirs
            recall, store = self.settings.recall_chars, compacted.store
            processor = recalling_processor(store, recall) if recall and store is not None else None
            await self.answer(session, key, 'readback', history, probes, compacted.readback, processor)
        if 'no_tools' in conditions:
            await self.answer(session, key, 'no_tools', history, probes, None)

    async def answer(
        self,
        session: str,
        strategy: str,
        condition: Condition,
        history: list[ModelMessage],
        probes: list[AnswerProbe],
        toolset: AbstractToolset[Any] | None,
        processor: HistoryProcessor | None = None,
    ) -> None:
        """The reader's answers to `probes` after `history`, recorded with the errors of those it could not
        answer."""
        timeout = self.settings.reader_timeout
        answers = await answer_all(
            self.reader, history, probes, toolset=toolset, timeout=timeout, processor=processor
        )
        self.answers.append(
            ConditionResult(session=session, strategy=strategy, condition=condition, answers=answers)
        )
        where = f'{session} / {strategy or "full history"} / {CONDITIONS[condition]}'
        self.errors.extend(
            f'{where}: probe {i} was not answered ({a.error})' for i, a in enumerate(answers, 1) if a.error
        )

    async def generated(self, name: str, evicted: Sequence[ModelMessage], kept_text: str) -> list[Probe]:
        model = self.settings.probe_model
        if model is None:
            return []
        evicted_text = context_text(evicted, self.counter)[-_GENERATOR_INPUT_CHARS:]
        try:
            return await generate_probes(
                model, evicted_text, kept_text[-_GENERATOR_INPUT_CHARS:], self.settings.generated_probes
            )
        except Exception as exc:
            self.errors.append(f'{name}: the probe model failed ({type(exc).__name__}: {exc})')
            return []

    async def compacted(
        self, key: str, messages: list[ModelMessage], cut: Cut, total: int, target: int
    ) -> Compacted:
        try:
            if key == 'summary':
                return await summary_strategy(messages, cut, self.summarizer(), total, target)
            if key == 'window':
                return await window_strategy(messages, cut, None)
            return await PEERS[key](messages, cut, self.summarizer())
        except Exception as exc:
            return Compacted(strategy=key, status='failed', note=f'{type(exc).__name__}: {exc}')

    async def score(
        self, session: EvalSession, compacted: Compacted, probes: list[Probe], generated: list[Probe]
    ) -> StrategyResult:
        result = StrategyResult(
            session=session.name, strategy=compacted.strategy, status=compacted.status, note=compacted.note
        )
        if compacted.status != 'ok':
            return result
        context = context_text(compacted.messages, self.counter)
        present = present_share([p.answer for p in probes], context)
        recovered = await recoverable_share(probes, context, compacted.store, compacted.scope)
        result.tokens_before = self.counter.count_messages(session.messages)
        result.tokens_after = self.counter.count_messages(compacted.messages)
        result.tokens_spent = compacted.tokens_spent
        result.facts, result.present, result.recoverable = len(probes), sum(present), sum(recovered)
        result.reachable = sum(a or b for a, b in zip(present, recovered, strict=True))
        result.by_kind = _by_kind(probes, present, recovered)
        if self.settings.answerer is not None and self.settings.judge is not None:
            await self.judge(
                result, context, compacted, _judged(generated, probes, self.settings.judged_probes)
            )
        return result

    async def judge(
        self, result: StrategyResult, context: str, compacted: Compacted, probes: list[Probe]
    ) -> None:
        for probe in probes:
            try:
                answer = await answer_probe(
                    self.settings.answerer, context, probe, compacted.store, compacted.scope
                )
                grades, judge_tokens = await grade_answer(self.settings.judge, probe, answer.text)
            except Exception as exc:
                self.errors.append(
                    f'{result.session} / {result.strategy}: a probe could not be answered or judged '
                    f'({type(exc).__name__}: {exc})'
                )
                continue
            result.grades.append({d: getattr(grades, d) for d in DIMENSIONS})
            result.answer_tokens += answer.tokens
            result.judge_tokens += judge_tokens
            result.read_calls += answer.read_calls


def _by_kind(probes: list[Probe], present: list[bool], recovered: list[bool]) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = {}
    for probe, is_present, is_recovered in zip(probes, present, recovered, strict=True):
        if probe.fact is not None:
            row = counts.setdefault(probe.fact.kind, [0, 0, 0])
            row[0], row[1], row[2] = row[0] + 1, row[1] + is_present, row[2] + is_recovered
    return counts


def _judged(generated: list[Probe], probes: list[Probe], limit: int) -> list[Probe]:
    """The probes to judge: the generated ones first, then an even spread of the deterministic ones."""
    room = max(0, limit - len(generated))
    if len(probes) <= room:
        return [*generated[:limit], *probes]
    step = len(probes) / room if room else 0
    return [*generated[:limit], *(probes[int(i * step)] for i in range(room))]


def _label(model: ModelRef | None, offline: str) -> str:
    if model is None:
        return offline
    return model if isinstance(model, str) else (model_name_of(model) or type(model).__name__)


async def evaluate(
    sessions: Sequence[EvalSession | str | os.PathLike[str]],
    settings: EvalSettings | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> EvalReport:
    """Compact every session at the same cut with every strategy and score what survives.

    `sessions` are `EvalSession`s or paths of saved histories (`ModelMessagesTypeAdapter` JSON, with their
    hand-written probes in `<name>.probes.json` beside them; a probe file given as a session is skipped); one
    that cannot be read is reported in `errors` and skipped. Without models everything runs offline: the
    model-free scores for every strategy, with a scripted summarizer, and the hand-written probes answered by
    the scripted reader. `progress` hears each session's name as it starts.
    """
    settings = settings if settings is not None else EvalSettings()
    sessions = [s for s in sessions if isinstance(s, EvalSession) or not is_probe_file(s)]
    run = _Run(settings)
    report = EvalReport(
        settings={
            'summarizer': _label(settings.summarizer, 'scripted (offline)'),
            'answerer': _label(settings.answerer, 'none'),
            'judge': _label(settings.judge, 'none'),
            'reader': _label(settings.reader, 'the scripted reader (offline)'),
            'reader_offline': settings.reader is None,
            'probe_model': _label(settings.probe_model, 'none'),
            'offline': settings.summarizer is None,
            'keep_fraction': settings.keep_fraction,
            'max_facts': settings.max_facts,
            'judged_probes': settings.judged_probes,
            'strategies': list(settings.strategies),
            'conditions': list(settings.conditions),
            'recall_chars': settings.recall_chars,
            'token_counting': f'{COUNTING_MODEL} (o200k)',
        },
        sessions=[],
        results=[],
        errors=run.errors,
        answers=run.answers,
    )
    for index, item in enumerate(sessions, 1):
        if progress is not None:
            name = item.name if isinstance(item, EvalSession) else os.fspath(item)
            progress(f'[{index}/{len(sessions)}] {name}')
        try:
            session = item if isinstance(item, EvalSession) else load_session(item)
        except SessionError as exc:
            run.errors.append(str(exc))
            continue
        try:
            record, results = await run.session(session)
        except Exception as exc:  # a history our compactor cannot cut: the others still run
            why = f'it could not be compacted ({type(exc).__name__}: {exc})'
            record = SessionResult(name=session.name, messages=len(session.messages), tokens=0, skipped=why)
            results = []
        report.sessions.append(record)
        report.results.extend(results)
    return report


def evaluate_sync(
    sessions: Sequence[EvalSession | str | os.PathLike[str]], settings: EvalSettings | None = None
) -> EvalReport:
    """`evaluate()` for code that is not async."""
    return asyncio.run(evaluate(sessions, settings))
