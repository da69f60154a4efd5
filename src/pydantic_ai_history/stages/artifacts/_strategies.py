"""The strategies as text: what replaces an artifact's content, and the summarizer call behind `summarize`."""

from __future__ import annotations

from typing import Any

from ...context._context import ARTIFACT_MARKER, StageOperations
from ...context._llm import answer_max_tokens
from ...context._summarizer_settings import Timeout
from ...messages._marks import readback_tool
from ...tokens import TokenCounter
from .._request_fit import passages_within, showing_passages
from ._extract import Candidate

SUMMARY_INSTRUCTIONS = (
    'You summarize one tool output or document so that an AI assistant can keep working without it. '
    'Keep every identifier, name, number, date, URL, error message and conclusion the focus needs, verbatim. '
    'Drop boilerplate and repetition. Write plain text or compact markdown; do not add commentary.'
)


def _headed(candidate: Candidate, what: str, body: str = '') -> str:
    """`body` under the line naming the stored original: what it stands for, `what` it is, how to read it (the
    id once, in the call: every token of the line is re-read by every later request)."""
    a = candidate.artifact
    read = f"read the original with {readback_tool()}(artifact_id='{candidate.id}', offset=0, query=...)"
    described = f'{a.source}, {a.chars:,} characters, ~{a.tokens:,} tokens'
    return f'{ARTIFACT_MARKER} of {described} | {what} | {read}]\n{body}'


def reduced_text(candidate: Candidate) -> str:
    """A reducer's output, headed by what it stands for."""
    return _headed(candidate, f'reduced by the {candidate.reduced_by} reducer', candidate.text)


def extract_text(
    candidate: Candidate, query: str, max_tokens: int, counter: TokenCounter, *, chunk_chars: int
) -> str:
    """The chunks most relevant to `query` with their position markers, within `max_tokens` (corrected)."""
    head = _headed(candidate, showing_passages(query))
    return passages_within(candidate.text, head, query, max_tokens, counter, chunk_chars=chunk_chars)


def repeat_text(candidate: Candidate) -> str:
    """What stands for a return whose view an earlier return of the same content already shows. Worded to stay
    true once a compaction or the window drops that return: the line is kept, the return may not be. It leaves
    out the size `_headed` gives (about 15 tokens): every later request re-reads the line, and the earlier
    return already says it."""
    a = candidate.artifact
    return (
        f'{ARTIFACT_MARKER} of {a.source}: the same content as an earlier return, shown the same way | '
        f"{readback_tool()}(artifact_id='{candidate.id}') reads it if that return is no longer shown]\n"
    )


def summary_text(candidate: Candidate, summary: str, focus: str | None) -> str:
    focus_note = f' (focus: {" ".join(focus.split())[:200]!r})' if focus else ''
    return _headed(candidate, f'summary{focus_note}', summary)


def exclude_stub(candidate: Candidate, preview_chars: int) -> str:
    """What an excluded artifact leaves behind: what it was, a one-line preview, and how to get it back."""
    a = candidate.artifact
    preview = ' '.join(candidate.text[: preview_chars * 4].split())[:preview_chars]
    return (
        f'{ARTIFACT_MARKER} {a.id} removed to save context]\n'
        f'source: {a.source} (message {a.step}), {a.chars:,} characters, ~{a.tokens:,} tokens, '
        f'{a.media_type}\n'
        f'preview: {preview}{"..." if len(candidate.text) > len(preview) else ""}\n'
        f"To read it: {readback_tool()}(artifact_id='{a.id}', offset=0, limit=20000) for a slice, or "
        f"{readback_tool()}(artifact_id='{a.id}', query='...') for the passages relevant to a question."
    )


async def summarize_text(
    text: str,
    *,
    focus: str | None,
    model: Any,
    max_tokens: int,
    timeout: Timeout,
    operations: StageOperations,
) -> str:
    """One summarizer call; raises on failure (the caller falls back to `extract`)."""
    prompt = (
        f'Focus on: {focus}\n' if focus else ''
    ) + f'Write at most about {max_tokens} tokens.\n\n<content>\n{text}\n</content>'
    output = await operations.request_text(
        'artifact_summary',
        prompt,
        model=model,
        instructions=SUMMARY_INSTRUCTIONS,
        timeout=timeout,
        max_tokens=answer_max_tokens(max_tokens),
    )
    summary = output.strip()
    if not summary:
        raise ValueError('the summarizer returned an empty summary')
    return summary
