"""Inspect a saved history with the CLI's own functions: what would the processor do to it?

The same as `pydantic-ai-history inspect FILE --max-tokens 6000 --target-tokens 2000`, from Python:
`inspect_history` runs the processor in dry-run (no LLM calls: a deterministic digest stands in for the
summary) and reports, per message, whether it was kept, summarized, converted, excluded or dropped.

Run: python examples/inspect_saved_history.py [HISTORY.json]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _local import records
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history.cli import count_history, inspect_history, render_count, render_inspect

FIXTURE = (
    Path(__file__).resolve().parents[2] / 'shared/fixtures/conversations/tau_bench_airline_task2_trial1.json'
)


def generated_history() -> Path:
    """A saved history to inspect when no file is given and the shared fixtures are not there."""
    messages = [ModelRequest(parts=[UserPromptPart('Audit the customer pages.')])]
    for page in range(20):
        messages.append(
            ModelResponse(
                parts=[ToolCallPart('lookup', {'page': page}, tool_call_id=f'c{page}')], model_name='gpt-4o'
            )
        )
        messages.append(
            ModelRequest(parts=[ToolReturnPart('lookup', records(page, 10), tool_call_id=f'c{page}')])
        )
    messages.append(ModelResponse(parts=[TextPart('Done.')], model_name='gpt-4o'))
    messages.append(ModelRequest(parts=[UserPromptPart('Which are overdue?')]))
    path = Path(tempfile.mkdtemp()) / 'history.json'
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    return path


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE if FIXTURE.exists() else generated_history()
    print(render_count(count_history(path, model='gpt-4o')))
    print()
    report = inspect_history(path, model='gpt-4o', max_tokens=6_000, target_tokens=2_000)
    print(render_inspect(report))
    print(f'\n{report.tokens_before:,} -> {report.tokens_after:,} tokens; actions: {report.actions}')


if __name__ == '__main__':
    main()
