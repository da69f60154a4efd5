"""`WarningKind` lists every warning code the package emits, and runs emit no other."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Literal, get_args, get_origin, get_type_hints

import pytest

import pydantic_ai_history
from _history import reply, user
from pydantic_ai_history import (
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SlidingWindow,
)
from pydantic_ai_history import events as events_module
from pydantic_ai_history._compat import HAS_CAPABILITY_EVENTS
from pydantic_ai_history.events import WarningKind

pytestmark = pytest.mark.anyio

PACKAGE = Path(pydantic_ai_history.__file__).parent


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _emitted_codes(tree: ast.AST) -> set[str]:
    """The string literals passed as a warning code: `x.warn(code, ...)`, `x.lost(stage, code, ...)`,
    `x.store_original(..., code=...)` and `HistoryWarning(code=...)` / `ContentLost(code=...)`
    (`warnings.warn` is Python's, not ours)."""
    codes: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ''
        receiver = (
            func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ''
        )
        found: list[str | None] = []
        if name == 'warn' and receiver not in ('warnings', 'logger', 'logging') and node.args:
            found.append(_literal(node.args[0]))
        if name == 'lost' and len(node.args) >= 2:
            found.append(_literal(node.args[1]))
        if name in ('HistoryWarning', 'ContentLost', 'store_original'):
            found.extend(_literal(k.value) for k in node.keywords if k.arg == 'code')
        codes.update(code for code in found if code is not None)
    return codes


def test_warning_kind_lists_exactly_the_codes_the_source_emits():
    emitted: set[str] = set()
    for path in PACKAGE.rglob('*.py'):
        emitted |= _emitted_codes(ast.parse(path.read_text(encoding='utf-8')))
    assert 'empty_history' in emitted
    assert 'window_dropped' in emitted
    assert set(get_args(WarningKind)) == emitted
    assert len(get_args(WarningKind)) == len(set(get_args(WarningKind)))


def test_the_warning_kind_docstring_explains_every_code():
    doc = _docstring_of_warning_kind()
    assert [code for code in get_args(WarningKind) if f'- `{code}`' not in doc] == []


def _docstring_of_warning_kind() -> str:
    tree = ast.parse(Path(events_module.__file__).read_text(encoding='utf-8'))
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == 'WarningKind' for t in node.targets
        ):
            return _literal(getattr(body[i + 1], 'value', None)) or ''
    raise AssertionError('WarningKind is not assigned in events.py')


def test_every_event_field_has_a_docstring() -> None:
    tree = ast.parse(Path(events_module.__file__).read_text(encoding='utf-8'))
    missing = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for i, node in enumerate(cls.body):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                following = cls.body[i + 1] if i + 1 < len(cls.body) else None
                if not (isinstance(following, ast.Expr) and _literal(following.value)):
                    missing.append(f'{cls.name}.{node.target.id}')
    assert missing == []


def test_events_are_keyword_only():
    defined = [
        obj
        for obj in vars(events_module).values()
        if getattr(obj, '__module__', None) == events_module.__name__
    ]
    event_classes = [obj for obj in defined if isinstance(obj, type) and dataclasses.is_dataclass(obj)]
    assert len(event_classes) > 20
    for obj in event_classes:
        assert all(f.kw_only for f in dataclasses.fields(obj)), obj.__name__


def test_warning_kind_is_exported():
    assert pydantic_ai_history.WarningKind is WarningKind
    assert 'WarningKind' in pydantic_ai_history.__all__


async def test_a_processor_run_emits_only_listed_codes():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()], model='my-local-model', on_history_event=events.append
    )
    assert await processor.process([]) == []
    await processor.process([user('task ' + 'word ' * 40_000), reply('ok ' * 20_000), user('now')])
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert 'empty_history' in codes
    assert 'context_window_fallback' in codes
    assert set(codes) <= set(get_args(WarningKind))


async def test_an_over_budget_request_warns_with_a_listed_code():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()], policy=ContextPolicy(budget_tokens=50), on_history_event=events.append
    )
    await processor.process([user('word ' * 500)])
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes
    assert set(codes) <= set(get_args(WarningKind))


def _concrete_events() -> list[type[HistoryEvent]]:
    found, pending = [], [HistoryEvent]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not HistoryEvent and cls.__module__ == events_module.__name__:
            found.append(cls)
    return found


def _distinct(value: object, name: str, number: int) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return f'{value}-{name}'
    if isinstance(value, tuple):
        return tuple(f'{item}-{name}' for item in value)
    assert isinstance(value, (int, float))
    return value + number


def _example(cls: type[HistoryEvent]) -> HistoryEvent:
    """An instance with every required field filled by its type, each with a value of its own."""
    values = {'int': 7, 'str': 'x', 'float': 1.5, 'bool': True, 'tuple[str,': ('x', 'y')}
    hints = get_type_hints(cls)
    kwargs = {}
    for number, f in enumerate(dataclasses.fields(cls)):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            hint = hints[f.name]
            if get_origin(hint) is Literal:  # a `Literal` or an alias of one (`WarningKind`, ...)
                kwargs[f.name] = get_args(hint)[-1]
            else:  # distinct per field, so a field copied from the wrong one shows
                kwargs[f.name] = _distinct(values[str(f.type).split(' ')[0]], f.name, number)
    return cls(run_id='run-1', **kwargs)


def test_every_history_event_kind_has_its_stream_event() -> None:
    """The run's event stream shows every decision `on_event` receives, under the package's namespace."""
    kinds = _concrete_events()
    assert len(kinds) >= 8
    for cls in kinds:
        event = _example(cls)
        streamed = events_module.stream_event_for(event)
        assert streamed is not None, cls.__name__
        assert streamed.run_id == 'run-1'
        if HAS_CAPABILITY_EVENTS:
            assert streamed.kind.startswith('pydantic_ai_history.'), streamed.kind
    lost = events_module.stream_event_for(_example(events_module.ContentLost))
    assert isinstance(lost, events_module.HistoryWarningEvent)
    assert lost.level == 'error'


@pytest.mark.skipif(not HAS_CAPABILITY_EVENTS, reason='capability events arrived with pydantic-ai 2.x')
def test_stream_events_round_trip_through_pydantic_ais_event_schema() -> None:
    """What a durable engine or a UI adapter serializes comes back as the same typed event."""
    from pydantic import TypeAdapter
    from pydantic_ai.messages import CapabilityEvent

    adapter = TypeAdapter(CapabilityEvent)
    for cls in _concrete_events():
        event = events_module.stream_event_for(_example(cls))
        assert event is not None
        assert adapter.validate_json(adapter.dump_json(event)) == event


def test_stream_events_carry_their_sources_figures() -> None:
    """Each stream field is the `on_event` field of the same name (context usage: the figures after)."""
    for cls in _concrete_events():
        event = _example(cls)
        streamed = events_module.stream_event_for(event)
        assert streamed is not None
        if isinstance(streamed, events_module.HistoryWarningEvent):
            continue  # one event for three sources: checked above
        renamed = {'tokens': 'tokens_after', 'messages': 'messages_after'}
        own = [f.name for f in dataclasses.fields(streamed) if f.name not in events_module._ENVELOPE]
        assert own, cls.__name__
        for name in own:
            assert getattr(streamed, name) == getattr(event, renamed.get(name, name)), (cls.__name__, name)


def test_events_compare_hash_and_print_as_dataclasses_do() -> None:
    """The events share one `__eq__`, `__hash__` and `__repr__` (import time): each behaves as the one
    `@dataclass(frozen=True)` would generate."""
    for cls in [HistoryEvent, *_concrete_events()]:
        event = _example(cls)
        values = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
        twin_cls = dataclasses.make_dataclass(cls.__qualname__, list(values), frozen=True, kw_only=True)
        twin = twin_cls(**values)
        assert repr(event) == repr(twin)
        assert event == dataclasses.replace(event)
        assert event != dataclasses.replace(event, run_id='run-2')
        assert event != twin
        try:
            expected: object = hash(twin)
        except TypeError:  # a dict among the fields (`HistoryWarning.details`)
            with pytest.raises(TypeError):
                hash(event)
        else:
            assert hash(event) == expected
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.run_id = 'run-3'  # type: ignore[misc]


def test_the_stream_carries_these_fields_per_kind() -> None:
    """What a frontend (through `ui_forwarding()`) and a durable engine receive: the wire's fields."""
    expected = {
        'RequestProcessed': (
            'context_usage',
            {
                'tokens',
                'context_window',
                'utilization',
                'messages',
                'tokens_before',
                'messages_before',
                'anchored',
            }
            | {'rewritten_messages', 'rewritten_tokens', 'rewritten_by'},
        ),
        'CompactionStarted': (
            'compaction_started',
            {'tokens_before', 'messages_before', 'evicted_messages', 'target_tokens', 'reason'},
        ),
        'CompactionResult': (
            'compaction_finished',
            {
                'tokens_before',
                'tokens_after',
                'messages_before',
                'messages_after',
                'evicted_messages',
                'method',
            }
            | {'summarizer_calls', 'summary', 'error', 'stubbed_parts', 'background', 'over_target'},
        ),
        'BackgroundSummaryStarted': (
            'background_summary_started',
            {'snapshot_messages', 'snapshot_tokens', 'trigger_tokens', 'evicted_messages', 'reason'}
            | {'tokens_per_step', 'expected_requests', 'needed_tokens', 'requests_left'},
        ),
        'BackgroundSummaryUsed': (
            'background_summary_used',
            {'evicted_messages', 'method', 'ready', 'waited_ms', 'deferred_requests', 'lead_ms'}
            | {'summarizer_calls', 'input_tokens', 'output_tokens'},
        ),
        'BackgroundSummaryDiscarded': (
            'background_summary_discarded',
            {'reason', 'finished', 'summarizer_calls', 'input_tokens', 'output_tokens'},
        ),
        'NearLimitNoticeSent': ('near_limit_notice', {'context_tokens', 'limit_tokens', 'notice'}),
        'PassagesRecalled': ('passages_recalled', {'artifacts', 'tokens_added'}),
        'ArtifactProcessed': (
            'artifact_processed',
            {'artifact_id', 'source', 'strategy', 'tokens_before', 'tokens_after'},
        ),
        'WindowApplied': (
            'window_applied',
            {'tokens_before', 'tokens_after', 'messages_before', 'messages_after', 'budget'},
        ),
        'HistoryWarning': ('warning', {'code', 'message', 'level', 'details'}),
        'ContentLost': ('warning', {'code', 'message', 'level', 'details'}),
        'StageFailed': ('warning', {'code', 'message', 'level', 'details'}),
    }
    seen = {}
    for cls in _concrete_events():
        streamed = events_module.stream_event_for(_example(cls))
        assert streamed is not None
        name = (
            streamed.kind.removeprefix('pydantic_ai_history.')
            if HAS_CAPABILITY_EVENTS
            else expected[cls.__name__][0]
        )
        seen[cls.__name__] = (name, set(events_module._payload(streamed)) - {'run_id'})
    assert seen == expected
