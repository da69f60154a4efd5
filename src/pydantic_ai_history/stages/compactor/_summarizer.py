"""The LLM summarizer: a plain pydantic-ai `Agent` run per call, chunked when the transcript is too long.

Over the input cap the transcript is split at unit (then record, then body) boundaries and each call updates
the running summary with the next chunk, so every token is seen and nothing is cut off.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...budget.model_info import model_info
from ...context._context import StageOperations
from ...context._llm import answer_max_tokens
from ...context._summarizer_settings import SummarizerSettings
from ...tokens import TokenCounter
from .._transcript import TranscriptUnit, new_nonce, record_body, split_record
from ._prompt import DEFAULT_INSTRUCTIONS, build_prompt
from ._settings import CompactionSettings

logger = logging.getLogger('pydantic_ai_history.compactor')

_PROMPT_FRAMING_TOKENS = 200
"""Room for the prompt's tags and closing line."""

_RECORD_FRAMING_TOKENS = 40
"""Room for a record's tags (role, tool name, part number) around a piece of its body."""


class SummarizerError(Exception):
    """The summarizer failed (raised, timed out, answered empty or too long) after `calls` calls."""

    def __init__(self, reason: str, calls: int, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.calls = calls
        self.timed_out = timed_out
        """Whether the call ran out of `SummarizerSettings.timeout` (the message names the setting)."""


@dataclass(frozen=True)
class SummarizerOutcome:
    text: str
    calls: int


def chunk_transcript(
    units: Sequence[TranscriptUnit], available: int, counter: TokenCounter
) -> list[list[TranscriptUnit | str]]:
    """Pack units in order into chunks of at most `available` tokens, joined only per call (so a long
    transcript is never held twice). Oversized units split between records, records between body pieces
    (marked `part="i/n"`)."""
    packer = _Packer(available)
    for unit in units:
        if unit.tokens <= available:
            packer.add(unit, unit.tokens)
        elif not unit.nonce:  # not a rendering of records: only a cut can make it fit
            packer.add(counter.truncate_text(unit.text, available, head_fraction=0.5), available)
        else:
            for record, tokens in unit.record_texts(counter):
                if tokens <= available:
                    packer.add(record, tokens)
                else:
                    packer.add_split(record, counter)
    return packer.finish()


@dataclass
class _Packer:
    available: int
    chunks: list[list[TranscriptUnit | str]] = field(default_factory=list)
    current: list[TranscriptUnit | str] = field(default_factory=list)
    used: int = 0

    def add(self, text: TranscriptUnit | str, tokens: int) -> None:
        if self.current and self.used + tokens > self.available:
            self.chunks.append(self.current)
            self.current, self.used = [], 0
        self.current.append(text)
        self.used += tokens

    def add_split(self, record: str, counter: TokenCounter) -> None:
        room = self.available - self.used - _RECORD_FRAMING_TOKENS
        size = self.available - _RECORD_FRAMING_TOKENS
        body = counter.split_text(record_body(record), size, first_max_tokens=room if room >= 1_000 else None)
        for piece in split_record(record, body):
            self.add(piece, counter.count_text(piece))

    def finish(self) -> list[list[TranscriptUnit | str]]:
        if self.current:
            self.chunks.append(self.current)
        return self.chunks


def _fixed_tokens(
    counter: TokenCounter, settings: CompactionSettings, texts: tuple[str, str | None, str | None, str | None]
) -> int:
    """What every call's prompt holds besides the transcript: the instructions, the task, the previous summary
    (room for the summary it becomes), the focus and the framing."""
    instructions, task, previous_summary, focus = texts
    return (
        counter.count_text(instructions)
        + (min(counter.count_text(task), settings.task_max_tokens) if task else 0)
        + max(counter.count_text(previous_summary or ''), settings.summary_max_tokens)
        + (counter.count_text(focus) if focus else 0)
        + _PROMPT_FRAMING_TOKENS
    )


async def run_summarizer(
    *,
    model: Any,
    settings: CompactionSettings,
    summarizer: SummarizerSettings,
    counter: TokenCounter,
    transcript: Sequence[TranscriptUnit],
    original_task: str | None,
    previous_summary: str | None,
    focus: str | None,
    operations: StageOperations,
) -> SummarizerOutcome:
    """Raises `SummarizerError` on any failure."""
    if model is None:
        raise SummarizerError(
            'no summarizer model: the run has no model and SummarizerSettings.model is not set', 0
        )
    instructions = summarizer.instructions or DEFAULT_INSTRUCTIONS
    cap = settings.summary_max_tokens
    task = counter.truncate_text(original_task, settings.task_max_tokens) if original_task else None
    input_cap = summarizer.input_cap(model_info(model).context_window, answer_tokens=cap)
    fixed = _fixed_tokens(counter, settings, (instructions, task, previous_summary, focus))
    available = max(input_cap - fixed, 1_000)
    chunks: list[list[TranscriptUnit | str]] = chunk_transcript(transcript, available, counter) or [
        ['(no messages)']
    ]
    if len(chunks) > 1:
        logger.info(
            'compactor: transcript over the summarizer input cap (%d tokens): %d chunks',
            available,
            len(chunks),
        )
    summary = previous_summary
    calls = 0
    for number, chunk in enumerate(chunks, start=1):
        prompt = build_prompt(
            transcript='\n\n'.join(item if isinstance(item, str) else item.text for item in chunk),
            nonce=(transcript[0].nonce if transcript else '') or new_nonce(),
            original_task=task,
            previous_summary=summary,
            focus=focus,
            max_tokens=cap,
            part=number,
            parts=len(chunks),
        )
        calls += 1
        try:
            output = await operations.request_text(
                'compaction_summary' if number == 1 else 'chunk_merge',
                prompt,
                model=model,
                instructions=instructions,
                timeout=summarizer.timeout,
                max_tokens=answer_max_tokens(cap),
            )
        except TimeoutError as exc:
            reason = str(exc) or f'timed out (SummarizerSettings.timeout={summarizer.timeout!r})'
            raise SummarizerError(reason, calls, timed_out=True) from None
        except Exception as exc:
            raise SummarizerError(f'{type(exc).__name__}: {exc}', calls) from exc
        text = output.strip() if isinstance(output, str) else ''
        if not text:
            raise SummarizerError('empty summary', calls)
        size = counter.count_text(text)
        if size > cap:
            raise SummarizerError(f'oversized summary: {size:,} tokens over the cap of {cap:,}', calls)
        summary = text
    assert summary is not None
    return SummarizerOutcome(summary, calls)
