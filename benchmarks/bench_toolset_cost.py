"""Issue 37, "a small run at most 1.10x": what a capability costs a small run before it does anything.

The same small run as `bench_overhead.py` (an agent built and run: a tool call, its return, an answer; a
`FunctionModel` stands in for the provider), CPU per run (`process_time`), with each capability in turn,
alternated, the median of each over `--runs` rounds after 5 warm-up rounds, and its ratio to the run without
any:

  - `empty`: a capability that overrides nothing;
  - `toolset`: a capability whose `get_toolset()` gives a `FunctionToolset` of one tool that its
    `prepare` always filters out (ours' read-back tool before anything of the run is stored);
  - `prepared-toolset`: the same tool in a `PreparedToolset` that filters it out (how ours offered it until
    the toolset asked its gate first);
  - `gated-toolset`: the same tool behind a wrapper that answers "no tools" before the tool is listed (how
    ours offers it);
  - `wrapper`: a capability that offers no toolset of its own but wraps the run's (`get_wrapper_toolset`),
    passing its tools through (where a tool could be added instead of a toolset of its own);
  - `ours`: `create_history_processor()` with a window far beyond the run.

Run: python benchmarks/bench_toolset_cost.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'src'))

KINDS = ('none', 'empty', 'toolset', 'prepared-toolset', 'gated-toolset', 'wrapper', 'ours')


def _capability(kind: str) -> Any:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset

    if kind == 'none':
        return None
    if kind == 'ours':
        from pydantic_ai_history import ContextPolicy, create_history_processor

        return create_history_processor(policy=ContextPolicy(context_window=100_000_000))

    class Empty(AbstractCapability[Any]):
        pass

    if kind == 'empty':
        return Empty()
    if kind == 'wrapper':

        class PassThrough(WrapperToolset[Any]):
            pass

        class Wrapping(AbstractCapability[Any]):
            def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
                return PassThrough(toolset)

        return Wrapping()

    async def read_artifact(ctx: RunContext[Any], artifact_id: str) -> str:
        """Read a stored artifact back."""
        return artifact_id

    async def never(ctx: RunContext[Any], tool_def: Any) -> None:
        return None

    async def none_of(ctx: RunContext[Any], tool_defs: list[Any]) -> list[Any]:
        return []

    tools: FunctionToolset[Any] = FunctionToolset(id='readback')
    if kind == 'toolset':
        tools.add_function(read_artifact, prepare=never)
        offered: AbstractToolset[Any] = tools
    elif kind == 'prepared-toolset':
        tools.add_function(read_artifact)
        offered = tools.prepared(none_of)
    else:

        class Gated(WrapperToolset[Any]):
            async def get_tools(self, ctx: RunContext[Any]) -> dict[str, Any]:
                return {}

        tools.add_function(read_artifact)
        offered = Gated(tools)

    class Offering(AbstractCapability[Any]):
        def get_toolset(self) -> AbstractToolset[Any]:
            return offered

    return Offering()


def _run(capability: Any) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    def respond(messages: list[Any], info: Any) -> ModelResponse:
        usage = RequestUsage(input_tokens=10, output_tokens=5)
        if len(messages) > 1:
            return ModelResponse(parts=[TextPart('item 1 is ok')], usage=usage)
        return ModelResponse(parts=[ToolCallPart('lookup', {'item': 1})], usage=usage)

    agent: Any = Agent(
        FunctionModel(respond, model_name='gpt-4o'), capabilities=[capability] if capability else []
    )

    @agent.tool_plain
    def lookup(item: int) -> str:
        """Look an item up."""
        return f'item {item}: ok'

    agent.run_sync('What is item 1?')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--runs', type=int, default=200)
    args = parser.parse_args()
    capabilities = {kind: _capability(kind) for kind in KINDS}
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for round_ in range(args.runs + 5):
        for kind in KINDS if round_ % 2 else tuple(reversed(KINDS)):
            started = time.process_time()
            _run(capabilities[kind])
            if round_ >= 5:
                cpu[kind].append((time.process_time() - started) * 1000)
    base = statistics.median(cpu['none'])
    print('| capability | CPU per small run | / none |\n|---|---:|---:|')
    for kind in KINDS:
        median = statistics.median(cpu[kind])
        print(f'| {kind} | {median:.2f} ms | {median / base:.3f}x |')


if __name__ == '__main__':
    main()
