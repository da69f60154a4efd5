"""The judged path: a model answers each probe from the compacted context (with `read_artifact` where the
strategy has a store) and a judge grades the answer 0-5 on Factory's six dimensions (structured output)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai.messages import ToolCallPart

from .._compat import result_usage
from ..readback import READ_ARTIFACT_TOOL, ReadbackGate, readback_toolset
from ..store import ArtifactStore
from ._probes import Probe

DIMENSIONS = (
    'accuracy',
    'context_awareness',
    'artifact_trail',
    'completeness',
    'continuity',
    'instruction_following',
)
"""Factory's six dimensions ("Evaluating Context Compression for AI Agents", December 2025)."""


class Grades(BaseModel):
    """The judge's grades of one answer, each 0 (wrong or missing) to 5 (fully right)."""

    accuracy: int = Field(ge=0, le=5, description='factual correctness against the reference answer')
    context_awareness: int = Field(ge=0, le=5, description='uses the state of the conversation correctly')
    artifact_trail: int = Field(ge=0, le=5, description='files, commands, ids and outputs named correctly')
    completeness: int = Field(ge=0, le=5, description='answers every part of the question')
    continuity: int = Field(ge=0, le=5, description='could the agent carry on the work from this answer')
    instruction_following: int = Field(ge=0, le=5, description="respects the user's constraints and format")
    rationale: str = Field(default='', description='one sentence: why these grades')

    def overall(self) -> float:
        """The mean of the six grades."""
        return sum(int(getattr(self, d)) for d in DIMENSIONS) / len(DIMENSIONS)


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One answer and what it cost."""

    text: str
    """The answering model's answer (or the error that stopped it)."""
    tokens: int
    """Input plus output tokens of the answering run."""
    read_calls: int
    """How many times it called `read_artifact`."""


ANSWER_REQUEST_LIMIT = 5
"""Model requests per answer at most (a few `read_artifact` calls); past it the probe counts as unanswered."""

ANSWER_INSTRUCTIONS = """\
You are an agent resuming a task. Your conversation so far is given below; its older part may have been \
compacted into a summary, and a summary may name a stored transcript you can read with the read_artifact \
tool. Answer the question precisely, quoting exact values (paths, ids, numbers, errors) where asked. \
If you cannot know, say so."""

JUDGE_INSTRUCTIONS = """\
You grade an agent's answer to a probe about its own earlier conversation, against the reference answer. \
Grade each dimension from 0 (wrong or missing) to 5 (fully right): accuracy, context_awareness, \
artifact_trail, completeness, continuity, instruction_following. An answer that says it cannot know gets \
low accuracy and completeness but is not penalised on instruction_following."""


async def answer_probe(
    model: Any, context: str, probe: Probe, store: ArtifactStore | None, scope: str
) -> Answer:
    """`model`'s answer to `probe` from the compacted `context`, with `read_artifact` on `store` if any."""
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    toolsets = []
    if store is not None:
        # offered from the first request: the context is in the prompt, not in the history the gate reads
        gate = ReadbackGate(predict=lambda ctx, messages: True)
        toolsets.append(readback_toolset(store, scope=lambda ctx: scope, gate=gate))
    agent: Any = Agent(model, instructions=ANSWER_INSTRUCTIONS, toolsets=toolsets)
    prompt = f'<conversation>\n{context}\n</conversation>\n\nQuestion: {probe.question}'
    result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=ANSWER_REQUEST_LIMIT))
    parts = [part for message in result.all_messages() for part in message.parts]
    calls = sum(isinstance(part, ToolCallPart) and part.tool_name == READ_ARTIFACT_TOOL for part in parts)
    return Answer(text=str(result.output), tokens=result_usage(result).total_tokens, read_calls=calls)


async def grade_answer(model: Any, probe: Probe, answer: str) -> tuple[Grades, int]:
    """The judge's grades of `answer` to `probe`, and the tokens the judge spent."""
    from pydantic_ai import Agent

    agent: Any = Agent(model, output_type=Grades, instructions=JUDGE_INSTRUCTIONS)
    prompt = (
        f'Probe kind: {probe.kind}\nQuestion: {probe.question}\nReference answer: {probe.answer}\n'
        f'Agent answer: {answer}'
    )
    result = await agent.run(prompt)
    return result.output, result_usage(result).total_tokens
