"""The contenders, each configured as its own README shows it, on the same models.

Every setup gets the same main model (whose profile states the window, so every fraction resolves against
the real window: `max_fraction` for harness, our context policy's 'profile' source) and the same summarizer
model. Packages are imported only when their contender is built, so ours runs without the others installed.

- `ours`: `create_history_processor(summarizer=SummarizerSettings(model=summarizer))`, the defaults;
- `ours-compactor`: the same with `artifacts=False`;
- `ours-background`: the defaults with `compaction=CompactionSettings(background_start=0.4)` (the summary
  starts in the background at 40% of the trigger; the default since issue 37);
- `ours-blocking`: the defaults with `compaction=CompactionSettings(background_start=None)` (the summary is
  made at the trigger, the request waiting for it: the default before issue 37);
- `ours-model`: the defaults with `compaction_tool=True, near_limit_notice=True` (the scripted model never
  calls the tool: what they cost is the tool's definition in every request and the notices);
- `harness-summarizing`: `SummarizingCompaction(model=summarizer, max_fraction=0.9, keep_messages=20)`, its
  README's first example;
- `harness-tiered`: `TieredCompaction(tiers=[ClearToolResults(max_tokens=1, keep_pairs=3),
  SummarizingCompaction(model=summarizer, max_messages=1, keep_messages=20)], target_fraction=0.9)`, its
  README's "Cost" example with the window-relative target its README recommends (`target_fraction`, at the
  0.9 of the first example) instead of the example's `target_tokens=120_000`;
- `harness-fallback`: `FallbackCompaction(max_fraction=0.85, background_start=0.85,
  fallback_chain=[SummarizingCompaction(model=summarizer, max_messages=1, keep_tokens=20_000),
  SlidingWindowCompaction(max_messages=1, keep_tokens=20_000)])`, its README's background example;
- `harness-spill`: `ToolOutputLimits(store=LocalFileStore(base_dir=tmp))` (its default band,
  `Spill(then=Truncate())` over 10,000 characters, with `read_tool_result`) and the `harness-tiered` setup;
- `harness-tiered-0.5`, `harness-tiered-0.7`: `harness-tiered` with `target_fraction=0.5` / `0.7` (its
  README's `target_fraction` takes any fraction; 0.9 above, 0.8 in its `TieredCompaction` example);
- `harness-spill-4k`: `ToolOutputLimits(bands=[Band(over=4_000, action=Spill(then=Truncate()))],
  store=LocalFileStore(base_dir=tmp))` + the `harness-tiered` setup: the default band moved down to 4,000
  characters (its README's own 4,000-character bands truncate; this one spills, losslessly);
- `harness-dedup`: `TieredCompaction(tiers=[DeduplicateFileReads(file_key=read_file_key),
  ClearToolResults(max_tokens=1, keep_pairs=3), SummarizingCompaction(model=summarizer, max_messages=1,
  keep_messages=20)], target_fraction=0.9)`, its compaction README's "Cost" example (with `target_fraction`
  as above); `read_file_key` is its README's `file_key`: the `path` argument of a `read_file` call, None for
  any other call (the tool loop has no `read_file`: there it is `harness-tiered`);
- `harness-dedup-every`: `DeduplicateFileReads(file_key=read_file_key)` as a capability of its own (no
  trigger: it runs on every request, its class docstring's example) + the `harness-tiered` setup;
- `harness-search`: `StepPersistence(store=InMemoryStepStore())` + `ConversationSearch(SnapshotHistorySource(
  store), scope='conversation')` (its README's pairing, the store in memory) + the `harness-tiered` setup; its
  `search_conversation_history(query=fact)` is the contender's search (BM25 over every persisted step);
- `summarization`: `ContextManagerCapability(max_tokens=W, summarization_model=summarizer)`, its README's
  recommended capability, defaults otherwise;
- `none`: no context management.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from re import Pattern
from typing import TYPE_CHECKING, Any

from .facts import ARTIFACT_ID, SPILL_HANDLE

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = ('CONTENDERS', 'LABELS', 'Setup', 'build')

LABELS = {
    'ours': 'ours, defaults',
    'ours-compactor': 'ours, `artifacts=False`',
    'ours-background': 'ours, `background_start=0.4`',
    'ours-blocking': 'ours, `background_start=None`',
    'ours-model': 'ours, `compaction_tool` + `near_limit_notice`',
    'harness-summarizing': 'harness `SummarizingCompaction(max_fraction=0.9, keep_messages=20)`',
    'harness-tiered': 'harness `TieredCompaction([ClearToolResults, SummarizingCompaction])`',
    'harness-fallback': 'harness `FallbackCompaction(background_start=0.85)`',
    'harness-spill': 'harness `ToolOutputLimits(Spill)` + Tiered',
    'harness-tiered-0.5': 'harness `TieredCompaction(target_fraction=0.5)`',
    'harness-tiered-0.7': 'harness `TieredCompaction(target_fraction=0.7)`',
    'harness-spill-4k': 'harness `ToolOutputLimits(Spill over 4,000 chars)` + Tiered',
    'harness-dedup': 'harness `TieredCompaction([DeduplicateFileReads, ClearToolResults, Summarizing])`',
    'harness-dedup-every': 'harness `DeduplicateFileReads` (every request) + Tiered',
    'harness-search': 'harness `StepPersistence` + `ConversationSearch` + Tiered',
    'summarization': 'summarization-pydantic-ai `ContextManagerCapability`',
    'none': 'no context management',
}
CONTENDERS = tuple(LABELS)
NEEDS = {
    'ours': 'pydantic_ai_history',
    'ours-compactor': 'pydantic_ai_history',
    'ours-background': 'pydantic_ai_history',
    'ours-blocking': 'pydantic_ai_history',
    'ours-model': 'pydantic_ai_history',
    'harness-summarizing': 'pydantic_ai_harness',
    'harness-tiered': 'pydantic_ai_harness',
    'harness-fallback': 'pydantic_ai_harness',
    'harness-spill': 'pydantic_ai_harness',
    'harness-tiered-0.5': 'pydantic_ai_harness',
    'harness-tiered-0.7': 'pydantic_ai_harness',
    'harness-spill-4k': 'pydantic_ai_harness',
    'harness-dedup': 'pydantic_ai_harness',
    'harness-dedup-every': 'pydantic_ai_harness',
    'harness-search': 'pydantic_ai_harness',
    'summarization': 'pydantic_ai_summarization',
}
"""The module each contender imports (the driver checks them before running)."""

Reader = Callable[[Any, str, str], Awaitable[str]]
"""`(run context, id, fact) -> what one read-back returns`."""
Searcher = Callable[[Any, str], Awaitable[str]]
"""`(run context, fact) -> what one search of everything stored returns`."""


@dataclass
class Setup:
    capabilities: list[Any]
    id_pattern: Pattern[str] | None = None
    """How the final context names what the read-back tool can read; None without one."""
    read: Reader | None = None
    search: Searcher | None = None
    """One search of everything stored (a read-back without an id); None without one."""
    close: Callable[[], Awaitable[None]] | None = None
    temporary: list[tempfile.TemporaryDirectory[str]] = field(default_factory=list)


def build(key: str, window: int, summarizer: Model, *, id_secret: bytes | None = None) -> Setup:
    """The capabilities of contender `key` for a model with this `window`; ours' store keyed with `id_secret`
    when given (the same artifact ids on every run), else with a fresh secret, as an app's store is."""
    ours = _OURS.get(key)
    if ours is not None:
        return _ours(summarizer, id_secret, **ours())
    return _BUILDERS[key](window, summarizer)


def _ours(summarizer: Model, id_secret: bytes | None, **options: Any) -> Setup:
    from pydantic_ai_history import SummarizerSettings, create_history_processor
    from pydantic_ai_history.readback import read_artifact_text, search_artifacts_text
    from pydantic_ai_history.store import MemoryStore

    if id_secret is not None:
        options['store'] = MemoryStore(secret=id_secret)
    processor = create_history_processor(summarizer=SummarizerSettings(model=summarizer), **options)

    async def read(ctx: Any, artifact_id: str, fact: str) -> str:
        return await read_artifact_text(
            processor.store, artifact_id, query=fact, scope=processor.scope_of(ctx)
        )

    async def search(ctx: Any, fact: str) -> str:
        return await search_artifacts_text(processor.store, fact, scope=processor.scope_of(ctx))

    return Setup([processor], ARTIFACT_ID, read, search)


def _background_at(start: float | None) -> dict[str, Any]:
    from pydantic_ai_history import CompactionSettings

    return {'compaction': CompactionSettings(background_start=start)}


_OURS: dict[str, Callable[[], dict[str, Any]]] = {
    'ours': dict,
    'ours-compactor': lambda: {'artifacts': False},
    'ours-background': lambda: _background_at(0.4),
    'ours-blocking': lambda: _background_at(None),
    'ours-model': lambda: {'compaction_tool': True, 'near_limit_notice': True},
}
"""Our contenders: the options each gives `create_history_processor` (imported when built)."""


def _harness_summarizing(window: int, summarizer: Model) -> Setup:
    from pydantic_ai_harness import SummarizingCompaction

    return Setup([SummarizingCompaction(model=summarizer, max_fraction=0.9, keep_messages=20)])


def _tiered(summarizer: Model, target_fraction: float = 0.9, first: tuple[Any, ...] = ()) -> Any:
    from pydantic_ai_harness import ClearToolResults, SummarizingCompaction, TieredCompaction

    return TieredCompaction(
        tiers=[
            *first,
            ClearToolResults(max_tokens=1, keep_pairs=3),
            SummarizingCompaction(model=summarizer, max_messages=1, keep_messages=20),
        ],
        target_fraction=target_fraction,
    )


def _harness_tiered(window: int, summarizer: Model) -> Setup:
    return Setup([_tiered(summarizer)])


def _harness_tiered_at(target_fraction: float) -> Callable[[int, Model], Setup]:
    def build(window: int, summarizer: Model) -> Setup:
        return Setup([_tiered(summarizer, target_fraction)])

    return build


def read_file_key(call: Any) -> str | None:
    """`DeduplicateFileReads.file_key` as harness's README writes it: a `read_file` call's `path`."""
    if call.tool_name != 'read_file':
        return None
    return call.args_as_dict().get('path')


def _harness_dedup(window: int, summarizer: Model) -> Setup:
    from pydantic_ai_harness import DeduplicateFileReads

    return Setup([_tiered(summarizer, first=(DeduplicateFileReads(file_key=read_file_key),))])


def _harness_dedup_every(window: int, summarizer: Model) -> Setup:
    from pydantic_ai_harness import DeduplicateFileReads

    return Setup([DeduplicateFileReads(file_key=read_file_key), _tiered(summarizer)])


def _harness_search(window: int, summarizer: Model) -> Setup:
    from pydantic_ai_harness import ConversationSearch, StepPersistence
    from pydantic_ai_harness.conversation_search import SnapshotHistorySource
    from pydantic_ai_harness.step_persistence import InMemoryStepStore

    store = InMemoryStepStore()
    source = SnapshotHistorySource(store)
    recall = ConversationSearch(source, scope='conversation')
    # the facts are counted after the run, when the store no longer changes: the same tool over the same
    # source, each run's history replayed once, not once per query (same answers, minutes faster at 240 steps)
    toolset = ConversationSearch(_Settled(source), scope='conversation').get_toolset()

    async def search(ctx: Any, fact: str) -> str:
        return await toolset.search_conversation_history(ctx, query=fact)  # type: ignore[union-attr]

    return Setup([StepPersistence(store=store), recall, _tiered(summarizer)], search=search)


class _Settled:
    """A harness `HistorySource` read after the run: `run_history` memoized per run id."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self._histories: dict[str, Any] = {}

    async def list_runs(self) -> Any:
        return await self._source.list_runs()

    async def run_history(self, *, run_id: str) -> Any:
        if run_id not in self._histories:
            self._histories[run_id] = await self._source.run_history(run_id=run_id)
        return self._histories[run_id]


def _harness_fallback(window: int, summarizer: Model) -> Setup:
    from pydantic_ai_harness import FallbackCompaction, SlidingWindowCompaction, SummarizingCompaction

    compaction = FallbackCompaction(
        max_fraction=0.85,
        background_start=0.85,
        fallback_chain=[
            SummarizingCompaction(model=summarizer, max_messages=1, keep_tokens=20_000),
            SlidingWindowCompaction(max_messages=1, keep_tokens=20_000),
        ],
    )
    return Setup([compaction], close=compaction.aclose)


def _harness_spill(window: int, summarizer: Model, over: int | None = None) -> Setup:
    from pydantic_ai_harness import ToolOutputLimits
    from pydantic_ai_harness.tool_output_limits import Band, LocalFileStore, Spill, Truncate

    spills = tempfile.TemporaryDirectory(prefix='bench-cost-spill-')
    store = LocalFileStore(base_dir=Path(spills.name))
    if over is None:  # its default band: Spill(then=Truncate()) over 10,000 characters
        limits = ToolOutputLimits(store=store)
    else:
        limits = ToolOutputLimits(bands=[Band(over=over, action=Spill(then=Truncate()))], store=store)
    reader = limits.get_toolset()
    tool = reader.tools['read_tool_result']  # type: ignore[union-attr]

    async def read(ctx: Any, handle: str, fact: str) -> str:
        return await tool.function(ctx, handle=handle, pattern=fact)

    return Setup([limits, _tiered(summarizer)], SPILL_HANDLE, read, temporary=[spills])


def _harness_spill_4k(window: int, summarizer: Model) -> Setup:
    return _harness_spill(window, summarizer, over=4_000)


def _summarization(window: int, summarizer: Model) -> Setup:
    from pydantic_ai_summarization import ContextManagerCapability

    return Setup([ContextManagerCapability(max_tokens=window, summarization_model=summarizer)])


def _none(window: int, summarizer: Model) -> Setup:
    return Setup([])


_BUILDERS: dict[str, Callable[[int, Model], Setup]] = {
    'harness-summarizing': _harness_summarizing,
    'harness-tiered': _harness_tiered,
    'harness-fallback': _harness_fallback,
    'harness-spill': _harness_spill,
    'harness-tiered-0.5': _harness_tiered_at(0.5),
    'harness-tiered-0.7': _harness_tiered_at(0.7),
    'harness-spill-4k': _harness_spill_4k,
    'harness-dedup': _harness_dedup,
    'harness-dedup-every': _harness_dedup_every,
    'harness-search': _harness_search,
    'summarization': _summarization,
    'none': _none,
}
