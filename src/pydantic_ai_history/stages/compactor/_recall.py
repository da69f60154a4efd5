"""Recall (`CompactionSettings.recall_chars`): a new question asked after a compaction gets, in its own
request, the stored passages that best match it, so a model that never calls `read_artifact` still sees what
the question is about.

The decisions are pure (`recall_question`, `with_recall`); the one effect is the search of the store, a
durable operation under a durable engine. Only the newest request changes, and only when it starts a run: it
was never sent, so no cached prefix is rewritten, and it carries the passages from then on (a later request
finds them there and searches no more).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from ...context._context import HistoryContext
from ...events import PassagesRecalled
from ...messages._marks import (
    OPENINGS,
    SEAL_TOKENS,
    part_kinds,
    readback_tool,
    seal,
)
from ...pipeline._operations import RunOperations
from .._request_fit import latest_question
from .._transcript import named_transcripts

logger = logging.getLogger('pydantic_ai_history.compactor')

MIN_ROOM_TOKENS = 200
"""Below this room under the trigger nothing is recalled: a passage or two would not fit."""
_REPLACED = frozenset({'summary', 'window', 'artifact'})
"""The kinds of our parts that stand for stored content: a summary, a window note, a stub."""
CHARS_PER_ROOM_TOKEN = 2
"""The search is asked for at most this many characters per token of room (text runs 3-4 characters a
token, CJK about 1): the answer is counted, and dropped when it does not fit."""


def recall_question(messages: Sequence[ModelMessage]) -> str | None:
    """The question to recall passages for: the user's text in the newest request when that request starts a
    run with a question of the user's own, holds no recall yet, and earlier content was replaced (a summary,
    window note or stub of ours stands before it); else None."""
    newest = messages[-1] if messages else None
    if not isinstance(newest, ModelRequest):
        return None
    kinds = part_kinds(newest)
    asked = (isinstance(p, UserPromptPart) and k is None for p, k in zip(newest.parts, kinds, strict=True))
    if 'recall' in kinds or not any(asked):
        return None
    question = latest_question([newest])
    if not question.strip():
        return None
    # by part: pydantic-ai merges a saved history's head with our summary request when a run starts on it
    replaced = any(
        kind in _REPLACED
        for message in messages[:-1]
        if isinstance(message, ModelRequest)
        for kind in part_kinds(message)
    )
    return question if replaced else None


def with_recall(request: ModelRequest, text: str) -> ModelRequest:
    """`request` with a part holding `text` just before its last user prompt of the user's own (the question
    stays last: what the model answers). The request is the user's, so it records no layout of ours."""
    kinds = part_kinds(request)
    at = max(
        i
        for i, (part, kind) in enumerate(zip(request.parts, kinds, strict=True))
        if isinstance(part, UserPromptPart) and kind is None
    )
    return dataclasses.replace(
        request, parts=[*request.parts[:at], UserPromptPart(content=text), *request.parts[at:]]
    )


async def recall(messages: list[ModelMessage], context: HistoryContext, chars: int) -> list[ModelMessage]:
    """`messages` with the stored passages matching the newest request's question in that request, at most
    `chars` characters and within the room under the trigger; `messages` themselves when there is no new
    question after a compaction, no room, or no stored passage matches."""
    question = recall_question(messages)
    if question is None:
        return messages
    room = context.limits.trigger - context.estimate(messages).total - SEAL_TOKENS
    if room < MIN_ROOM_TOKENS:
        logger.info('recall: %d tokens of room under the trigger; no passages recalled', room)
        return messages
    passages = await _search(context, question, min(chars, room * CHARS_PER_ROOM_TOKEN))
    if passages is None:
        return messages
    text = seal('recall', passages)  # under their opening line, `OPENINGS['recall']`
    tokens = context.counter.count_text(text)
    if tokens > room:
        logger.info('recall: the passages (%d tokens) do not fit the room (%d); none recalled', tokens, room)
        return messages
    artifacts = tuple(dict.fromkeys(named_transcripts(passages)))
    context.emit_event(PassagesRecalled(run_id=context.run_id, artifacts=artifacts, tokens_added=tokens))
    newest = messages[-1]
    assert isinstance(newest, ModelRequest)  # `recall_question` found a question there
    return [*messages[:-1], with_recall(newest, text)]


async def _search(context: HistoryContext, question: str, limit: int) -> str | None:
    """The stored passages of the run's scope that match `question`: a durable operation within a durable
    run, else a search of the store in place."""
    opening = OPENINGS['recall']
    if isinstance(context.operations, RunOperations):
        return await context.operations.search_store(question, limit, opening=opening, scope=context.scope)
    if context.store is None:
        return None
    from ...readback import recall_passages  # loaded by the first recall, not with the package

    return await recall_passages(
        context.store, question, limit, opening=opening, scope=context.scope, tool_name=readback_tool()
    )
