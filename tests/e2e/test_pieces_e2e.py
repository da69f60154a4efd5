"""Everything a request carries is a piece planned against one budget, through a real `Agent` and the
strict provider: a prompt of many paragraphs, thousands of short user texts or prompt parts, hundreds of
images (in the prompt or in tool returns), and a reduced huge prompt followed by thousands of tiny returns.
Each run has 0 rejected requests, every request is valid and needs no pre-send repair, the user's question is
in every request of its run, every call keeps its return, and what was replaced can be read back (images as
images).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from helpers import RecordingStore, check_requests, filler, make_agent
from PIL import Image
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from strategies import needs_repair

from pydantic_ai_history import (
    ContextPolicy,
    HistoryEvent,
    HistoryWarning,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history.events import ArtifactProcessed, StageFailed
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:.*history_processors.*is deprecated'),
]

ART_ID = re.compile(r'art_[0-9a-f]{32}')
QUESTION = 'Which paragraph mentions INVOICE-77731?'


class Events(list[HistoryEvent]):
    def __call__(self, event: HistoryEvent) -> None:
        self.append(event)


def _png(seed: int) -> bytes:
    image = Image.new('RGB', (1024, 1024), (seed % 251, seed * 7 % 251, seed * 13 % 251))
    out = io.BytesIO()
    image.save(out, 'PNG')
    return out.getvalue()


def _answer(messages: list[ModelMessage], info: Any) -> ModelResponse:
    return ModelResponse(parts=[TextPart('Done.')])


async def _run(
    window: int,
    prompt: Any = None,
    *,
    history: list[ModelMessage] | None = None,
    respond: Callable[[list[ModelMessage], Any], ModelResponse] = _answer,
    tools: tuple[Callable[..., Any], ...] = (),
) -> tuple[StrictProvider, Events, RecordingStore, list[ModelMessage]]:
    provider = StrictProvider(respond, context_window=window)
    events = Events()
    store = RecordingStore()
    processor = create_history_processor(
        policy=ContextPolicy(context_window=window), store=store, on_event=events
    )
    agent = make_agent(provider.model(), processor)
    for tool in tools:
        agent.tool_plain(tool)
    result = await agent.run(prompt, message_history=history)
    messages = result.all_messages()
    check_requests(provider)
    assert all(r.input_tokens <= window for r in provider.requests)
    assert not any(needs_repair(r.history) for r in provider.requests)
    assert not [e for e in events if isinstance(e, StageFailed)]
    assert_valid_history(messages, finished=True)
    return provider, events, store, messages


def _user_texts(request: ModelMessage) -> list[str]:
    texts: list[str] = []
    for part in request.parts:
        if isinstance(part, UserPromptPart):
            content = part.content
            texts.extend(
                [content] if isinstance(content, str) else [c for c in content if isinstance(c, str)]
            )
    return texts


def _in_every_request(provider: StrictProvider, text: str) -> bool:
    return all(any(text in t for m in r.history for t in _user_texts(m)) for r in provider.requests)


async def test_a_prompt_of_a_thousand_paragraphs_is_grouped_and_the_question_stays() -> None:
    paragraphs = [filler(400, n * 50) for n in range(1_000)]
    paragraphs[613] += ' INVOICE-77731 was refunded to Josefine Brandt.'
    provider, events, store, _ = await _run(32_000, [*paragraphs, QUESTION])
    assert _in_every_request(provider, QUESTION)  # verbatim, an item of its own
    [group] = [e for e in events if isinstance(e, ArtifactProcessed) and e.strategy == 'group']
    lines = store.puts[group.artifact_id].decode().splitlines()
    assert [json.loads(line)['content'] for line in lines] == paragraphs  # every paragraph, in order
    sent = '\n'.join(_user_texts(provider.requests[0].history[-1]))
    assert 'INVOICE-77731' in sent  # the passage relevant to the question is shown


async def test_twenty_thousand_short_user_texts_fit() -> None:
    texts = [f'note {n}: the {n % 17} light is on in room {n}' for n in range(20_000)]
    provider, _, store, _ = await _run(128_000, [*texts, 'Which rooms have light 3 on?'])
    assert _in_every_request(provider, 'Which rooms have light 3 on?')
    stored = b'\n'.join(store.puts.values()).decode()
    assert all(text in stored for text in texts[::997])


async def test_eight_thousand_user_prompt_parts_become_one_group() -> None:
    parts = [
        UserPromptPart(content=f'message {n}: the value of key-{n} is {n * 7}, checksum {n * 7919 % 100_003}')
        for n in range(8_000)
    ]
    provider, events, store, _ = await _run(128_000, history=[ModelRequest(parts=parts)])
    [request] = provider.requests
    assert len(request.history[-1].parts) < 8_000  # the grouped parts go, the note stands for them
    last = parts[-1].content
    assert _in_every_request(provider, str(last))  # the last thing the user wrote stays as it is
    [group] = [e for e in events if isinstance(e, ArtifactProcessed) and e.strategy == 'group']
    lines = store.puts[group.artifact_id].decode().splitlines()
    assert [json.loads(line)['content'] for line in lines] == [p.content for p in parts[:-1]]


async def test_two_hundred_images_keep_what_fits_and_the_rest_reads_back_as_images() -> None:
    images = [BinaryContent(data=_png(n), media_type='image/png') for n in range(200)]
    reads: list[str] = []

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        if len(messages) == 1:
            sent = '\n'.join(_user_texts(messages[-1]))
            last = ART_ID.findall(sent)[-1]
            reads.append(last)
            return ModelResponse(
                parts=[ToolCallPart('read_artifact', {'artifact_id': last}, tool_call_id='r')]
            )
        return ModelResponse(parts=[TextPart('Done.')])

    provider, events, store, _ = await _run(128_000, ['Describe these.', *images], respond=respond)
    first = provider.requests[0].history[-1]
    kept = [i for p in first.parts if isinstance(p, UserPromptPart) for i in p.content if i in images]
    stubbed = [e for e in events if isinstance(e, ArtifactProcessed) and e.strategy == 'stub']
    assert len(kept) + len(stubbed) == 200
    assert len(kept) >= 100  # the images get the room the short question leaves
    assert kept == images[: len(kept)]  # the first ones, in order
    assert all(
        store.puts[e.artifact_id] == images[200 - len(stubbed) + n].data for n, e in enumerate(stubbed)
    )
    # the model reads the last image back, and receives it as an image
    [read] = reads
    assert read == stubbed[-1].artifact_id
    second = provider.requests[1].history[-1]
    returned = [
        i
        for p in second.parts
        if isinstance(p, UserPromptPart)
        for i in p.content
        if isinstance(i, BinaryContent)
    ]
    assert [i.data for i in returned] == [images[-1].data]
    assert _in_every_request(provider, 'Describe these.')


async def test_forty_tool_returns_with_five_images_each_fit() -> None:
    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart('shots', {'n': n}, tool_call_id=f'c{n}') for n in range(40)]
            )
        return ModelResponse(parts=[TextPart('Done.')])

    def shots(n: int) -> list[Any]:
        return [
            filler(2_000, n),
            *(BinaryContent(data=_png(n * 5 + k), media_type='image/png') for k in range(5)),
        ]

    provider, events, store, messages = await _run(
        128_000, 'Take the shots.', respond=respond, tools=(shots,)
    )
    returns = [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    # every call keeps its return
    assert sorted(p.tool_call_id for p in returns) == sorted(f'c{n}' for n in range(40))
    stubbed = [e for e in events if isinstance(e, ArtifactProcessed) and e.strategy == 'stub']
    assert stubbed
    assert all(store.puts[e.artifact_id].startswith(b'\x89PNG') for e in stubbed)
    assert _in_every_request(provider, 'Take the shots.')


async def test_a_reduced_huge_prompt_leaves_room_for_three_thousand_tiny_returns() -> None:
    prompt = f'{filler(9_000_000)}\n\nSummarize the above, then look up every item.'

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        if len(messages) == 1:
            calls = [ToolCallPart('lookup', {'n': n}, tool_call_id=f'c{n}') for n in range(3_000)]
            return ModelResponse(parts=calls)
        return ModelResponse(parts=[TextPart('Done.')])

    def lookup(n: int) -> str:
        return f'item {n}: status ok, region eu-{n % 7}, v{n}'

    provider, events, _, messages = await _run(128_000, prompt, respond=respond, tools=(lookup,))
    assert len(provider.requests) == 2
    assert [e.code for e in events if isinstance(e, HistoryWarning)].count('user_prompt_reduced') == 1
    returns = [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert len(returns) == 3_000
    assert _in_every_request(provider, 'then look up every item.')
