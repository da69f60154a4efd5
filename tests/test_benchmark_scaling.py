"""Smoke test of the scaling benchmark (benchmarks/bench_scaling.py): it imports, and its history builder
makes valid, distinct histories of the requested size from the real conversations. Nothing is timed here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, UserPromptPart

from pydantic_ai_history import validate_history

BENCHMARKS = Path(__file__).resolve().parents[1] / 'benchmarks'


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_driver_imports_and_formats_cells() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        driver = _load('bench_scaling', BENCHMARKS / 'bench_scaling.py')
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert set(driver.QUICK['sizes'].split(',')) < set(driver.FULL['sizes'].split(','))
    assert driver.cell([3.0, 1.0, 2.0]) == '2.00 (1.00–3.00)'
    assert driver.cell([None]) == '-'


def test_scaled_histories_are_valid_and_every_copy_is_distinct(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The benchmark's provider runs in the peers' venvs too, without this package's bundled encodings: it
    # reads tiktoken's cache, which the benchmark driver points at ../shared.
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(shared_dir / 'tiktoken-cache'))
    scaling = _load('bench_scaling_peers', BENCHMARKS / 'peers' / 'scaling.py')
    conversations = scaling._conversations()
    source_messages = sum(len(m) for _, m in conversations)
    size = source_messages + 200  # past one pass: the second copy must differ from the first
    history = scaling.anchored(scaling.scaled_history(conversations, size), scaling.Encoder())

    assert size - 3 <= len(history) <= size
    last = history[-1]
    assert isinstance(last, ModelResponse)
    assert not any(isinstance(p, ToolCallPart) for p in last.parts)
    next_request = ModelRequest(parts=[UserPromptPart('One more question.')])
    assert validate_history([*history, next_request]) == []  # as the Agent sends it
    texts = [getattr(p, 'content', None) for m in history for p in m.parts]
    assert any(isinstance(t, str) and t.startswith('[1] ') for t in texts)
    responses = [m for m in history if isinstance(m, ModelResponse)]
    assert all(r.usage.input_tokens > 0 for r in responses)
    assert [r.usage.input_tokens for r in responses] == sorted(r.usage.input_tokens for r in responses)
