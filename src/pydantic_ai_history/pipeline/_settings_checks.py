"""What the capability checks about its settings at construction, so that settings that cannot work fail
there, naming the field: each field's type, a settings object from a mapping (an agent spec), tool names, and
a compaction tool with nothing to run it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..budget._policy import ContextPolicyError
from ..budget.model_info import ContextWindowUnknownError
from ..cache import SummaryCache
from ..context._context import HistoryStage
from ..context._summarizer_settings import check_model_ref
from ..messages._marks import READ_ARTIFACT_TOOL
from ..store import ArtifactStore
from ._agent_checks import TOOL_NAME
from ._compaction_tool import CompactionTool

if TYPE_CHECKING:
    from ..context._artifact_settings import ArtifactSettings

_SettingsT = TypeVar('_SettingsT')


def _token_profile_types() -> tuple[type[Any], ...]:
    """What `token_profile` takes (its class loads with the first profile given, or the first request)."""
    from ..tokens import TokenizerProfile  # the counter's module loads when a profile is checked

    return (TokenizerProfile, type(None))


FieldTypes = type[Any] | tuple[type[Any], ...] | Callable[[], tuple[type[Any], ...]]
"""The types a field takes, or (for a type whose module loads late) a function that returns them: such a
field also takes None."""

FIELD_TYPES: tuple[tuple[str, FieldTypes, str], ...] = (
    ('id', (str, type(None)), 'a string or None'),
    ('keep_first_user_message', bool, 'True or False'),
    ('token_profile', _token_profile_types, 'a TokenizerProfile or None'),
    ('cache', SummaryCache, 'a SummaryCache, e.g. MemoryCache() or SQLiteCache(path)'),
    ('store', ArtifactStore, "an ArtifactStore, e.g. DirectoryStore('artifacts/') or MemoryStore()"),
    ('max_tracked_runs', int, 'a whole number'),
)
"""Each field of `HistoryCapability` whose type is checked at construction, its types, and what to say
instead."""


def coerce_settings(kind: type[_SettingsT], value: object, name: str) -> _SettingsT:
    """A settings object from itself or from a mapping of its fields (an agent spec's YAML or JSON)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, dict):
        return kind(**value)
    raise TypeError(
        f'{name} must be a {kind.__name__} or a mapping of its fields, got {type(value).__name__}'
    )


def coerce_switch(kind: type[_SettingsT], value: object, name: str) -> _SettingsT | bool:
    """An optional feature's setting: True or False, else as `coerce_settings`."""
    return value if isinstance(value, bool) else coerce_settings(kind, value, name)


def check_fields(processor: Any) -> None:
    """Every field's type, at construction and with its name (a path given as the store, a YAML string given
    as a flag), rather than an `AttributeError` at the first request."""
    for name, given, expected in processor._field_types:
        value = getattr(processor, name)
        if value is None and not isinstance(given, (type, tuple)):
            continue  # a field whose types load late takes None: nothing to load
        kinds = given if isinstance(given, (type, tuple)) else given()
        if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool)):
            got = f'{type(value).__name__} {value!r}'
            raise TypeError(f'{type(processor).__name__}.{name} must be {expected}, got {got}')
    for name in ('pin', 'scope', 'on_history_event'):
        value = getattr(processor, name)
        if value is not None and not callable(value):
            kind = type(processor).__name__
            raise TypeError(f'{kind}.{name} must be callable or None, got {type(value).__name__}')
    check_model_ref(processor.model, f'{type(processor).__name__}.model')


CONFIG_ERRORS = (ContextWindowUnknownError, ContextPolicyError)
"""Configuration errors: raised out of the run (everything else is caught, logged and the history kept)."""


def exempting_readback(settings: ArtifactSettings, tool_name: str) -> ArtifactSettings:
    """The artifact settings with the read-back tool, under its configured name, exempt from planning."""
    if tool_name == READ_ARTIFACT_TOOL or READ_ARTIFACT_TOOL not in settings.exempt_tools:
        return settings
    exempt = (settings.exempt_tools - {READ_ARTIFACT_TOOL}) | {tool_name}
    return dataclasses.replace(settings, exempt_tools=frozenset(exempt))


def enabled_settings(kind: type[_SettingsT], value: _SettingsT | bool) -> _SettingsT | None:
    """The settings of an optional feature: its own, its defaults for True, None when it is off."""
    if value is True:
        return kind()
    return None if value is False else value


def compaction_stage(stages: Sequence[HistoryStage]) -> Any:
    """The stage that compacts on demand (`compact_history`), or None."""
    return next((stage for stage in stages if hasattr(stage, 'compact_history')), None)


def check_compaction_tool(tool: CompactionTool, stages: Sequence[HistoryStage], readback_name: str) -> None:
    """A compaction tool needs a stage that compacts, and a name of its own (settings that cannot work fail
    here, naming the field)."""
    if compaction_stage(stages) is None:
        raise ValueError(
            'compaction_tool needs a compaction stage, but this capability has none '
            '(compaction=False, or stages= without a Compactor): the model could ask for a compaction that '
            'nothing would run'
        )
    check_tool_name('CompactionTool.name', tool.name, also=readback_name)


def check_tool_name(field: str, name: object, also: str | None = None) -> None:
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name) or name == also:
        differ = ' and differ from the read-back tool' if also is not None else ''
        raise ValueError(
            f'{field} must be a tool name providers accept (letters, digits, _ and -, at most 64, starting '
            f'with a letter or _){differ}, got {name!r}'
        )
