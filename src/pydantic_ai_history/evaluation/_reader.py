"""The scripted reader: the offline stand-in for a model answering probes (no network, no judgement).

A cautious reader: it answers from the text it is sent, with the passage that shares the most words with the
question; when no passage shares enough and `read_artifact` is offered, it reads back once with the question
as query and answers from what came back. It never sees an expected answer: only the messages. Its
accuracy checks the plumbing (what each history holds, whether the read-back works), not a model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..messages._marks import READ_ARTIFACT_TOOL
from ..stages._transcript import content_text, named_transcripts

PASSAGE_CHARS = 160
"""A passage is a line, or a run of a long line's comma-separated pieces, of about this many characters."""
ENOUGH_SHARE = 0.5
"""A passage answers when it matches at least this share of the question (its words, weighted by rarity)."""
UNKNOWN = 'I cannot tell from this conversation.'
"""The reader's reply when no passage shares a word with the question."""

_WORD = re.compile(r'[a-z0-9]+')
_STOPWORD_TEXT = (
    'a an and any are as at be by did do does for from had has have how in is it its much many of on or '
    'so that the their them then this to was we were what when where which who whom why with you your'
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_MARKUP = re.compile(r'</?msg[^>]*>')
_PIECE = re.compile(r'(?<=[,;])\s+|(?<=\.)\s+(?=[A-Z])')


def scripted_reader() -> Any:
    """The offline answering model: `read_and_answer` as a `FunctionModel`."""
    from pydantic_ai.models.function import FunctionModel

    return FunctionModel(read_and_answer, model_name='scripted-reader')


def words(text: str) -> frozenset[str]:
    """The content words of `text`: lower-cased, a plural's `s` dropped, stop words and single characters
    left out."""
    found = (w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOPWORDS)
    return frozenset(w[:-1] if len(w) > 3 and w.endswith('s') and not w.endswith('ss') else w for w in found)


def passages(text: str) -> list[str]:
    """`text` in passages: its lines, a long line cut after commas into runs of about `PASSAGE_CHARS`; lines
    of markup alone (`<msg ...>`, `</msg>`) are left out."""
    found: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or _MARKUP.fullmatch(line):
            continue
        if len(line) <= PASSAGE_CHARS:
            found.append(line)
            continue
        run = ''
        for piece in _PIECE.split(line):
            if run and len(run) + len(piece) > PASSAGE_CHARS:
                found.append(run)
                run = ''
            run = f'{run} {piece}' if run else piece
        found.extend([run] if run else [])
    return found


def best_passage(question: str, text: str) -> tuple[str, float]:
    """The passage of `text` that best matches `question` (the shorter on a tie), and the share of the
    question it matches: each question word weighs more the fewer passages hold it (a word no passage holds
    weighs most), and a passage scores the weights of the question words it holds."""
    asked = words(question)
    found = passages(text)
    bags = [words(passage) & asked for passage in found]
    held = Counter(word for bag in bags for word in bag)
    weight = {word: math.log(1 + len(found) / max(held[word], 1)) for word in asked}
    total = sum(weight.values())
    best, score = '', 0.0
    for passage, bag in zip(found, bags, strict=True):
        value = sum(weight[word] for word in bag)
        if value > score or (value == score and value and len(passage) < len(best)):
            best, score = passage, value
    return best, score / total if total else 0.0


def enough(share: float) -> bool:
    """Whether a passage matching `share` of the question is worth answering from."""
    return share >= ENOUGH_SHARE


def read_and_answer(messages: list[ModelMessage], info: Any) -> ModelResponse:
    """The reader's reply to the last question: from a read-back if it made one, else from what it sees,
    else a `read_artifact(query=<question>)` call when offered and nothing visible shares enough words."""
    question, seen, read = _split(messages)
    if read is not None:
        return _reply(best_passage(question, read)[0] or UNKNOWN)
    passage, share = best_passage(question, seen)
    offered = any(tool.name == READ_ARTIFACT_TOOL for tool in info.function_tools)
    if offered and not enough(share):
        ids = named_transcripts(seen)
        args: dict[str, Any] = {'query': question}
        if ids:
            args['artifact_id'] = ids[0]
        return ModelResponse(parts=[ToolCallPart(READ_ARTIFACT_TOOL, args, tool_call_id='read_back_1')])
    return _reply(passage or UNKNOWN)


def _reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], model_name='scripted-reader')


def _split(messages: Sequence[ModelMessage]) -> tuple[str, str, str | None]:
    """The question (the last user prompt), the text of everything else, and the read-back's text if any."""
    parts = [part for message in messages for part in message.parts]
    prompts = [i for i, part in enumerate(parts) if isinstance(part, UserPromptPart)]
    asked = prompts[-1] if prompts else -1
    question = _text_of(parts[asked]) if prompts else ''
    reads = [
        content_text(part.content)
        for part in parts[asked + 1 :]
        if isinstance(part, ToolReturnPart) and part.tool_name == READ_ARTIFACT_TOOL
    ]
    seen = [_text_of(part) for part in parts[: max(asked, 0)]]
    return question, '\n'.join(t for t in seen if t), reads[-1] if reads else None


def _text_of(part: object) -> str:
    if isinstance(part, ToolCallPart):
        return content_text(part.args)
    return content_text(getattr(part, 'content', None))
