"""What the processor checks about its agent and run: one history processor per agent and per run step, tool
names of its own, and a store every durable worker sees."""

from __future__ import annotations

import operator
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._compat import run_id_of
from ..messages._marks import MARKER_KEY
from ..store import ArtifactStore, MemoryStore

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

_CapabilityT = TypeVar('_CapabilityT')


def agent_capabilities(agent: object) -> list[object]:
    """The capabilities an agent was built with, flattened: its public `root_capability` (late 1.x, 2.x)
    walked with the public `apply`, and what a wrapper capability wraps."""
    found: list[object] = []
    root = getattr(agent, 'root_capability', None)
    apply = getattr(root, 'apply', None)
    if callable(apply):
        apply(found.append)
    unwrapped: list[object] = []
    for capability in found:
        for _ in range(32):  # `WrapperCapability.wrapped`, public; a wrapper of itself must not loop
            unwrapped.append(capability)
            inner = getattr(capability, 'wrapped', None)
            if inner is None or inner is capability or not hasattr(inner, 'apply'):
                break
            capability = inner
    return unwrapped


def history_processor_in(capability: object, kind: type[_CapabilityT]) -> _CapabilityT | None:
    """The history processor a capability is or runs: itself, or `ProcessHistory(processor)`'s (its public
    `processor` field, also a bound method of one)."""
    if isinstance(capability, kind):
        return capability
    processor = getattr(capability, 'processor', None)
    if isinstance(processor, kind):
        return processor
    owner = getattr(processor, '__self__', None)
    return owner if isinstance(owner, kind) else None


_STEPS: OrderedDict[tuple[str, int], tuple[int, str]] = OrderedDict()
"""Which processor (by `id()`) processed each run step, and by which entry point: two history processors on
one agent, however added, are found on the first step they share."""
_MAX_STEPS = 4_096


def claim_step(processor: object, ctx: object, entry: str) -> None:
    """Refuse a second history processor on a run step (`UserError`); the same one replaying it is fine.
    A plain history processor (`history_processors=[p]`) is not told of its agent, so `for_agent` cannot
    see it: two, or one added by two routes, are refused here, before either changes the history."""
    # only with pydantic-ai's run ids: 1.0's stand-in key is shared by an agent delegating with `usage=`
    run_key = run_id_of(ctx)
    step = getattr(ctx, 'run_step', None)
    if run_key is None or not isinstance(step, int):
        return
    key, claim = (run_key, step), (id(processor), entry)
    previous = _STEPS.get(key)
    if previous is None:
        _STEPS[key] = claim
        while len(_STEPS) > _MAX_STEPS:
            _STEPS.popitem(last=False)
    elif previous != claim:
        raise user_error(
            'An agent takes one history processor, but this run step was processed by two (or by one '
            'added twice: as a capability and in ProcessHistory or history_processors). Each keeps its own '
            'state and would rewrite the history the other just processed; add the processor once, as a '
            'capability (Agent(capabilities=[processor])) where pydantic-ai has capabilities.'
        )


TOOL_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_-]{0,63}')
"""A tool name every provider accepts."""


tool_name: Callable[[ToolDefinition], str] = operator.attrgetter('name')
"""A tool definition's name (`name in map(tool_name, tools)` looks through a request's tools in C)."""


def is_ours(tool: ToolDefinition, mark: Mapping[str, str]) -> bool:
    """Whether a tool definition carries our `mark` in its metadata."""
    return (getattr(tool, 'metadata', None) or {}).get(MARKER_KEY) == mark[MARKER_KEY]


def tool_owner(agent: object, name: str) -> str | None:
    """The label of the agent's own toolset that already has a tool called `name`, where it is known when the
    agent is built (tools registered on it, function toolsets given to it); None otherwise."""
    for toolset in getattr(agent, 'toolsets', None) or ():
        tools = getattr(toolset, 'tools', None)
        if isinstance(tools, Mapping) and name in tools:
            return str(getattr(toolset, 'label', type(toolset).__name__))
    return None


def given_toolsets(agent: object, ids: Sequence[str]) -> list[str]:
    """Which of the toolsets `ids` names were given to the agent itself (`toolsets=[...]`), found through
    the public `wrapped` of wrapper toolsets."""
    found: list[str] = []
    for toolset in getattr(agent, 'toolsets', None) or ():
        for _ in range(8):  # a prepared or filtered toolset wraps the function toolset
            if getattr(toolset, 'id', None) in ids:
                found.append(str(toolset.id))
                break
            toolset = getattr(toolset, 'wrapped', None)
            if toolset is None:
                break
    return found


def toolsets_twice_error(found: Sequence[str]) -> Exception:
    """The early-1.x toolsets given beside the processor as a capability, which brings them itself."""
    return user_error(
        f'The agent has the history processor as a capability, which brings its own tools, and also got its '
        f'toolset{"s" if len(found) > 1 else ""} {", ".join(found)} in toolsets=[...] (the way of early 1.x, '
        'with history_processors=[processor]): remove processor.readback_toolset() (and '
        'processor.compaction_toolset()) from toolsets=, and keep Agent(capabilities=[processor]).'
    )


def clash_error(name: str, owner: str, *, compaction: bool = False) -> Exception:
    """A tool of the agent (from `owner`) is named like the read-back tool, or the compaction tool."""
    tool, fix = (
        ('compaction tool', "HistoryProcessor(compaction_tool=CompactionTool(name='compact_history'))")
        if compaction
        else (
            f'read-back tool ({name!r})',
            "HistoryProcessor(readback_tool_name='read_stored_content') or "
            'create_history_processor(readback_tool_name=...)',
        )
    )
    return user_error(
        f"The agent already has a tool named {name!r} (from {owner}), the name of the history processor's "
        f'{tool}: rename one of them, e.g. {fix}.'
    )


def user_error(message: str) -> Exception:
    from pydantic_ai.exceptions import UserError

    return UserError(message)


def durable_store_problem(store: ArtifactStore) -> str | None:
    """Why `store` cannot serve a durable agent, or None: any worker writes and reads it, so all must see
    it; workflow code makes ids without I/O, so its secret must be given, the same on every worker."""
    name = type(store).__name__
    if isinstance(store, MemoryStore):
        return (
            'Under durable execution (Temporal, DBOS, Prefect) the artifact store must be one every worker '
            f'sees, but this processor has a {name}: its originals would be written on one worker and read '
            "back on another. Use DirectoryStore('/shared/path', secret=...) or RedisStore(url, secret=...)."
        )
    if getattr(store, '_secret', None) is None:
        return (
            f'Under durable execution the {name} needs an explicit id secret, the same on every worker '
            f'(workflow code makes artifact ids and must not read it from storage): {name}(..., secret=...), '
            'for example from an environment variable.'
        )
    return None


def duplicate_error(capabilities: Sequence[object]) -> Exception:
    ids = ', '.join(repr(getattr(c, 'id', None)) for c in capabilities)
    return user_error(
        f'An agent takes one history processor, but it was given {len(capabilities)} (ids {ids}): a '
        'HistoryProcessor or one of its stages used as a capability (ArtifactPlanner, Compactor, '
        'SlidingWindow). Each keeps its own state and would rewrite the history the other just processed; '
        'compose them in one HistoryProcessor(stages=[...]) (or its artifacts/compaction/window settings) '
        'and remove the others.'
    )
