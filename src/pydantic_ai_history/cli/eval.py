"""`pydantic-ai-history eval`: the probe evaluation of compaction quality (`pydantic_ai_history.evaluation`).

Sessions given on the command line, else the built-in set (five real conversations that ship with the package,
or the folder `$PYDANTIC_AI_HISTORY_EVAL_SESSIONS` names), each with its hand-written probes where it has a
`<name>.probes.json`. Without models it runs offline with a scripted summarizer and a scripted reader and
prints the model-free scores of every strategy and the probes' accuracy with the full and compacted histories.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..evaluation import (
    CONDITIONS,
    STRATEGIES,
    Condition,
    EvalReport,
    EvalSettings,
    builtin_session_paths,
    evaluate,
)
from ..evaluation._probe_files import is_probe_file
from ..evaluation._strategies import missing_peer
from .common import build_model, fail


def run_eval(
    histories: Sequence[str],
    *,
    summarizer: str | None = None,
    answerer: str | None = None,
    judge: str | None = None,
    probe_model: str | None = None,
    keep_fraction: float = 0.3,
    json_path: str | None = None,
    strategies: str | None = None,
    model: str | None = None,
    probes: int | None = None,
    reader_timeout: float = 600.0,
    conditions: str | None = None,
    recall_chars: int = 0,
) -> EvalReport:
    """Run the evaluation and print its report; a `CliError` when nothing could be evaluated. `strategies`:
    the keys to run, comma-separated (None: every strategy; a peer not installed is then listed as such).
    `model` answers the sessions' hand-written probes (None: the scripted reader, offline); `probes` bounds
    them per session (None: all, 0: none); `reader_timeout` bounds each of its requests, in seconds;
    `conditions` picks (a), (b), (c) by key, comma-separated (None: all); `recall_chars` turns on ours'
    recall in (b)."""
    chosen = parse_strategies(strategies)
    if (answerer is None) != (judge is None):
        fail('--answerer and --judge go together: the judged path needs both')
    if probe_model is not None and answerer is None:
        fail('--probe-model needs --answerer and --judge: generated probes are only judged, never model-free')
    out = Path(json_path) if json_path else None
    if out is not None and not out.parent.exists():
        fail(f'--json {json_path}: the folder {out.parent} does not exist')
    paths: list[Any] = [h for h in histories if not is_probe_file(h)] or builtin_session_paths()
    if not paths:
        fail(
            'no histories given and the folder $PYDANTIC_AI_HISTORY_EVAL_SESSIONS names holds none: '
            'pass saved histories (ModelMessagesTypeAdapter JSON)'
        )
    try:
        settings = EvalSettings(
            summarizer=_model(summarizer),
            answerer=_model(answerer),
            judge=_model(judge),
            probe_model=_model(probe_model),
            keep_fraction=keep_fraction,
            strategies=chosen,
            reader=_model(model),
            answer_probes=probes,
            reader_timeout=reader_timeout,
            conditions=parse_conditions(conditions),
            recall_chars=recall_chars,
        )
    except ValueError as exc:
        fail(str(exc))
    slow = settings.answerer is not None or settings.reader is not None
    report = asyncio.run(evaluate(paths, settings, progress=_progress if slow else None))
    print(report.render())
    if out is not None:
        try:
            out.write_text(report.to_json(), encoding='utf-8')
        except OSError as exc:
            fail(f'--json {json_path}: cannot write ({exc.strerror or exc})')
        print(f'\nreport written to {out}')
    if report.evaluated == 0:
        fail('nothing could be evaluated')
    return report


def parse_strategies(text: str | None) -> tuple[str, ...]:
    """`--strategies a,b`: the keys in the order given, each once; a `CliError` (exit 2) for an unknown key,
    listing the valid ones, or for a peer whose package is not installed, naming the package."""
    if text is None:
        return tuple(STRATEGIES)
    keys = tuple(dict.fromkeys(key.strip() for key in text.split(',') if key.strip()))
    valid = ', '.join(STRATEGIES)
    if not keys:
        fail(f'--strategies names no strategy; valid names: {valid}')
    unknown = [key for key in keys if key not in STRATEGIES]
    if unknown:
        fail(f'--strategies: unknown {", ".join(map(repr, unknown))}; valid names: {valid}')
    missing = {key: package for key in keys if (package := missing_peer(key)) is not None}
    if missing:
        fail(
            '--strategies: '
            + '; '.join(f'{key} needs {package}, which is not installed' for key, package in missing.items())
            + f' (pip install {" ".join(missing.values())})'
        )
    return keys


def parse_conditions(text: str | None) -> tuple[Condition, ...]:
    """`--conditions full,readback`: the conditions in report order; a `CliError` (exit 2) for an unknown one,
    listing the valid ones."""
    if text is None:
        return tuple(CONDITIONS)
    keys = {key.strip() for key in text.split(',') if key.strip()}
    valid = ', '.join(CONDITIONS)
    unknown = sorted(keys - set(CONDITIONS))
    if unknown or not keys:
        fail(f'--conditions: unknown {", ".join(map(repr, unknown)) or "(none given)"}; valid names: {valid}')
    return tuple(key for key in CONDITIONS if key in keys)


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # a judged run makes about a hundred model calls per session


def _model(name: str | None) -> Any:
    return build_model(name) if name else None
