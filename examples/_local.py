"""Shared by the examples: pick a real model when its API key is set, else local scripted models.

Set `OPENAI_API_KEY` (and optionally `EXAMPLE_MODEL`, default `openai:gpt-4o-mini`) to run an example
against a real provider; without it every example runs offline, with `FunctionModel`s standing in.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history.testing import StrictProvider


def real_model_name() -> str | None:
    """`provider:name` of the real model to use, or None to run offline."""
    if os.environ.get('OPENAI_API_KEY'):
        return os.environ.get('EXAMPLE_MODEL', 'openai:gpt-4o-mini')
    return None


def tool_loop(tool: str, args: Callable[[int], dict[str, Any]], rounds: int) -> Callable[..., ModelResponse]:
    """A scripted agent: on each user turn, call `tool` `rounds` times, then answer."""
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # a new user turn starts a new loop; framework notes framed as `<system>` (a tool made available
        # mid-run, on 2.x) are not user turns
        if any(
            isinstance(p, UserPromptPart) and not str(p.content).startswith('<system>')
            for p in messages[-1].parts
        ):
            state['step'] = 0
        state['step'] += 1
        if state['step'] <= rounds:
            return ModelResponse(parts=[ToolCallPart(tool, args(state['step']))])
        return ModelResponse(parts=[TextPart(f'Done: called {tool} {rounds} times and checked the results.')])

    return respond


def local_agent_model(respond: Callable[..., ModelResponse], context_window: int) -> FunctionModel:
    """A `FunctionModel` behind a strict simulated provider: it rejects any request over `context_window`."""
    return StrictProvider(respond, context_window=context_window).model()


def _text(messages: list[ModelMessage]) -> str:
    return '\n'.join(str(getattr(p, 'content', '')) for m in messages for p in m.parts)


def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A local summarizer: a short structured summary of what the prompt mentions."""
    text = _text(messages)
    tools = sorted(set(re.findall(r'\b(lookup_\w+|fetch_\w+)\b', text)))
    return ModelResponse(
        parts=[
            TextPart(
                '## Goal\n- the user task from the first message\n'
                f'## Progress\n- tools used: {", ".join(tools) or "none"}\n'
                f'- {text.count("record")} records reviewed\n'
                '## Open items\n- continue from the latest messages'
            )
        ]
    )


def local_summarizer() -> FunctionModel:
    return FunctionModel(summarize, model_name='local-summarizer')


def records(seed: int, count: int) -> str:
    """Realistic filler for tool outputs: one customer record per line."""
    rng = random.Random(seed)
    cities = ('Berlin', 'Lyon', 'Osaka', 'Austin', 'Porto', '深圳')
    return '\n'.join(
        f'record {seed}-{i}: customer C{rng.randint(1000, 9999)} in {rng.choice(cities)}, '
        f'balance {rng.uniform(-500, 5000):.2f} EUR, last order {rng.randint(1, 28):02d}.05.2024, '
        f'status {rng.choice(("active", "dormant", "overdue", "closed"))}'
        for i in range(count)
    )


def wire(processor: Any) -> dict[str, Any]:
    """`Agent(...)` keyword arguments that install `processor` on this pydantic-ai version."""
    try:
        from pydantic_ai.capabilities import ProcessHistory  # noqa: F401
    except ImportError:  # pydantic-ai 1.0
        return {'history_processors': [processor], 'toolsets': [processor.readback_toolset()]}
    return {'capabilities': [processor]}
