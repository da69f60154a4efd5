"""The answer-based evaluation: the model under test answers each hand-written probe as a new user turn after
(a) the full history, (b) the compacted history with the strategy's read-back tool, (c) the compacted history
without tools; each answer is right when it holds the expected one (normalised), no judge needed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.toolsets import AbstractToolset

from .._compat import HAS_CAPABILITIES, result_usage
from ..messages._marks import READ_ARTIFACT_TOOL
from ._probe_files import AnswerProbe, is_right

if TYPE_CHECKING:
    from ..processor import HistoryProcessor

Condition = Literal['full', 'readback', 'no_tools']

CONDITIONS: dict[Condition, str] = {
    'full': '(a) full history',
    'readback': '(b) compacted + read_artifact',
    'no_tools': '(c) compacted, no tools',
}
"""Each condition's key and label, in report order."""

READER_INSTRUCTIONS = """\
Answer the user's last question about this conversation, briefly: give the exact value asked for (an id, an \
amount, a file path, a name, a word) and nothing else. If part of the conversation was compacted and a tool \
can read it back, use the tool when the answer is not in front of you. If you cannot know, say so."""

READER_REQUEST_LIMIT = 4
"""Model requests per answer at most (a few read-backs); past it the probe counts as wrong."""
READER_MAX_TOKENS = 256
"""Output tokens per request of an answer at most (`max_tokens`): an exact value or one tool call needs a few
dozen, and a small local model that rambles would otherwise generate until its context is full (minutes at
a few tokens a second) before the reader's timeout ends it."""


@dataclass(kw_only=True)
class ProbeAnswer:
    """One probe answered in one condition."""

    question: str
    """The probe's question."""
    expected: str
    """Its expected answer (other accepted spellings are in the probe file)."""
    reply: str
    """What the model answered (empty when it failed; `error` says why)."""
    right: bool
    """Whether the reply holds the expected answer or an accepted one (normalised)."""
    read_calls: int = 0
    """`read_artifact` calls the model made for it."""
    tokens: int = 0
    """Input plus output tokens of the answering run (the run's usage)."""
    readback_tokens: int = 0
    """Of those, the tokens of the requests after the first: what the read-backs added."""
    error: str = ''
    """Why the model gave no answer (a timeout, a request limit, a provider error)."""


@dataclass(kw_only=True)
class ConditionResult:
    """Every probe of one session answered in one condition (and, for (b) and (c), one strategy)."""

    session: str
    """The session's name."""
    strategy: str
    """The strategy whose compacted history was used; empty for (a), the full history."""
    condition: Condition
    """`full` (a), `readback` (b) or `no_tools` (c)."""
    answers: list[ProbeAnswer] = field(default_factory=list)
    """Each probe's answer, in the probe file's order."""

    @property
    def right(self) -> int:
        """Probes answered right."""
        return sum(a.right for a in self.answers)

    @property
    def read_calls(self) -> int:
        """`read_artifact` calls over every probe."""
        return sum(a.read_calls for a in self.answers)

    @property
    def readback_tokens(self) -> int:
        """Tokens the read-backs added over every probe."""
        return sum(a.readback_tokens for a in self.answers)

    @property
    def tokens(self) -> int:
        """Tokens of every answering run."""
        return sum(a.tokens for a in self.answers)


async def answer_all(
    model: Any,
    history: Sequence[ModelMessage],
    probes: Sequence[AnswerProbe],
    *,
    toolset: AbstractToolset[Any] | None,
    timeout: float,
    processor: HistoryProcessor | None = None,
) -> list[ProbeAnswer]:
    """Each probe asked of `model` after `history`, with `toolset` (the read-back) or no tools, or with
    `processor` as the agent's capability (its recall and read-back)."""
    return [
        await answer_one(model, history, probe, toolset=toolset, timeout=timeout, processor=processor)
        for probe in probes
    ]


async def answer_one(
    model: Any,
    history: Sequence[ModelMessage],
    probe: AnswerProbe,
    *,
    toolset: AbstractToolset[Any] | None,
    timeout: float,
    processor: HistoryProcessor | None = None,
) -> ProbeAnswer:
    """`probe.question` as a new user turn after `history`, answered by `model` and scored; a model that
    fails (a timeout, the request limit) gives a wrong answer with the error."""
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    agent: Any = Agent(model, instructions=READER_INSTRUCTIONS, **_tools(toolset, processor))
    try:
        result = await agent.run(
            probe.question,
            message_history=list(history),
            model_settings={'timeout': timeout, 'max_tokens': READER_MAX_TOKENS},
            usage_limits=UsageLimits(request_limit=READER_REQUEST_LIMIT),
        )
    except Exception as exc:
        return ProbeAnswer(
            question=probe.question, expected=probe.answer, reply='', right=False, error=_error(exc)
        )
    reply = str(result.output)
    new = result.new_messages()
    responses = [m for m in new if isinstance(m, ModelResponse)]
    total = result_usage(result).total_tokens
    return ProbeAnswer(
        question=probe.question,
        expected=probe.answer,
        reply=reply,
        right=is_right(probe, reply),
        read_calls=sum(
            isinstance(p, ToolCallPart) and p.tool_name == READ_ARTIFACT_TOOL for m in new for p in m.parts
        ),
        tokens=total,
        readback_tokens=total - responses[0].usage.total_tokens if len(responses) > 1 else 0,
    )


def _tools(toolset: AbstractToolset[Any] | None, processor: HistoryProcessor | None) -> dict[str, Any]:
    """The agent's keywords for `toolset`, or for `processor`: a capability where pydantic-ai has them, else
    a history processor with its read-back toolset."""
    if processor is None:
        return {'toolsets': [toolset] if toolset else []}
    if HAS_CAPABILITIES:
        return {'capabilities': [processor]}
    return {'history_processors': [processor], 'toolsets': [processor.readback_toolset()]}


def _error(exc: Exception) -> str:
    text = str(exc) or repr(exc)
    return f'{type(exc).__name__}: {text[:300]}'
