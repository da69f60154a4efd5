"""A hand-built tool-loop session, long enough to compact, with exact details in its older part."""

from __future__ import annotations

import warnings

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

TASK = 'Fix the failing import in the billing service. You must not change the public API.'
CONSTRAINT = 'Never run the migrations against the production database.'
ERROR = "ModuleNotFoundError: No module named 'billing.tax'"
PATH = 'src/billing/invoice.py'
COMMAND = 'pytest tests/test_invoice.py -x'
INVOICE = 'INV-2024-00917'


def tool_round(call_id: str, tool: str, args: dict[str, object], result: str) -> list[ModelMessage]:
    return [
        ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)]),
        ModelRequest(parts=[ToolReturnPart(tool, result, tool_call_id=call_id)]),
    ]


def filler(index: int) -> list[ModelMessage]:
    """A later round with bulky output that carries none of the facts above."""
    log = '\n'.join(f'line {index}-{n}: the service answered normally' for n in range(60))
    return tool_round(f'call_fill_{index}', 'tail_logs', {'service': 'billing'}, log)


OLDER = 9
"""Messages of `session()` that hold the facts (the recent part holds none of them)."""


def _retry(content: str, tool: str, call_id: str) -> RetryPromptPart:
    with warnings.catch_warnings():  # deprecated on 2.x; saved histories still hold it
        warnings.simplefilter('ignore')
        return RetryPromptPart(content, tool_name=tool, tool_call_id=call_id)


def session() -> list[ModelMessage]:
    """System prompt and task; an older part full of exact details; a long recent part without them."""
    older: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You are a careful engineer.'), UserPromptPart(TASK)]),
        *tool_round('call_1', 'run_shell', {'command': COMMAND}, f'E   {ERROR}\n1 failed in 0.42s'),
        ModelResponse(parts=[ToolCallPart('read_file', {'path': PATH}, tool_call_id='call_2')]),
        ModelRequest(parts=[_retry('the file argument is required', 'read_file', 'call_2')]),
        *tool_round('call_3', 'read_file', {'path': PATH}, f'# invoice {INVOICE}\nTOTAL = 1249.50\n'),
        ModelResponse(parts=[TextPart('The import path is wrong; I will fix it.')]),
        ModelRequest(parts=[UserPromptPart(CONSTRAINT)]),
    ]
    recent = [m for i in range(12) for m in filler(i)]
    return [*older, *recent, ModelRequest(parts=[UserPromptPart('Carry on.')])]
