"""The artifact stage: convert attached files, run per-tool reducers, plan, reduce large tool outputs once.

Work happens only on the newest request, which no provider has cached yet (rewriting a sent message breaks
the prompt cache from that point). Whatever is reduced is first written to the spill store, so
`read_artifact` can return it exactly; when the store fails the content stays inline.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from ..._compat import make_request
from ...budget._policy import ContextLimits
from ...budget.model_info import file_input_profile, is_test_model, model_info, model_name_of
from ...cache import cache_key
from ...context._artifact_models import ArtifactDecision, ArtifactPlan, ProcessingStrategy
from ...context._artifact_settings import ArtifactSettings, ArtifactSizes, Reducer
from ...context._context import ARTIFACT_MARKER, HistoryContext
from ...context._llm import operations_of
from ...context._offload import OFF_LOOP_CHARS, is_large, large_content
from ...context._summarizer_settings import check_model_ref
from ...files import ConvertedDocument, FileResult, FileSettings, FittedAudio, FittedImage
from ...messages._marks import readback_tool, seal
from ...messages._nesting import MAX_PARSE_DEPTH, json_text
from ...messages._utf8 import utf8
from ...pipeline._settings_checks import coerce_settings, exempting_readback
from ...pipeline._stage_capability import StageCapability, history_processor_annotations
from ...store import artifact_id
from ...tokens import TokenCounter
from ...tokens._running_counts import IdentityMemo
from .._pieces import (
    Place,
    Replacement,
    corrected,
    replace_pieces,
    replaced_part,
    stored_marker,
    too_deep_returns,
    with_parts,
)
from .._request_fit import (
    fit_newest,
    latest_question,
    newest_room,
    report_artifact,
)
from ._accepted import accepted_as_is, fits_as_is, inline_text, strictest_file_model, unidentified_image
from ._extract import (
    CANDIDATE_MEMO_SIZE,
    Attachment,
    Candidate,
    CandidateMemo,
    find_attachments,
    find_candidates,
)
from ._planner import heuristic_plan, llm_plan, query_for, should_use_llm_planning
from ._repeats import shown_before, view_body
from ._strategies import (
    exclude_stub,
    extract_text,
    reduced_text,
    repeat_text,
    summarize_text,
    summary_text,
)

logger = logging.getLogger('pydantic_ai_history.artifacts')

PLAN_SPAN = 'pydantic_ai_history.artifact_plan'
"""The span around the planner model's request (its `chat` span nests inside)."""
SUMMARY_SPAN = 'pydantic_ai_history.artifact_summary'
"""The span around one artifact summary's request."""

_HEADER_TOKENS = 80
"""Reserved for the marker line that heads a reduced artifact."""


@dataclass
class _Outcome:
    text: str | None
    """The new content, or None to keep the part unchanged."""
    strategy: str
    rationale: str
    cache_hit: bool = False


def _fitted_strategy(
    decision: ArtifactDecision,
    candidate: Candidate,
    remaining: int,
    large_left: int,
    sizes: ArtifactSizes,
) -> tuple[ProcessingStrategy, str, int]:
    """The planned strategy, its rationale and token allowance, fitted to what is left of the budget
    (`large_left`: large artifacts still to come)."""
    a = candidate.artifact
    large = a.tokens > sizes.large
    strategy = decision.strategy if large else ProcessingStrategy.INCLUDE_FULL
    rationale = decision.rationale
    allowance = sizes.view_cap(remaining // (large_left + 1)) if large else remaining
    allowance = max(allowance, sizes.least_preview)  # the current request's: a useful view at least
    if strategy is ProcessingStrategy.INCLUDE_FULL and large and a.tokens > sizes.view_cap(remaining):
        strategy = ProcessingStrategy.EXTRACT if allowance >= sizes.least else ProcessingStrategy.EXCLUDE
        rationale += f'; {a.tokens:,} tokens do not fit the {sizes.view_cap(remaining):,} left'
    reducing = strategy in (ProcessingStrategy.SUMMARIZE, ProcessingStrategy.EXTRACT)
    if reducing and allowance < sizes.least:
        strategy = ProcessingStrategy.EXCLUDE
        rationale += f'; budget spent ({remaining:,} tokens left)'
    return strategy, rationale, allowance


@dataclass(kw_only=True, eq=False)
class ArtifactPlanner(StageCapability):
    """Plans and applies a strategy to every large tool output and attached file; see `ArtifactSettings`."""

    settings: ArtifactSettings = dataclasses.field(default_factory=ArtifactSettings, kw_only=False)
    """The planner's settings (the one positional argument: `ArtifactPlanner(ArtifactSettings(...))`)."""
    id: str | None = 'pydantic_ai_history.artifacts'
    """The capability's id when the planner runs alone (stable: durable engines name its operations after
    it)."""
    name: str = 'artifacts'
    """The stage's name in events and logs."""
    _examined: CandidateMemo = dataclasses.field(
        default_factory=lambda: IdentityMemo(CANDIDATE_MEMO_SIZE), init=False, repr=False
    )
    _large: tuple[ArtifactSettings, ContextLimits, int] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    """The large size of the last settings and limits asked for (by identity): asked on every request."""

    def __post_init__(self) -> None:
        self.settings = exempting_readback(
            coerce_settings(ArtifactSettings, self.settings, 'settings'), self.readback_tool_name
        )
        check_model_ref(self.settings.planner_model, 'ArtifactSettings.planner_model')
        super().__post_init__()

    def _artifact_settings(self) -> ArtifactSettings:
        return self.settings

    def unchanged_when_fits(self, messages: list[ModelMessage], context: HistoryContext) -> bool:
        """Nothing to do (`HistoryStage`): the newest request holds no attachment, no structured tool return,
        no return a reducer reads, nothing large; a history within its limit is not cut."""
        request = messages[-1] if messages else None
        if not isinstance(request, ModelRequest):
            return True
        if self._large_newest(messages, context):
            return False  # a large tool return may be planned whatever the room
        reducers = self.settings.reducers
        for part in request.parts:
            if isinstance(part, (ToolReturnPart, UserPromptPart)) and not isinstance(part.content, str):
                return False  # an attachment, or a structured value that may nest too deep to send
            if reducers and isinstance(part, ToolReturnPart) and part.tool_name in reducers:
                return False
        return context.estimate(messages).total <= self.settings.hard_limit(context.limits)

    def _large_newest(self, messages: Sequence[ModelMessage], context: HistoryContext) -> bool:
        """Whether the newest message may hold a large item: its count (a bound, on a history proved to fit)
        passes the large size, which no part of it can then pass."""
        settings, limits, known = self._large or (None, None, 0)
        if settings is not self.settings or limits is not context.limits:
            known = self.settings.sizes(context.limits).large
            self._large = (self.settings, context.limits, known)
        return context.estimate(messages).per_message[-1] > known

    async def apply_stage(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        messages = self._sendable(messages, context)
        await context.count_newest(messages)
        over_limit = context.estimate(messages).total > self.settings.hard_limit(context.limits)
        start = len(messages) - 1  # only the newest request: rewriting older ones breaks the prompt cache
        if self.settings.convert_attachments:
            messages = await self._attachments(messages, context, start=start, over_limit=over_limit)
        messages = await self._reduce(messages, context, start=start)
        return await fit_newest(messages, self._newest_room(messages, context), context, stage=self.name)

    def _sendable(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        """The newest request with every tool return nested too deep for any provider cut to what can be
        sent (`too_deep_returns`); `ContentLost` names what went, which no request could carry."""
        request = messages[-1] if messages else None
        cut = too_deep_returns(request) if isinstance(request, ModelRequest) else {}
        if not cut or not isinstance(request, ModelRequest):
            return messages
        parts = [request.parts[p] for p in cut]
        context.lost(
            self.name,
            'content_cut',
            f'nested deeper than {MAX_PARSE_DEPTH} levels, which no provider can be sent',
            [make_request(parts)],
            what=f'the deepest part of {len(parts)} tool return(s)',
        )
        return replace_pieces(messages, {(len(messages) - 1, p, None): r for p, r in cut.items()})

    async def _reduce(
        self, messages: list[ModelMessage], context: HistoryContext, *, start: int
    ) -> list[ModelMessage]:
        """Plan and reduce the newest request's large tool returns within the artifact budget; older ones were
        decided when they arrived (rewriting them would break the prompt cache)."""
        settings = self.settings
        candidates = await self._candidates(messages, context, start=start)
        if not candidates:
            return messages
        planned = [_reduced(c, settings.reducers, context) for c in candidates]
        sizes = settings.sizes(context.limits)
        large = [c for c in planned if c.artifact.tokens > sizes.large]
        reduced = [c for c in planned if c.reduced_by]
        if not reduced and (not large or sum(c.artifact.tokens for c in planned) < sizes.skip_below):
            return messages
        planned = [_counted(c, context.counter) for c in planned]  # a plan weighs exact counts
        available = settings.resolve_budget(context.limits)
        question = latest_question(messages)
        plan = await self._plan(planned, question, available, context)
        outcomes = await self._execute(plan, planned, question, available, context, shown=messages[:start])
        return _apply(messages, planned, outcomes)

    async def _candidates(
        self, messages: Sequence[ModelMessage], context: HistoryContext, *, start: int
    ) -> list[Candidate]:
        """`find_candidates` from `start`, in a thread when large (20 MB would stall the event loop)."""
        settings = self.settings
        search = functools.partial(
            find_candidates,
            messages,
            count_tokens=_CandidateCount(
                context.counter, settings.sizes(context.limits).large, settings.reducers
            ),
            # the read-back tool as the running processor names it (a planner in its stages has the default)
            exempt_tools=exempting_readback(settings, readback_tool()).exempt_tools,
            start=start,
            memo=self._examined,
            make_id=context.artifact_id,  # the memo keeps the id it made: the stage reads these next
        )
        return await context.off_loop(search) if large_content(messages[-1:]) else search()

    def _newest_room(
        self, messages: Sequence[ModelMessage], context: HistoryContext
    ) -> tuple[int, int] | None:
        """The newest request's room and the most it could carry, or None when nothing must be cut from it
        (older messages are the compactor's and the window's)."""
        estimate = context.estimate(messages)
        if estimate.total <= self.settings.hard_limit(context.limits) or not isinstance(
            messages[-1], ModelRequest
        ):
            return None
        return newest_room(messages, estimate, context, floor=self.settings.resolve_budget(context.limits))

    async def will_name_readback(self, messages: Sequence[ModelMessage], context: HistoryContext) -> bool:
        """Whether processing `messages` certainly leaves a note naming `read_artifact` in this request (asked
        before its tools are prepared, so the tool comes with the note); reads only the current request."""
        if not messages:
            return False
        if context.fits_proved(messages) and not self._large_newest(messages, context):
            return False  # proved within its limit (nothing to cut), and nothing large to plan
        budget = self.settings.resolve_budget(context.limits)
        await context.count_newest(messages)
        candidates = await self._candidates(messages, context, start=len(messages) - 1)
        large = self.settings.sizes(context.limits).large
        if any(c.artifact.tokens > large and c.artifact.tokens > budget for c in candidates):
            return True
        return self._newest_room(messages, context) is not None

    # ---- planning -------------------------------------------------------------------------------------

    async def _plan(
        self, candidates: Sequence[Candidate], question: str, budget: int, context: HistoryContext
    ) -> ArtifactPlan:
        settings = self.settings
        if settings.uses_llm_planning:
            price = model_info(context.model).input_price_per_mtok if context.model is not None else None
            choice = should_use_llm_planning(
                [c.artifact for c in candidates],
                budget_tokens=budget,
                input_price_per_mtok=price,
                settings=settings,
                sizes=settings.sizes(context.limits),
            )
            model = settings.planner_model if settings.planner_model is not None else context.summarizer_model
            if choice and model is not None:
                # a span of our own: the planner's request nests under the stage's (see `DeferredSpans`)
                with context.span(PLAN_SPAN, {'pydantic_ai_history.artifacts.candidates': len(candidates)}):
                    plan, failure = await llm_plan(
                        candidates,
                        question=question,
                        budget_tokens=budget,
                        model=model,
                        settings=settings,
                        operations=operations_of(context),
                    )
                if failure is not None:
                    context.warn(
                        'artifact_planner_failed',
                        f'the LLM planner failed ({failure}); used the heuristic plan',
                    )
                logger.info('artifacts: LLM plan (%s): %s', choice.reason, plan.reasoning[:200])
                return plan
            logger.debug('artifacts: heuristic plan (%s)', choice.reason)
        sizes = settings.sizes(context.limits)
        return heuristic_plan(
            candidates, question=question, budget_tokens=budget, settings=settings, sizes=sizes
        )

    # ---- executing ------------------------------------------------------------------------------------

    async def _execute(
        self,
        plan: ArtifactPlan,
        candidates: Sequence[Candidate],
        question: str,
        budget: int,
        context: HistoryContext,
        *,
        shown: Sequence[ModelMessage] = (),
    ) -> dict[str, _Outcome]:
        """Each candidate's outcome under `plan`; a view that a return in `shown` (the history before the
        newest request) already shows of the same content becomes a line naming it (`repeat`)."""
        settings = self.settings
        counter = context.counter
        by_id = {c.id: c for c in candidates}
        remaining = budget
        sizes = settings.sizes(context.limits)
        large_left = sum(1 for c in candidates if c.artifact.tokens > sizes.large)
        outcomes: dict[str, _Outcome] = {}
        for decision in plan.ordered():
            candidate = by_id.get(decision.artifact_id)
            if candidate is None or candidate.id in outcomes:
                continue
            a = candidate.artifact
            if a.tokens > sizes.large:
                large_left -= 1
            strategy, rationale, allowance = _fitted_strategy(
                decision, candidate, remaining, large_left, sizes
            )
            replaces = strategy is not ProcessingStrategy.INCLUDE_FULL or candidate.reduced_by is not None
            if replaces and not await _spill(candidate, context):
                # a reduction the store cannot back is not made (the request's fit still cuts what must go)
                outcome = _Outcome(None, 'include_full', rationale + '; kept inline: the store failed')
            else:
                outcome = await self._apply_strategy(
                    candidate, strategy, decision, question, allowance, rationale, context
                )
                outcome = _unless_shown(outcome, candidate, shown)
            outcomes[candidate.id] = outcome
            after = a.tokens if outcome.text is None else counter.count_part(_new_part(candidate, outcome))
            remaining = max(remaining - after, 0)
            why, hit = outcome.rationale, outcome.cache_hit
            report_artifact(context, a.id, a.source, outcome.strategy, a.tokens, after, why, hit)
            logger.info(
                'artifacts: %s %s (%s): %s, %d -> %d tokens',
                a.id[:16],
                a.source,
                outcome.strategy,
                outcome.rationale[:120],
                a.tokens,
                after,
            )
        return outcomes

    async def _apply_strategy(
        self,
        candidate: Candidate,
        strategy: ProcessingStrategy,
        decision: ArtifactDecision,
        question: str,
        allowance: int,
        rationale: str,
        context: HistoryContext,
    ) -> _Outcome:
        settings = self.settings
        default_query = query_for(candidate, question)
        room = max(allowance - _HEADER_TOKENS, 50)
        if strategy is ProcessingStrategy.INCLUDE_FULL:
            text = reduced_text(candidate) if candidate.reduced_by else None
            return _Outcome(text, 'include_full', rationale)
        if strategy is ProcessingStrategy.SUMMARIZE:
            focus = decision.summarization_focus or default_query or None
            try:
                summary, hit = await self._summary(
                    candidate, focus, min(settings.artifact_summary_max_tokens, room), context
                )
            except Exception as exc:
                reason = f'{type(exc).__name__}: {exc}'[:200]
                context.warn(
                    'artifact_summary_failed',
                    f'summarizing {candidate.id[:16]} failed ({reason}); extracted instead',
                )
                rationale += f'; summary failed ({reason}), extracted instead'
            else:
                return _Outcome(
                    summary_text(candidate, summary, focus), 'summarize', rationale, cache_hit=hit
                )
            query = ' '.join(q for q in (decision.summarization_focus, default_query) if q)
        elif strategy is ProcessingStrategy.EXTRACT:
            query = decision.extraction_query or default_query
        else:
            return _Outcome(exclude_stub(candidate, settings.stub_preview_chars), 'exclude', rationale)
        extract = functools.partial(
            extract_text,
            candidate,
            query,
            allowance - _overhead(candidate, context),
            context.counter,
            chunk_chars=settings.chunk_chars,
        )
        text = await context.off_loop(extract) if _large(candidate) else extract()
        return _Outcome(text, 'extract', rationale)

    async def _summary(
        self, candidate: Candidate, focus: str | None, max_tokens: int, context: HistoryContext
    ) -> tuple[str, bool]:
        settings = self.settings
        summarizer = context.summarizer
        model = context.summarizer_model
        if model is None:
            raise RuntimeError('no summarizer model: set SummarizerSettings.model')
        content_id = functools.partial(_content_id, candidate.original)
        key = cache_key(
            'artifact-summary',
            await context.off_loop(content_id) if _large(candidate) else content_id(),
            focus or '',
            model_name_of(model) or type(model).__name__,
            str(max_tokens),
            *((repr(summarizer.model_settings),) if summarizer.model_settings is not None else ()),
        )
        if context.cache is not None:
            cached = await context.cache.get(key)
            if cached is not None:
                return cached, True
        counter = context.counter
        text = candidate.text
        input_cap = summarizer.input_cap(model_info(model).context_window, answer_tokens=max_tokens)
        if counter.count_text(text) > input_cap:
            from ...readback._retrieval import (
                extract_passages,  # loaded by the first use, not with the package
            )

            chars = int(input_cap * len(text) / max(counter.count_text(text), 1))
            cut = functools.partial(extract_passages, text, focus, chars, chunk_chars=settings.chunk_chars)
            text = (await context.off_loop(cut) if _large(candidate) else cut()).text
        with context.span(SUMMARY_SPAN, {'pydantic_ai_history.artifacts.max_tokens': max_tokens}):
            summary = await summarize_text(
                text,
                focus=focus,
                model=model,
                max_tokens=max_tokens,
                timeout=summarizer.timeout,
                operations=operations_of(context),
            )
        if counter.count_text(summary) > max_tokens:
            summary = counter.truncate_text(summary, max_tokens)
        if context.cache is not None:
            await context.cache.set(key, summary)
        return summary, False

    # ---- attachments ----------------------------------------------------------------------------------

    async def _attachments(
        self, messages: list[ModelMessage], context: HistoryContext, *, start: int, over_limit: bool
    ) -> list[ModelMessage]:
        """Convert or fit attached files; under the hard limit, those the model takes as they are stay."""
        # decoding data URLs and hashing a file's bytes (its identifier) leave the event loop when large
        find = functools.partial(find_attachments, messages, start=start)
        attachments = await context.off_loop(find) if large_content(messages[start:]) else find()
        if not over_limit and attachments:
            attachments = self._not_taken_as_is(attachments, context)
        if not attachments:
            return messages
        replaced: dict[tuple[int, int, int | None], list[Any]] = {}
        for attachment in attachments:
            part = messages[attachment.message_index].parts[attachment.part_index]
            items = self._inlined(attachment, context, over_limit) or await self._attachment_items(
                attachment, part, context
            )
            if items is not None:
                replaced[(attachment.message_index, attachment.part_index, attachment.item_index)] = items
        if not replaced:
            return messages
        new_parts: dict[tuple[int, int], Any] = {}
        for m_index, p_index in {(m, p) for m, p, _ in replaced}:
            part = messages[m_index].parts[p_index]
            whole = replaced.get((m_index, p_index, None))
            if whole is not None:
                content: Any = whole[0] if len(whole) == 1 and isinstance(whole[0], str) else whole
            else:
                listed = enumerate(cast('Sequence[Any]', part.content))  # type: ignore[union-attr]
                content = [new for i, item in listed for new in replaced.get((m_index, p_index, i), [item])]
            new_parts[(m_index, p_index)] = dataclasses.replace(part, content=content)
        return with_parts(messages, new_parts)

    def _not_taken_as_is(self, attachments: list[Attachment], context: HistoryContext) -> list[Attachment]:
        if is_test_model(context.model):
            return []  # pydantic-ai's test models take any file: what the app sent stays as it is
        profile = file_input_profile(context.model)
        settings = self._file_settings(context)
        return [a for a in attachments if not self._passes_as_is(a, profile, settings)]

    def _inlined(self, attachment: Attachment, context: HistoryContext, over_limit: bool) -> list[Any] | None:
        """A small plain-text file as its own text where the profile cannot say the model reads text documents
        (1.x) and the history fits; None otherwise."""
        if over_limit or file_input_profile(context.model) is not None:
            return None
        identifier = attachment.name or attachment.id[:12]
        text = inline_text(attachment.media_type, attachment.data, identifier, self._file_settings(context))
        return [text] if text is not None else None

    def _file_settings(self, context: HistoryContext) -> FileSettings:
        """The file settings with the (strictest) serving provider's limits where none were set."""
        return self.settings.file_settings.for_model(strictest_file_model(context.model))

    def _passes_as_is(
        self, attachment: Attachment, profile: Mapping[str, Any] | None, settings: FileSettings | None = None
    ) -> bool:
        """A file the serving model accepts, within the file limits, that no check here must first read: a
        recognised image goes to the converter (kept byte for byte when it fits), an unrecognised one is the
        provider's to judge, as without us."""
        if not accepted_as_is(attachment.media_type, profile):
            return False
        limits = settings if settings is not None else self.settings.file_settings
        if not fits_as_is(attachment.media_type, len(attachment.data), limits):
            return False
        return not attachment.media_type.startswith('image/') or unidentified_image(attachment.data)

    async def _attachment_items(
        self, attachment: Attachment, part: Any, context: HistoryContext
    ) -> list[Any] | None:
        """What replaces one attached file, or None to keep it (it fits, or it could not be stored and the
        model takes it as it is). One no model takes is replaced even unstored (sent, it is rejected)."""
        large = is_large(attachment.data)  # hashing, converting and counting 200 MB leave the event loop
        ids = functools.partial(_attachment_ids, context, attachment.data)
        plain_id, a_id = await context.off_loop(ids) if large else ids()
        converted, hit = await self._read(attachment, plain_id, context)
        if _unchanged(converted):
            return None
        label = (
            f'attached file {attachment.name} ({attachment.media_type})'
            if attachment.name
            else (f'an attached {attachment.media_type} file')
        )
        stored = await _store_attachment(attachment, a_id, label, context)
        if not stored and self._passes_as_is(attachment, file_input_profile(context.model)):
            return None  # the warning said so: the model reads the file as it is
        items, strategy, after_text = _attachment_note(converted, attachment, a_id, stored)
        if not stored:
            context.lost(
                self.name,
                'attachment_not_sendable',
                f'{label} ({attachment.media_type}, {len(attachment.data):,} bytes) could not be stored '
                f'and no model takes it as it is; a note replaced it ({converted.manifest})',
                [make_request([part])],
                what='an attached file replaced by a note',
            )
        counter = context.counter
        original = BinaryContent(data=attachment.data, media_type=attachment.media_type)
        count = functools.partial(counter.count_part, _user_like(original))
        before = await context.off_loop(count) if large else count()
        after = counter.count_text(after_text) + (
            counter.count_part(_user_like(items[0])) if strategy == 'fit' else 0
        )
        report_artifact(context, a_id, label, strategy, before, after, converted.manifest, hit)
        logger.info('artifacts: attachment %s (%s) %s: %s', a_id[:16], label, strategy, converted.manifest)
        return items

    async def _read(
        self, attachment: Attachment, plain_id: str, context: HistoryContext
    ) -> tuple[FileResult, bool]:
        settings = self._file_settings(context)
        is_document = not attachment.media_type.startswith(('image/', 'audio/'))
        key = cache_key('artifact-convert', plain_id, settings.fingerprint())
        if is_document and context.cache is not None:
            cached = await context.cache.get(key)
            if cached is not None:
                try:
                    return ConvertedDocument.from_json(cached), True
                except Exception:
                    pass
        result = await operations_of(context).convert_file(
            attachment.data,
            media_type=attachment.media_type,
            name=attachment.name,
            model_name=strictest_file_model(context.model) or context.counter.model_name,
            settings=settings,
        )
        if isinstance(result, ConvertedDocument) and context.cache is not None:
            await context.cache.set(key, result.to_json())
        return result, False


# ---- helpers --------------------------------------------------------------------------------------------


def _attachment_ids(context: HistoryContext, data: bytes) -> tuple[str, str]:
    """A file's plain content hash (for cache keys) and its id in the run's scope (for the store)."""
    return artifact_id(data), context.artifact_id(data)


def _unchanged(converted: FileResult) -> bool:
    """An image or audio clip the converter left as it was: nothing replaces it."""
    if isinstance(converted, FittedImage):
        return not converted.changes
    if isinstance(converted, FittedAudio):
        return not converted.truncated
    return False


async def _store_attachment(attachment: Attachment, a_id: str, label: str, context: HistoryContext) -> bool:
    """Store the file's original bytes; False (with a warning) when there is no store or it fails."""
    if context.store is None:
        context.warn('artifact_store_failed', f'could not store attachment {a_id[:16]} (no artifact store)')
        return False
    return await context.store_original(a_id, attachment.data, media_type=attachment.media_type, source=label)


def _attachment_note(
    converted: FileResult, attachment: Attachment, a_id: str, stored: bool
) -> tuple[list[Any], str, str]:
    """What stands for a file: its markdown (a document), its fitted form and a note (an image or clip), or a
    note alone (unreadable); the strategy's name and the note's text."""
    lost = '' if stored else '; the original could not be stored and is not in this conversation'
    if isinstance(converted, ConvertedDocument):
        text = seal(
            'artifact',
            f'{ARTIFACT_MARKER} {a_id} | attached file {converted.manifest}{lost}]\n{converted.text}',
        )
        return [text], 'convert', text
    if isinstance(converted, (FittedImage, FittedAudio)):
        original = f'original ({attachment.media_type}) stored' if stored else lost.removeprefix('; ')
        note = seal('artifact', f'{ARTIFACT_MARKER} {a_id} | {converted.manifest}; {original}]')
        return [BinaryContent(data=converted.data, media_type=converted.media_type), note], 'fit', note
    note = seal('artifact', f'{ARTIFACT_MARKER} {a_id} | {converted.manifest}{lost}]')
    return [note], 'convert', note


def _user_like(item: Any) -> UserPromptPart:
    """`item` as a user prompt's content, to count what it costs there."""
    return UserPromptPart(content=[item])


def _content_id(text: str) -> str:
    """A text's plain hash for cache keys by content (an artifact id is keyed per store and scope)."""
    return artifact_id(utf8(text))


def _large(candidate: Candidate) -> bool:
    """Whether working on the candidate's text belongs off the event loop."""
    return max(len(candidate.text), len(candidate.original)) > OFF_LOOP_CHARS


def _overhead(candidate: Candidate, context: HistoryContext) -> int:
    """Tokens a tool return costs beyond its text (framing, the tool name)."""
    counter = context.counter
    profile = counter.tokenizer_profile
    name = candidate.artifact.tool_name or ''
    return math.ceil((profile.tool_call_overhead + counter.count_text(name)) * profile.correction) + 2


class _CandidateCount:
    """A candidate's tokens: its byte-length bound (`TokenCounter.part_bound`, no tokenizer) when that proves
    it small and no reducer reads it (no decision then depends on the exact figure: a small output without a
    reducer is left as it is), else its count."""

    __slots__ = ('counter', 'large', 'reducers')

    def __init__(self, counter: TokenCounter, large: int, reducers: Mapping[str, Reducer]) -> None:
        self.counter, self.large, self.reducers = counter, large, reducers

    def __call__(self, part: Any) -> int:
        if getattr(part, 'tool_name', None) not in self.reducers:
            bound = self.counter.part_bound(part)
            if bound is not None and bound <= self.large:
                return bound
        return self.counter.count_part(part)

    def __eq__(self, other: object) -> bool:  # the candidate memo keeps what an equal count found
        return (
            isinstance(other, _CandidateCount)
            and other.counter is self.counter
            and other.large == self.large
            and other.reducers is self.reducers
        )

    __hash__ = None  # type: ignore[assignment]


def _counted(candidate: Candidate, counter: TokenCounter) -> Candidate:
    """The candidate with its exact count where `_CandidateCount` gave a bound (a reduced one is counted)."""
    if candidate.reduced_by or candidate.source_part is None:
        return candidate
    tokens = counter.count_part(candidate.source_part)
    if tokens == candidate.artifact.tokens:
        return candidate
    artifact = candidate.artifact.model_copy(update={'tokens': tokens})
    return dataclasses.replace(candidate, artifact=artifact)


def _reduced(candidate: Candidate, reducers: Mapping[str, Reducer], context: HistoryContext) -> Candidate:
    """The candidate as its tool's reducer leaves it; itself when there is none, it raises (with a warning) or
    it does not make the text shorter."""
    a = candidate.artifact
    reducer = reducers.get(a.tool_name or '')
    if reducer is None:
        return candidate
    try:
        reduced = reducer(candidate.source_part.content)
        text = reduced if isinstance(reduced, str) else json_text(reduced)
    except Exception as exc:
        context.warn(
            'artifact_reducer_failed', f'the reducer of {a.tool_name!r} raised {type(exc).__name__}: {exc}'
        )
        return candidate
    if len(text) >= len(candidate.text):
        return candidate
    tokens = corrected(context.counter, text)
    metadata = {**a.metadata, 'original_chars': str(a.chars)}
    artifact = a.model_copy(update={'chars': len(text), 'tokens': tokens, 'metadata': metadata})
    return dataclasses.replace(candidate, artifact=artifact, text=text, reduced_by=a.tool_name)


def _unless_shown(outcome: _Outcome, candidate: Candidate, shown: Sequence[ModelMessage]) -> _Outcome:
    """The outcome, or a line naming the artifact when an earlier return shows the same view of it."""
    if outcome.text is None or not shown_before(shown, candidate.id, view_body(outcome.text)):
        return outcome
    rationale = outcome.rationale + f'; its {outcome.strategy} view stands in an earlier return'
    return _Outcome(repeat_text(candidate), 'repeat', rationale, outcome.cache_hit)


def _replacement(candidate: Candidate, outcome: _Outcome) -> Replacement:
    """What stands for the candidate's text: the outcome, marked with the stored original's id."""
    assert outcome.text is not None
    marker = stored_marker(candidate.id, candidate.artifact.tokens, outcome.strategy)
    if candidate.reduced_by:
        marker['reducer'] = candidate.reduced_by
    return Replacement(outcome.text, marker)


def _new_part(candidate: Candidate, outcome: _Outcome) -> Any:
    return replaced_part(candidate.source_part, {None: _replacement(candidate, outcome)})


async def _spill(candidate: Candidate, context: HistoryContext) -> bool:
    """Store the exact original before anything replaces it; False (and a warning) when that fails."""
    store = context.store
    if store is None:
        context.warn('artifact_store_missing', f'no artifact store: {candidate.id[:16]} kept inline')
        return False
    data = await context.off_loop(utf8, candidate.original) if _large(candidate) else utf8(candidate.original)
    a = candidate.artifact
    return await context.store_original(
        candidate.id,
        data,
        media_type=candidate.media_type,
        source=a.source,
        metadata={'tool_name': a.tool_name or '', 'message': str(a.step)},
        consequence='; the content stays inline',
    )


def _apply(
    messages: list[ModelMessage], candidates: Sequence[Candidate], outcomes: dict[str, _Outcome]
) -> list[ModelMessage]:
    replacements: dict[Place, Replacement] = {
        (c.message_index, c.part_index, None): _replacement(c, outcome)
        for c in candidates
        if (outcome := outcomes.get(c.id)) is not None and outcome.text is not None
    }
    return replace_pieces(messages, replacements) if replacements else messages


history_processor_annotations(ArtifactPlanner)
