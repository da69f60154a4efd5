"""An app that saves a conversation in one process and continues it in another (test_reliability_restart).

`python _restart_app.py first|second <scenario> <store dir> <history.json> <report.json>`

- `first` runs a conversation that makes every kind of note the package writes (an attached file's text, a
  stubbed tool output, a compaction's summary, its pinned section and transcript reference; or, in the
  `window` scenario, a window note) and saves `all_messages()` to `history.json`.
- `second` loads it in a new process with the same `DirectoryStore`, says which parts it recognises as the
  package's, and continues the conversation: the model reads the old transcript back with the read-back tool,
  then works on until the history is compacted (or windowed) again.

Each writes a JSON report: the kinds of parts it recognises as the package's (by message and part index),
the summarizer's prompts, and what the read-back tool returned. The test compares the two processes' reports.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from pydantic_ai_history import ContextPolicy, HistoryProcessor, SummarizerSettings
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.messages._marks import part_kinds, seal_key_scope, sealed_kind
from pydantic_ai_history.messages.pinning import pin_tool_errors
from pydantic_ai_history.stages.artifacts import ArtifactSettings
from pydantic_ai_history.stages.compactor import CompactionSettings
from pydantic_ai_history.store import DirectoryStore

SCOPE = 'conversation-42'
WINDOW, TRIGGER, TARGET = 8_000, 4_500, 1_800
TRANSCRIPT_ID = re.compile(r'read_artifact\(artifact_id="(art_[0-9a-f]{32})"')
LEDGER = 'row,amount,memo\n' + '\n'.join(f'{i},{i * 37 % 1000},LEDGER-{i:04d}' for i in range(1_500))


def page(n: int) -> str:
    body = ' '.join(
        f'line {n}.{i}: the service answered in {i * 7 % 90} ms from region {i % 5}.' for i in range(90)
    )
    return f'PAGE-{n} FACT-{n}-{n * 13 % 97}\n{body}'


class Script:
    """The main model: `calls` tool calls one per response, then an answer."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.calls = calls
        self.step = 0
        self.read_back: dict[str, str] = {}
        """What the read-back tool returned, by call id, as the model received it."""
        self.__name__ = 'script'

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == 'read_artifact':
                self.read_back[part.tool_call_id] = str(part.content)
        step, self.step = self.step, self.step + 1
        if step >= len(self.calls):
            return ModelResponse(parts=[TextPart('Done.')], usage=RequestUsage(input_tokens=1))
        tool, args = self.calls[step]
        return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=f'{tool}-{step}-{id(self) % 997}')])


class Summarizer:
    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.__name__ = 'summarizer'

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        prompt = '\n'.join(
            p.content for p in request.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        self.prompts.append(prompt)
        facts = sorted(set(re.findall(r'FACT-\d+-\d+', prompt)))
        return ModelResponse(
            parts=[
                TextPart(
                    f'## Goal\nreview the ledger\n## Facts\n{", ".join(facts)}\n## Current state\nworking'
                )
            ],
            usage=RequestUsage(input_tokens=100, output_tokens=20),
        )


def build(scenario: str, store: DirectoryStore, summarizer: Summarizer) -> Agent[str, str]:
    processor = HistoryProcessor(
        # the pages stay whole until a compaction (or window) event: the notes it leaves are what is tested
        policy=ContextPolicy(
            context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET, large_item_tokens=3_500
        ),
        summarizer=SummarizerSettings(model=FunctionModel(summarizer)),
        artifacts=ArtifactSettings(),
        compaction=CompactionSettings() if scenario == 'compaction' else False,
        pin=pin_tool_errors,
        store=store,
        scope=lambda ctx: SCOPE,
    )
    if HAS_CAPABILITIES:
        agent: Agent[str, str] = Agent(None, capabilities=[processor], deps_type=str)
    else:
        agent = Agent(
            None, history_processors=[processor], toolsets=[processor.readback_toolset()], deps_type=str
        )

    @agent.tool_plain
    def fetch(n: int) -> str:
        """One page of the service log."""
        if n == 2:
            raise ModelRetry('page 2 is being rotated; ask for another page (ERROR-ROTATED-2)')
        return page(n) if n != 1 else page(n) + '\n' + 'x' * 12_000  # page 1 is large: stored and stubbed

    return agent


async def recognised(messages: list[ModelMessage], store: DirectoryStore) -> list[list[Any]]:
    """`[message index, part index, kind]` of every part (and every text item of an attachment list) this
    process recognises as the package's own."""
    await store.prepare()
    found: list[list[Any]] = []
    with seal_key_scope(store._id_secret()):
        for i, message in enumerate(messages):
            for j, (part, kind) in enumerate(zip(message.parts, part_kinds(message), strict=True)):
                if kind is not None:
                    found.append([i, j, kind])
                content = getattr(part, 'content', None)
                if isinstance(content, list):
                    found.extend(
                        [i, j, f'{sealed[0]} item {k}']
                        for k, item in enumerate(content)
                        if isinstance(item, str) and (sealed := sealed_kind(item)) is not None
                    )
    return found


async def first(scenario: str, root: Path, history_path: Path, report_path: Path) -> None:
    store = DirectoryStore(root)
    summarizer = Summarizer()
    agent = build(scenario, store, summarizer)
    calls = [('fetch', {'n': n}) for n in range(1, 12)]
    prompt = [
        'Review the attached ledger and the service log.',
        BinaryContent(LEDGER.encode(), media_type='text/csv'),
    ]
    result = await agent.run(
        prompt, model=FunctionModel(Script(calls)), deps=SCOPE, usage_limits=UsageLimits(request_limit=None)
    )
    messages = result.all_messages()
    history_path.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    report = {'recognised': await recognised(messages, store), 'prompts': summarizer.prompts}
    report_path.write_text(json.dumps(report))


async def second(scenario: str, root: Path, history_path: Path, report_path: Path) -> None:
    store = DirectoryStore(root)
    messages = ModelMessagesTypeAdapter.validate_json(history_path.read_bytes())
    texts = [str(getattr(p, 'content', '')) for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    transcripts = sorted({t for text in texts for t in TRANSCRIPT_ID.findall(text)})
    summarizer = Summarizer()
    agent = build(scenario, store, summarizer)
    calls = [('read_artifact', {'artifact_id': t, 'query': 'FACT-3'}) for t in transcripts]
    calls += [('fetch', {'n': n}) for n in range(20, 30)]
    script = Script(calls)
    await agent.run(
        'Which fact did page 3 hold? Then read ten more pages.',
        message_history=messages,
        model=FunctionModel(script),
        deps=SCOPE,
        usage_limits=UsageLimits(request_limit=None),
    )
    report = {
        'recognised': await recognised(messages, store),
        'prompts': summarizer.prompts,
        'transcripts': transcripts,
        'read_back': list(script.read_back.values()),
    }
    report_path.write_text(json.dumps(report))


if __name__ == '__main__':
    phase, scenario, root, history, out = sys.argv[1:6]
    run = first if phase == 'first' else second
    asyncio.run(run(scenario, Path(root), Path(history), Path(out)))
