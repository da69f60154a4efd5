"""The processor's side effects as durable operations (`@durable_operation(name=...)`): LLM calls, file
conversion, store writes, cache access. Under a durability capability pydantic-ai journals them, elsewhere
they are plain calls. Their names (`OPERATION_NAMES`) are persisted: never changed once released. Arguments
and results are plain data; models, settings and the store are read from the capability (found by id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.messages import BinaryContent

from .._compat import attempt_models, durable_operation
from ..cache import SummaryCache
from ..context._artifact_models import ArtifactPlan  # read at run time, as the argument types below
from ..context._summarizer_settings import (  # read at run time: durable operations' argument types
    TextPurpose,
    Timeout,
)
from ..store import ArtifactStore, StoredArtifact
from ..store._base import Metadata
from ..store._unavailable import StoreView

if TYPE_CHECKING:
    from ..budget._local_server import LocalServer
    from ..context._artifact_settings import ArtifactSettings
    from ..context._summarizer_settings import ModelRef, SummarizerSettings
    from ..files import FileResult, FileSettings
    from ..tokens import TokenizerProfile

# The LLM calls, file conversion and local servers load with the first operation that needs them.


OPERATION_NAMES = (
    'compaction_summary',
    'chunk_merge',
    'artifact_summary',
    'artifact_plan',
    'file_conversion',
    'store_write',
    'cache_read',
    'cache_write',
    'context_window_probe',
    'store_search',
)
"""Every durable operation of the processor, by its persisted name."""


class HistoryOperations:
    """The durable operations, mixed into `HistoryProcessor`: pydantic-ai collects them from there."""

    if TYPE_CHECKING:
        model: ModelRef | None
        summarizer: SummarizerSettings
        store: ArtifactStore
        cache: SummaryCache
        readback_tool_name: str

        token_profile: TokenizerProfile | None

        def _artifact_settings(self) -> ArtifactSettings: ...

    async def _request_text(
        self,
        ctx: RunContext[Any],
        prompt: str,
        instructions: str,
        timeout: Timeout,
        model_name: str | None,
        max_tokens: int | None = None,
    ) -> str:
        """The body of the three text operations below: one model request answered in text."""
        from ..context._llm import call_options, run_text

        return await run_text(
            model_name or self._summarizer_model(ctx),
            prompt,
            instructions=instructions,
            timeout=timeout,
            max_tokens=max_tokens,
            **call_options(ctx.usage, self.summarizer, ctx),
        )

    summarize_history = durable_operation(name='compaction_summary')(_request_text)
    """The compaction summary of a transcript (its first or only chunk)."""
    merge_summary_chunk = durable_operation(name='chunk_merge')(_request_text)
    """The running compaction summary updated with the next chunk of a transcript over the input cap."""
    summarize_artifact = durable_operation(name='artifact_summary')(_request_text)
    """The summary of one large tool return or document."""

    @durable_operation(name='artifact_plan')
    async def plan_artifacts(
        self, ctx: RunContext[Any], prompt: str, instructions: str, timeout: float, model_name: str | None
    ) -> ArtifactPlan:
        """The planner model's decision for every large artifact of a request."""
        from ..context._llm import call_options, run_plan

        return await run_plan(
            model_name or self._planner_model(ctx),
            prompt,
            instructions=instructions,
            timeout=timeout,
            **call_options(ctx.usage, self.summarizer, ctx),
        )

    @durable_operation(name='file_conversion')
    async def convert_file(
        self, ctx: RunContext[Any], file: BinaryContent, name: str | None, model_name: str | None
    ) -> str:
        """An attached file read into markdown, a fitted image or audio clip (`file_result_to_json` text),
        in a worker process under the file settings' time and memory limits."""
        from ..context._llm import convert_in_thread
        from ..files._results import file_result_to_json

        result = await convert_in_thread(
            file.data,
            media_type=file.media_type,
            name=name,
            model_name=model_name,
            profile=self.token_profile,
            settings=self._artifact_settings().file_settings,
        )
        return file_result_to_json(result)

    @durable_operation(name='store_write')
    async def write_artifact(
        self,
        ctx: RunContext[Any],
        artifact_id: str,
        content: BinaryContent,
        source: str,
        metadata: dict[str, str],
        scope: str,
    ) -> StoredArtifact:
        """Store an original (a reduced artifact, an evicted transcript) for `read_artifact`."""
        return await self.store.put(
            artifact_id,
            content.data,
            media_type=content.media_type,
            source=source,
            metadata=metadata,
            scope=scope,
        )

    @durable_operation(name='store_search')
    async def search_store(
        self, ctx: RunContext[Any], question: str, limit: int, opening: str, scope: str
    ) -> str | None:
        """The stored passages of `scope` that match a new question (`CompactionSettings.recall_chars`), under
        `opening`; None when none does."""
        from ..readback import recall_passages

        return await recall_passages(
            self.store, question, limit, opening=opening, scope=scope, tool_name=self.readback_tool_name
        )

    @durable_operation(name='cache_read')
    async def read_cache(self, ctx: RunContext[Any], key: str) -> str | None:
        """A cached summary, conversion or prefix record; None when absent (or the cache is down)."""
        return await self.cache.get(key)

    @durable_operation(name='cache_write')
    async def write_cache(self, ctx: RunContext[Any], key: str, value: str, ttl: float | None) -> bool:
        """Cache a summary, conversion or prefix record; False when the cache is down."""
        return await self.cache.set(key, value, ttl=ttl)

    @durable_operation(name='context_window_probe')
    async def ask_server_window(self, ctx: RunContext[Any], base_url: str, model_name: str) -> int | None:
        """The context window the local server at `base_url` runs `model_name` with; None when it does not
        say (see `_local_server`: only the model's own server on this machine or network is asked)."""
        return await self.probe_server_window(ctx, base_url, model_name, model=ctx)

    # ---- resolution on the side that runs the operation --------------------------------------------------

    async def probe_server_window(
        self, ctx: RunContext[Any] | None, base_url: str, model_name: str, *, model: object = None
    ) -> int | None:
        """`ask_server_window` run in place: `model` (else the processor's or the run's) gives the API key."""
        from ..budget._local_server import LocalServer, ask_context_window

        server = LocalServer(base_url, model_name)
        return await ask_context_window(server, api_key=self._server_api_key(server, model, ctx))

    def _server_api_key(self, server: LocalServer, *models: object) -> str | None:
        """The API key the model's own client sends to `server` (vLLM's `--api-key`), if any: sent to that
        server only, which receives it with every request anyway."""
        from ._limits import local_servers

        for given in (*models, self.model):
            # a RunContext: the run's model, and those its `ModelFallback` may move an attempt to
            moved = attempt_models(given) if isinstance(given, RunContext) else ()
            for candidate, serving in local_servers(getattr(given, 'model', given), *moved):
                if serving == server:
                    key = getattr(getattr(candidate, 'client', None), 'api_key', None)
                    return key if isinstance(key, str) and key else None
        return None

    def _summarizer_model(self, ctx: RunContext[Any]) -> ModelRef:
        """`SummarizerSettings.model`, else the processor's `model`, else the run's (on a worker, its own)."""
        return next((m for m in (self.summarizer.model, self.model) if m is not None), ctx.model)

    def _planner_model(self, ctx: RunContext[Any]) -> ModelRef:
        planner = self._artifact_settings().planner_model
        return planner if planner is not None else self._summarizer_model(ctx)


def _name(model: ModelRef) -> str | None:
    """A model crosses a durable boundary by name; a `Model` object is the processor's, found there again."""
    return model if isinstance(model, str) else None


@dataclass(frozen=True)
class RunOperations:
    """The durable operations bound to one request's `RunContext`: what stages call under durable execution.
    A model crosses by name; a `Model` object is resolved again on the worker from the processor's settings.
    """

    processor: HistoryOperations
    ctx: RunContext[Any]

    async def request_text(
        self,
        purpose: TextPurpose,
        prompt: str,
        *,
        model: ModelRef,
        instructions: str,
        timeout: Timeout,
        max_tokens: int | None = None,
    ) -> str:
        operation = {
            'compaction_summary': self.processor.summarize_history,
            'chunk_merge': self.processor.merge_summary_chunk,
            'artifact_summary': self.processor.summarize_artifact,
        }[purpose]
        return await operation(self.ctx, prompt, instructions, timeout, _name(model), max_tokens)

    async def search_store(self, question: str, limit: int, *, opening: str, scope: str) -> str | None:
        return await self.processor.search_store(self.ctx, question, limit, opening, scope)

    async def request_plan(
        self, prompt: str, *, model: ModelRef, instructions: str, timeout: float
    ) -> ArtifactPlan:
        return await self.processor.plan_artifacts(self.ctx, prompt, instructions, timeout, _name(model))

    async def convert_file(
        self,
        data: bytes,
        *,
        media_type: str,
        name: str | None,
        model_name: str | None,
        settings: FileSettings,
    ) -> FileResult:
        from ..files._results import file_result_from_json

        file = BinaryContent(data=data, media_type=media_type)
        return file_result_from_json(await self.processor.convert_file(self.ctx, file, name, model_name))


class JournaledStore(StoreView):
    """The processor's store as workflow code sees it: ids made here (from its explicit secret, no I/O),
    every write a durable operation; reads happen in `read_artifact`, which the engine runs durably."""

    def __init__(self, operations: RunOperations, store: ArtifactStore) -> None:
        super().__init__(store)
        self._operations = operations

    def artifact_id(self, data: bytes, *, scope: str = '') -> str:
        return self.store.artifact_id(data, scope=scope)

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: Metadata, scope: str
    ) -> StoredArtifact:
        content = BinaryContent(data=data, media_type=media_type)
        ctx = self._operations.ctx
        return await self._operations.processor.write_artifact(
            ctx, artifact_id, content, source, metadata, scope
        )


class JournaledCache(SummaryCache):
    """The processor's cache as workflow code sees it: every read and write a durable operation, so a
    replay sees the same hits and misses whichever worker it is on."""

    def __init__(self, operations: RunOperations) -> None:
        super().__init__()
        self._operations = operations

    async def _get(self, key: str) -> str | None:
        return await self._operations.processor.read_cache(self._operations.ctx, key)

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        await self._operations.processor.write_cache(self._operations.ctx, key, value, ttl)
