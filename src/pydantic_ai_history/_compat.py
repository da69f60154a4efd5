"""The only module that knows pydantic-ai 1.x from 2.x: everything version-dependent (part classes,
capabilities, metadata, `run_id`), resolved once at import by feature detection, never by version number."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_args

from pydantic_ai import messages as _m
from pydantic_ai import tools as _tools
from pydantic_ai.messages import (
    BinaryContent,
    FileUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.usage import RunUsage

_DepsT = TypeVar('_DepsT')


# 1.x late and 2.x call them Native*, 1.0 calls them Builtin*. Late 1.x keeps Builtin* as a deprecated alias:
# look it up only when Native* is missing, so importing this module does not raise a deprecation warning.
def _first_present(*names: str) -> tuple[type[Any], ...]:
    name = next(n for n in names if n in vars(_m))
    return (vars(_m)[name],)


NATIVE_TOOL_CALL_PARTS = _first_present('NativeToolCallPart', 'BuiltinToolCallPart')
NATIVE_TOOL_RETURN_PARTS = _first_present('NativeToolReturnPart', 'BuiltinToolReturnPart')
COMPACTION_PART: type[Any] | None = getattr(_m, 'CompactionPart', None)
RETRY_FEEDBACK_PART: type[Any] | None = getattr(_m, 'RetryFeedbackPart', None)
FILE_PART: type[Any] | None = getattr(_m, 'FilePart', None)
SPEECH_PART: type[Any] | None = getattr(_m, 'SpeechPart', None)
CACHE_POINTS: tuple[type[Any], ...] = tuple(vars(_m)[n] for n in ('CachePoint',) if n in vars(_m))
"""`CachePoint` (a prompt-caching marker inside user content, not content) for isinstance checks; on 1.0,
which has none, the tuple is empty and matches nothing."""


def _union_classes(annotation: Any) -> frozenset[type[Any]]:
    """The classes named in a (possibly `Annotated`) union such as `ModelRequestPart`."""
    found: set[type[Any]] = set()
    stack = [annotation]
    while stack:
        item = stack.pop()
        if isinstance(item, type):
            found.add(item)
        else:
            stack.extend(get_args(item))
    return frozenset(found)


# On-demand capabilities (2.x): the parts that record which capabilities are loaded and which tools were
# revealed. Where they are missing (1.x) nothing can be loaded on demand and the feature is a no-op.
CAPABILITY_LOAD_DELTA_PART: type[Any] | None = getattr(_m, 'CapabilityLoadDeltaPart', None)
TOOL_AVAILABILITY_DELTA_PART: type[Any] | None = getattr(_m, 'ToolAvailabilityDeltaPart', None)
INSTRUCTION_DELTA_PART: type[Any] | None = getattr(_m, 'InstructionDeltaPart', None)
LOAD_CAPABILITY_CALL_PART: type[Any] | None = getattr(_m, 'LoadCapabilityCallPart', None)
LOAD_CAPABILITY_RETURN_PART: type[Any] | None = getattr(_m, 'LoadCapabilityReturnPart', None)
_POST_COMPACTION_WINDOW: Callable[[Sequence[ModelMessage]], list[ModelMessage]] | None = getattr(
    _m, 'post_compaction_window', None
)
HAS_DEFERRED_CAPABILITIES = None not in (
    CAPABILITY_LOAD_DELTA_PART,
    TOOL_AVAILABILITY_DELTA_PART,
    LOAD_CAPABILITY_CALL_PART,
    LOAD_CAPABILITY_RETURN_PART,
    _POST_COMPACTION_WINDOW,
)
"""Whether this pydantic-ai has on-demand capabilities (`defer_loading=True`, the `load_capability` tool)."""


def post_compaction_window(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """pydantic-ai's own boundary for state derived from history (loaded capabilities, revealed tools): the
    messages from its latest `CompactionPart` on; the whole history where the version has no such rule."""
    if _POST_COMPACTION_WINDOW is None:
        return list(messages)
    return _POST_COMPACTION_WINDOW(messages)


def tool_availability_text(part: object) -> str | None:
    """What the model reads for a `ToolAvailabilityDeltaPart` (pydantic-ai's announcement naming the tools, on
    a model without a native channel for it), or None when `part` is not one. Not user content."""
    if TOOL_AVAILABILITY_DELTA_PART is None or not isinstance(part, TOOL_AVAILABILITY_DELTA_PART):
        return None
    if not part.tools_added:
        return ''  # pydantic-ai drops a delta that adds nothing
    names = ', '.join(f'`{name}`' for name in part.tools_added)
    return _TOOL_AVAILABILITY_ANNOUNCEMENT.format(names=names)


try:
    from pydantic_ai.models import TOOL_AVAILABILITY_ANNOUNCEMENT as _TOOL_AVAILABILITY_ANNOUNCEMENT
except ImportError:  # 1.x: no such part; a later 2.x that moves it: the wording of 2.68
    _TOOL_AVAILABILITY_ANNOUNCEMENT = 'The following tool(s) are now available: {names}'

_REQUEST_PART_CLASSES = _union_classes(ModelRequestPart)
COMPACTION_REQUEST_PART: type[Any] | None = (
    COMPACTION_PART if COMPACTION_PART in _REQUEST_PART_CLASSES else None
)
"""`CompactionPart` where it is a request part (2.x: every provider model sends a request-side one as
framed user-voice text), else None. Late 1.x has the class only as a response part, unfit for a summary."""

try:
    from pydantic_ai.capabilities import AbstractCapability as _AbstractCapability
    from pydantic_ai.capabilities import ProcessHistory as _ProcessHistory
except ImportError:  # pydantic-ai < 1.7x: no capabilities, only history_processors=
    _AbstractCapability = None  # type: ignore[assignment,misc]
    _ProcessHistory = None  # type: ignore[assignment,misc]

try:
    from pydantic_ai.capabilities import ModelFallback as _ModelFallback
except ImportError:  # before pydantic-ai 2.x: a fallback is a `FallbackModel` only
    _ModelFallback = None  # type: ignore[assignment,misc]

HAS_CAPABILITIES = _ProcessHistory is not None
ProcessHistory: Any = _ProcessHistory
AbstractCapability: Any = _AbstractCapability


@dataclasses.dataclass(init=False)
class _NoCapability(Generic[_DepsT]):
    """The capability base on versions without capabilities: the processor is a history processor only."""


if TYPE_CHECKING:
    from pydantic_ai.capabilities import AbstractCapability as _CapabilityType

    CapabilityBase = _CapabilityType
else:
    CapabilityBase = _AbstractCapability if _AbstractCapability is not None else _NoCapability

try:
    from pydantic_ai.capabilities import durable_operation as _durable_operation
except ImportError:  # before pydantic-ai 2.x: no durable operations, every call runs where it is made
    _durable_operation = None  # type: ignore[assignment]


_DURABLE_EXEC_BASES: dict[type, bool] = {}
"""Capability class -> whether a class of `pydantic_ai.durable_exec` is among its bases (at most
`_MAX_CLASSES`: an app has a few)."""
_MAX_CLASSES = 256


def is_durability_capability(capability: object) -> bool:
    """Whether `capability` is a durable engine's (pydantic-ai's `BaseDurabilityCapability`). Its class is
    imported only for a capability with a class of `pydantic_ai.durable_exec` among its bases: importing it
    loads the durable-execution machinery (20-45 ms) an app without a durable engine never needs."""
    kind = type(capability)
    bases = _DURABLE_EXEC_BASES.get(kind)  # asked for every capability of every agent built
    if bases is None:
        if len(_DURABLE_EXEC_BASES) >= _MAX_CLASSES:
            _DURABLE_EXEC_BASES.clear()
        bases = _DURABLE_EXEC_BASES[kind] = any(
            cls.__module__.startswith('pydantic_ai.durable_exec') for cls in kind.__mro__
        )
    if not bases:
        return False
    try:
        from pydantic_ai.durable_exec import BaseDurabilityCapability
    except ImportError:  # before pydantic-ai 2.x
        return False
    return isinstance(capability, BaseDurabilityCapability)


def bound_durable_operation(ctx: object, capability_id: str | None, name: str) -> bool:
    """Whether a durability capability bound operation `name` of capability `capability_id` for the run of
    `ctx` (its calls are journaled). pydantic-ai has no public query (pydantic/pydantic-ai#5477; the public
    `in_durable_context` is true also where ours were not bound), so this is the one place that reads
    `RunContext._durable_operations`; `tests/test_compat.py` fails when it changes."""
    operations = getattr(ctx, '_durable_operations', None)
    return operations is not None and (capability_id, name) in operations


_OperationT = TypeVar('_OperationT', bound=Callable[..., Awaitable[Any]])


def durable_operation(name: str) -> Callable[[_OperationT], _OperationT]:
    """pydantic-ai's `@durable_operation(name=...)` where it exists; elsewhere the method is left as it is."""
    if _durable_operation is None:
        return lambda method: method
    decorate: Callable[[_OperationT], _OperationT] = _durable_operation(name)  # type: ignore[assignment]
    return decorate


try:
    from pydantic_ai.messages import CapabilityEvent as _CapabilityEvent
except ImportError:  # before pydantic-ai 2.x: no capability events in the run's stream
    _CapabilityEvent = None  # type: ignore[assignment,misc]

HAS_CAPABILITY_EVENTS = _CapabilityEvent is not None
"""Whether capabilities can emit typed events into the run's stream (`RunContext.emit`)."""


@dataclasses.dataclass(repr=False, kw_only=True)
class _NoCapabilityEvent:
    """The stream events' base on versions without `CapabilityEvent`: they are defined, never emitted."""

    kind: str = ''
    capability_id: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__()


if TYPE_CHECKING:
    from pydantic_ai.messages import CapabilityEvent as _CapabilityEventType

    CapabilityEventBase = _CapabilityEventType
else:
    CapabilityEventBase = _CapabilityEvent if _CapabilityEvent is not None else _NoCapabilityEvent


try:
    from pydantic_ai.capabilities.instrumentation import Instrumentation as _Instrumentation
except ImportError:  # pydantic-ai 1.0: an agent is instrumented by `Agent(instrument=...)`
    _Instrumentation = None  # type: ignore[assignment,misc]


def instrumented_agent_options(settings: InstrumentationSettings | None) -> dict[str, Any]:
    """`Agent(...)` keywords that instrument a one-off agent with `settings` (none for None): the
    `Instrumentation` capability where pydantic-ai has it, `instrument=` before."""
    if settings is None:
        return {}
    if _Instrumentation is not None:
        return {'capabilities': [_Instrumentation(settings=settings)]}
    return {'instrument': settings}


def instrumentation_of(ctx: object) -> InstrumentationSettings | None:
    """The run's instrumentation settings: its `Instrumentation` capability's (2.x), else its instrumented
    model's (1.x); None when the run is not instrumented, or its context does not carry them (a durable
    engine's activity context)."""
    capabilities = _carried(ctx, 'capabilities')
    if isinstance(capabilities, Mapping):
        for capability in capabilities.values():
            settings = getattr(capability, 'settings', None)
            if isinstance(settings, InstrumentationSettings):
                return settings
    settings = getattr(_carried(ctx, 'model'), 'instrumentation_settings', None)
    return settings if isinstance(settings, InstrumentationSettings) else None


def attempt_models(ctx: object) -> tuple[Any, ...]:
    """The models a `ModelFallback` of the run (2.x; its public `models`, found among the public
    `RunContext.capabilities`) may move an attempt to after the request was processed; none elsewhere."""
    capabilities = _carried(ctx, 'capabilities') if _ModelFallback is not None else None
    if not capabilities:
        return ()
    return tuple(model for c in capabilities.values() if isinstance(c, _ModelFallback) for model in c.models)


def _carried(ctx: object, name: str) -> Any:
    """`ctx.name`, or None: a durable engine's run context raises for what it did not serialize."""
    try:
        return getattr(ctx, name, None)
    except Exception:
        return None


_TOOL_FIELDS = {f.name for f in dataclasses.fields(_tools.ToolDefinition)}
TOOLS_HAVE_METADATA = 'metadata' in _TOOL_FIELDS
"""Whether tool definitions carry `metadata` (late 1.x, 2.x; not 1.0)."""
TOOLS_HAVE_TOOLSET_ID = 'toolset_id' in _TOOL_FIELDS
"""Whether a tool's definition names its toolset (2.x; combined toolsets stamp it)."""

_SYSTEM_PROMPT_FIELDS = frozenset(f.name for f in dataclasses.fields(SystemPromptPart))
REQUEST_SCOPED_PROMPTS = 'scope' in _SYSTEM_PROMPT_FIELDS
"""Whether a system prompt can be request-scoped (2.x): the model sees it only in the request it is part of,
and pydantic-ai leaves it out of later ones (or the provider clears it), so the cached prefix stays."""


def is_request_scoped(part: object) -> bool:
    """Whether `part` is a request-scoped system prompt: a nudge for one request, not the conversation's."""
    return isinstance(part, SystemPromptPart) and getattr(part, 'scope', 'conversation') == 'request'


def request_scoped_prompt(text: str, metadata: Mapping[str, Any]) -> SystemPromptPart:
    """A system prompt for one request (`REQUEST_SCOPED_PROMPTS`), marked with `metadata`; where prompts have
    no scope, a plain one (for the outgoing copy of one request only)."""
    if not REQUEST_SCOPED_PROMPTS:
        return SystemPromptPart(content=text)
    extra: dict[str, Any] = {'scope': 'request', 'metadata': dict(metadata)}  # fields 1.x lacks
    return SystemPromptPart(content=text, **extra)


_REQUEST_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelRequest))
_HAS_REQUEST_METADATA = 'metadata' in _REQUEST_FIELDS
_HAS_RUN_ID = 'run_id' in _REQUEST_FIELDS


def pydantic_ai_version() -> str:
    from importlib.metadata import version

    return version('pydantic-ai-slim')


def answered_call_id(part: ModelRequestPart) -> str | None:
    """The tool call id a request part answers, or None. A `RetryPromptPart` without `tool_name` (an
    output-validation retry) has an auto-generated `tool_call_id` but answers no call."""
    if isinstance(part, ToolReturnPart):
        return part.tool_call_id
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:
        return part.tool_call_id
    return None


def make_request(
    parts: Sequence[ModelRequestPart],
    *,
    run_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> ModelRequest:
    """A new `ModelRequest`, setting `run_id` and `metadata` only where this pydantic-ai has them."""
    kwargs: dict[str, Any] = {}
    if run_id is not None and _HAS_RUN_ID:
        kwargs['run_id'] = run_id
    if metadata is not None and _HAS_REQUEST_METADATA:
        kwargs['metadata'] = dict(metadata)
    return ModelRequest(parts=list(parts), **kwargs)


def part_metadata(part: object) -> Mapping[str, Any]:
    """A part's (or a message's) metadata; empty where the version or the part has none."""
    value = getattr(part, 'metadata', None)
    return value if isinstance(value, Mapping) else {}


message_metadata = part_metadata
"""A message's metadata dict, empty where the version has none."""


def with_part_metadata(part: Any, extra: Mapping[str, Any]) -> Any:
    """A copy of `part` with `extra` merged into its metadata, or the part unchanged if it has no field."""
    if not any(f.name == 'metadata' for f in dataclasses.fields(part)):
        return part
    current = part_metadata(part)
    return dataclasses.replace(part, metadata={**current, **extra})


def result_usage(result: Any) -> RunUsage:
    """An agent run result's `RunUsage`: a method on 1.x, a property on 2.x (where calling is deprecated)."""
    value = result.usage
    usage: RunUsage = value if isinstance(value, RunUsage) else value()
    return usage


def run_id_of(ctx: Any) -> str | None:
    """The run id of a `RunContext` (2.x, late 1.x), None on versions without it."""
    value = getattr(ctx, 'run_id', None)
    return value if isinstance(value, str) else None


def message_run_id(message: object) -> str | None:
    """The run id a message was made in (2.x), None where messages carry none (1.x) or it was not set."""
    value = getattr(message, 'run_id', None)
    return value if isinstance(value, str) and value else None


def is_media(item: object) -> bool:
    """Whether a content item is a file: `BinaryContent` or a `FileUrl`. By type, never by
    `hasattr(item, 'media_type')`: `FileUrl.media_type` raises when it cannot guess the type."""
    return isinstance(item, (BinaryContent, FileUrl))


def media_type_of(item: object) -> str:
    """A file item's media type, or '' when a URL does not say (a link without a file extension)."""
    try:
        value = getattr(item, 'media_type', None)
    except Exception:
        return ''
    return value if isinstance(value, str) else ''


def decode_data_url(url: str) -> tuple[bytes, str] | None:
    """The bytes and media type of a `data:` URL (base64 or percent-encoded, RFC 2397); None for any other
    URL or undecodable data."""
    import base64
    import binascii
    from urllib.parse import unquote_to_bytes

    if not url.startswith('data:'):
        return None
    header, _, payload = url.partition(',')
    params = [p.strip() for p in header[5:].split(';')]
    media_type = params[0].lower() or 'application/octet-stream'  # sniffing decides what it is
    if 'base64' not in (p.lower() for p in params[1:]):
        return unquote_to_bytes(payload), media_type
    try:
        return base64.b64decode(unquote_to_bytes(payload), validate=False), media_type
    except (ValueError, binascii.Error):
        return None


PROFILE_FILE_INPUT: bool = 'supports_image_input' in frozenset(getattr(ModelProfile, '__annotations__', {}))
"""Whether model profiles say which files the model takes (`supports_image_input`, `supports_document_input`,
`supported_document_media_types`): 2.x."""


# ---- provider-native compaction (`Model.compact_messages`, pydantic-ai 2.x) ---------------------------


def is_compaction_response(message: ModelMessage) -> bool:
    """Whether `message` is a `ModelResponse` holding a `CompactionPart`: its usage measured the conversation
    it replaced, so it is no anchor for a size estimate."""
    return (
        COMPACTION_PART is not None
        and isinstance(message, ModelResponse)
        and any(isinstance(p, COMPACTION_PART) for p in message.parts)
    )


def _innermost_model(model: object) -> tuple[object, bool]:
    """The model under every wrapper (`WrapperModel.wrapped`), and whether a durable one was among them."""
    durable = False
    seen = 0
    while seen < 32:  # a wrapper that wraps itself must not loop forever
        # pydantic-ai's durable model (the run's request model under a durability capability) journals
        # `compact_messages`; it lives in a private module, so it is known by name
        durable = durable or any(c.__name__ == 'DurableModel' for c in type(model).__mro__)
        inner = getattr(model, 'wrapped', None)
        if inner is None or inner is model:
            break
        model, seen = inner, seen + 1
    return model, durable


def compaction_unavailable(model: object, *, journaled: bool) -> str | None:
    """Why `model` cannot compact natively (`Model.compact_messages`), or None. Not on 1.x (its compaction
    part is a response part only); in a durable run only through its durable model, which journals it."""
    if not COMPACTION_REQUEST_PART:
        return f'pydantic-ai {pydantic_ai_version()} has no provider-native compaction (2.x has)'
    if not isinstance(model, Model):
        return f'the serving model is not known here (got {type(model).__name__})'
    inner, durable = _innermost_model(model)
    if getattr(type(inner), 'compact_messages', None) is Model.compact_messages:
        return f'{type(inner).__name__} does not implement compact_messages'
    if journaled and not durable:
        return 'the run is durable but its serving model is not the durable one: not journaled'
    return None


async def request_compaction(
    model: Any,
    messages: Sequence[ModelMessage],
    *,
    model_settings: Any,
    tool_definitions: Sequence[Any],
    instructions: str | None,
) -> ModelResponse:
    """Ask `model` to compact `messages` (`Model.compact_messages`), with the run's settings and tools;
    raises what the model raises (`NotImplementedError` where unsupported)."""
    from pydantic_ai.models import ModelRequestContext, ModelRequestParameters

    parameters = ModelRequestParameters(
        function_tools=[t for t in tool_definitions if getattr(t, 'kind', 'function') == 'function'],
        output_tools=[t for t in tool_definitions if getattr(t, 'kind', None) == 'output'],
    )
    context = ModelRequestContext(
        model=model,
        messages=list(messages),
        model_settings=model_settings,
        model_request_parameters=parameters,
    )
    as_data = getattr(instructions, 'as_data', None)  # the model's own focus (`ModelFocus`): data, quoted
    if callable(as_data):
        instructions = as_data()
    response: ModelResponse = await model.compact_messages(context, instructions=instructions)
    return response
