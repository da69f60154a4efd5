"""Probes: questions about the evicted part with known answers (deterministic), and optionally more from a
model (continuation and decision probes, Factory's other two kinds)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from ._facts import Fact

ProbeKind = Literal['recall', 'artifact', 'continuation', 'decision']


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One question that needs a detail of the evicted part."""

    kind: ProbeKind
    """Factory's four kinds: recall (a detail), artifact (files and commands), continuation (the next step),
    decision (what was decided and why)."""
    question: str
    """What the answering model is asked (and the query of the one `read_artifact` call)."""
    answer: str
    """The reference answer: the exact fact for deterministic probes, the generator's answer otherwise."""
    fact: Fact | None = field(default=None, compare=False)
    """The fact a deterministic probe asks for; None for a generated probe (it has no model-free score)."""


def fact_probes(facts: Sequence[Fact]) -> list[Probe]:
    """One probe per fact: artifact probes for paths and commands, recall probes for the rest."""
    return [
        Probe(
            kind='artifact' if fact.kind in ('path', 'command') else 'recall',
            question=_question(fact),
            answer=fact.value,
            fact=fact,
        )
        for fact in facts
    ]


def _question(fact: Fact) -> str:
    noun = 'file path' if fact.kind == 'path' else fact.kind
    where = _where(fact.source)
    if fact.kind == 'constraint':
        return (
            f'Earlier in this session, what exactly did the user ask or require{_after(fact.cue)}? Quote it.'
        )
    if fact.kind == 'command':
        return f'Earlier in this session, which exact command was run with {where}? Quote it.'
    return f'Earlier in this session, which exact {noun} appeared in {where}{_after(fact.cue)}? Quote it.'


def _after(cue: str) -> str:
    return f', right after "{cue}"' if cue else ''


def _where(source: str) -> str:
    kind, _, tool = source.partition(':')
    return {
        'user': "the user's message",
        'assistant': "the assistant's reply",
        'tool_call': f'the arguments of a call to the tool `{tool}`',
        'tool_return': f'the result of the tool `{tool}`',
        'retry': f'the error sent back about `{tool}`',
    }.get(kind, source)


class _GeneratedProbe(BaseModel):
    kind: Literal['continuation', 'decision'] = Field(
        description='continuation: the next step, or what remains to do; decision: what was decided, and why'
    )
    question: str = Field(description='the question, answerable only with details from the EARLIER part')
    answer: str = Field(description='the correct answer, from the conversation')


class _GeneratedProbes(BaseModel):
    probes: list[_GeneratedProbe]


GENERATOR_INSTRUCTIONS = """\
You write evaluation probes for a context-compression test. You see the EARLIER part of an agent's \
conversation (which will be compressed) and the RECENT part (kept verbatim). Write questions an agent \
continuing this conversation must answer correctly, that need details from the EARLIER part: \
continuation probes (what is the next step, what remains to do) and decision probes (what was decided, \
and why). Give the correct answer for each, from the conversation."""


async def generate_probes(model: Any, evicted_text: str, kept_text: str, count: int) -> list[Probe]:
    """`count` continuation and decision probes written by `model` from the evicted and kept text."""
    from pydantic_ai import Agent

    agent: Any = Agent(model, output_type=_GeneratedProbes, instructions=GENERATOR_INSTRUCTIONS)
    prompt = (
        f'Write {count} probes, about half of each kind.\n\n<earlier>\n{evicted_text}\n</earlier>\n\n'
        f'<recent>\n{kept_text}\n</recent>'
    )
    result = await agent.run(prompt)
    return [Probe(kind=p.kind, question=p.question, answer=p.answer) for p in result.output.probes[:count]]
