"""TokenCounter against the prompt token counts providers really reported (pydantic-ai's own cassettes).

See benchmarks/calibrate_tokens.py for the conversion of wire requests and the full error report.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from _fixtures import need

BENCHMARKS = Path(__file__).resolve().parents[1] / 'benchmarks'


@pytest.fixture(scope='module')
def calibrate() -> ModuleType:
    spec = importlib.util.spec_from_file_location('calibrate_tokens', BENCHMARKS / 'calibrate_tokens.py')
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def results(calibrate: ModuleType, fixtures_dir: Path) -> list[tuple[object, int, float]]:
    path = need(fixtures_dir / 'token_calibration/pydantic_ai_cassettes_prompt_tokens.jsonl')
    return calibrate.relative_errors(calibrate.load_rows(path))


def _errors(results: list[tuple[object, int, float]], family: str, category: str) -> list[float]:
    return [
        e
        for row, _, e in results
        if row.api.startswith(family) and row.category == category  # type: ignore[attr-defined]
    ]


def test_openai_tool_free_median_error_within_3_percent(results: list[tuple[object, int, float]]) -> None:
    errors = _errors(results, 'openai', 'tool-free')
    assert len(errors) >= 30
    assert statistics.median(abs(e) for e in errors) <= 0.03
    # and most requests, not just the median, are close
    assert sum(abs(e) <= 0.1 for e in errors) >= 0.75 * len(errors)


def test_openai_with_function_tools_is_close_at_the_median(results: list[tuple[object, int, float]]) -> None:
    errors = _errors(results, 'openai', 'tools')
    assert len(errors) >= 30
    assert statistics.median(abs(e) for e in errors) <= 0.10


def test_anthropic_does_not_undercount_at_the_median(results: list[tuple[object, int, float]]) -> None:
    errors = _errors(results, 'anthropic', 'tool-free')
    assert errors
    assert statistics.median(errors) >= 0


def test_every_request_converts_and_gets_a_positive_estimate(
    results: list[tuple[object, int, float]],
) -> None:
    assert len(results) > 200
    assert all(estimate > 0 for _, estimate, _ in results)
