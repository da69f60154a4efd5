"""Smoke test of the overhead benchmark's breakdown (benchmarks/bench_overhead.py): each variant it measures
runs the same small run to the same answer, and its floor of an idle path still does what an idle request of
ours does (one `RequestProcessed` and one `context_usage` stream event per request). Nothing is timed here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pydantic_ai_history._compat import HAS_CAPABILITY_EVENTS
from pydantic_ai_history.events import ContextUsageEvent, RequestProcessed

BENCHMARKS = Path(__file__).resolve().parents[1] / 'benchmarks'

pytestmark = pytest.mark.skipif(
    not HAS_CAPABILITY_EVENTS,
    reason='the floor keeps the stream event: pydantic-ai 2.x has capability events',
)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location('bench_overhead', BENCHMARKS / 'bench_overhead.py')
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules['bench_overhead'] = module
    spec.loader.exec_module(module)
    return module


def _run(bench: ModuleType, capability: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str], int]:
    """The small run's answer, the request events ours recorded, and the stream events it emitted."""
    from pydantic_ai import RunContext

    events: list[str] = []
    capability.on_history_event = lambda event: events.append(type(event).__name__)
    streamed: list[object] = []
    emit = RunContext.emit

    async def counted(self: Any, event: Any) -> Any:
        if isinstance(event, ContextUsageEvent):
            streamed.append(event)
        return await emit(self, event)

    with monkeypatch.context() as patch:
        patch.setattr(RunContext, 'emit', counted)
        output = bench._agent(capability).run_sync('What is item 1?').output
    return output, [e for e in events if e == RequestProcessed.__name__], len(streamed)


def test_every_breakdown_variant_runs_to_the_same_answer_and_the_floor_keeps_the_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = _load()
    capability = bench._capability('ours')
    ours = _run(bench, capability, monkeypatch)
    assert ours == ('That is all.', ['RequestProcessed'] * 2, 2)  # two requests: the tool call, the answer
    for name, (enter, leave) in bench._parts(capability).items():
        enter()
        try:
            output, recorded, streamed = _run(bench, capability, monkeypatch)
        finally:
            leave()
        assert output == ours[0], name
        if name == bench.FLOOR:  # what any idle path keeps: each request's event and its stream form
            assert (recorded, streamed) == (ours[1], ours[2])
        elif name == bench.FLOOR_SKELETON:  # the event recorded, not streamed
            assert (recorded, streamed) == (ours[1], 0)
    assert _run(bench, capability, monkeypatch) == ours  # every variant undone
