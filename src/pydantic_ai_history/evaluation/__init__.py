"""Probe-based evaluation of what a compaction keeps (Factory, "Evaluating Context Compression for AI
Agents", December 2025), for our compactor, the sliding window alone, and the peers where installed.

`evaluate(sessions, EvalSettings(...))` cuts each saved session so about `keep_fraction` stays verbatim,
compacts the same cut with every strategy, and scores what survives: always, model-free, the share of exact
facts of the evicted part in the compacted context and the share one `read_artifact(query=...)` recovers;
with an answering and a judge model, each probe's answer graded 0-5 on six dimensions. Sessions with
hand-written probes (`<name>.probes.json`: questions whose answers are in the compacted part) also have them
answered from the full history (a), the compacted one with `read_artifact` (b) and without tools (c), scored
by the expected answer, no judge needed. `pydantic-ai-history eval` is the command line for it.
"""

from __future__ import annotations

from ._answers import CONDITIONS, Condition, ConditionResult, ProbeAnswer
from ._facts import Fact, FactKind, extract_facts, select_facts
from ._judge import DIMENSIONS, Grades
from ._probe_files import AnswerProbe, ProbeFileError, is_right, load_probes, probes_path
from ._probes import Probe, ProbeKind, fact_probes
from ._reader import scripted_reader
from ._report import AnswerRow, EvalReport, SessionResult, StrategyResult, StrategySummary
from ._run import EvalSettings, evaluate, evaluate_sync
from ._scores import present_share, recoverable_share
from ._scripted import scripted_summarizer
from ._sessions import (
    EvalSession,
    SessionError,
    builtin_session_paths,
    load_session,
    session_from_messages,
)
from ._strategies import STRATEGIES, Compacted, Cut, SessionCut, session_cut
from ._text import context_text, normalize, normalize_answer

__all__ = (
    'CONDITIONS',
    'DIMENSIONS',
    'STRATEGIES',
    'AnswerProbe',
    'AnswerRow',
    'Compacted',
    'Condition',
    'ConditionResult',
    'Cut',
    'EvalReport',
    'EvalSession',
    'EvalSettings',
    'Fact',
    'FactKind',
    'Grades',
    'Probe',
    'ProbeAnswer',
    'ProbeFileError',
    'ProbeKind',
    'SessionCut',
    'SessionError',
    'SessionResult',
    'StrategyResult',
    'StrategySummary',
    'builtin_session_paths',
    'context_text',
    'evaluate',
    'evaluate_sync',
    'extract_facts',
    'fact_probes',
    'is_right',
    'load_probes',
    'load_session',
    'normalize',
    'normalize_answer',
    'present_share',
    'probes_path',
    'recoverable_share',
    'scripted_reader',
    'scripted_summarizer',
    'select_facts',
    'session_cut',
    'session_from_messages',
)
