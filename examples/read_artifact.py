"""Reading back a spilled artifact with the `read_artifact` tool.

A tool returns a 60,000-character log. Before the model ever sees it, the artifact planner keeps the
full original in the store and puts a shortened version (with the artifact id) in the history. The
model can then ask `read_artifact(artifact_id, query=...)` for exactly the part it needs.

Run: python examples/read_artifact.py
"""

from __future__ import annotations

import random
import re

from _local import local_agent_model, local_summarizer, real_model_name, wire
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo

from pydantic_ai_history import ContextPolicy, SummarizerSettings, create_history_processor

NEEDLE = 'ERROR node-17: disk full on /var/lib/postgres (write of 8192 bytes failed)'


def build_log() -> str:
    rng = random.Random(3)
    lines = [
        f'2024-06-14T10:{i // 60 % 60:02d}:{i % 60:02d}Z INFO node-{rng.randint(1, 30)}: '
        f'checkpoint complete, {rng.randint(100, 9_000)} buffers written'
        for i in range(900)
    ]
    lines.insert(613, NEEDLE)
    return '\n'.join(lines)


seen: dict[str, str] = {}


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Fetch the log; find the artifact id in what came back; read back the passage about the disk."""
    last = messages[-1]
    if any(isinstance(p, UserPromptPart) for p in last.parts):
        return ModelResponse(parts=[ToolCallPart('fetch_logs', {'cluster': 'db-prod'})])
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns and returns[0].tool_name == 'fetch_logs':
        shown = str(returns[0].content)
        seen['shown'] = shown
        found = re.search(r'art_[0-9a-f]{16,64}', shown)
        if found and NEEDLE not in shown:
            return ModelResponse(
                parts=[
                    ToolCallPart('read_artifact', {'artifact_id': found.group(), 'query': 'disk full error'})
                ]
            )
        return ModelResponse(
            parts=[
                TextPart(
                    'The log came back whole: ' + ('found the error.' if NEEDLE in shown else 'no error.')
                )
            ]
        )
    if returns and returns[0].tool_name == 'read_artifact':
        seen['read_back'] = str(returns[0].content)
        line = next((x for x in seen['read_back'].splitlines() if 'disk full' in x), 'not found')
        return ModelResponse(parts=[TextPart(f'Root cause, read back from the full log: {line.strip()}')])
    return ModelResponse(parts=[TextPart('Nothing to do.')])


def main() -> None:
    name = real_model_name()
    model = name or local_agent_model(scripted, 16_000)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000, max_tokens=12_000, target_tokens=4_000),
        summarizer=SummarizerSettings(model=name or local_summarizer()),
    )
    agent = Agent(model, **wire(processor))  # the capability (or, on 1.0, the toolset) brings `read_artifact`

    @agent.tool_plain
    def fetch_logs(cluster: str) -> str:
        """The database cluster's log of the last hour."""
        return build_log()

    result = agent.run_sync('Why did the database cluster db-prod fail? Check its logs.')
    shown = seen.get('shown', '')
    print(f'the tool returned {len(build_log()):,} characters; the model saw {len(shown):,}:')
    print('  ' + shown[:300].replace('\n', '\n  ') + ('...' if len(shown) > 300 else ''))
    if 'read_back' in seen:
        print(f'read_artifact returned {len(seen["read_back"]):,} characters, including the error line')
    for event in processor.stats().overall.artifacts_by_strategy.items():
        print(f'artifact strategy: {event[0]} x{event[1]}')
    print(f'answer: {result.output}')


if __name__ == '__main__':
    main()
