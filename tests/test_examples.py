"""Every Python block in README.md, docs/ and the package's docstrings runs, as pydantic-ai's docs do
(pytest-examples): offline, in a temporary working directory, with model names such as `openai:gpt-4o` served
by local stand-ins (`FunctionModel`s of the same name, so the processor plans for that model's window) and
real model requests refused. Each block passes ruff (lint, and format with pyproject.toml's settings). Where a
block shows what it prints (`#> ` lines under the `print`), the output is checked;
`pytest tests/test_examples.py --update-examples` rewrites those lines.

Settings in a fence, e.g. ```` ```python {needs="capabilities"} ````:

- `needs="capabilities"` (or `history_processors`: early 1.x, before capabilities; or `pydantic-ai-2`;
  comma-separated): the block runs only where the installed pydantic-ai fits (it is linted everywhere);
- `test="slow"`: a block that takes seconds runs with the slow tests;
- `test="skip: why"`: the block is linted but not run (only for what cannot run offline);
- `lint="skip"`: the block is run but not linted.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

pytest.importorskip('pytest_examples', reason='pytest-examples is not installed (it is in the dev extra)')

from pytest_examples import CodeExample, EvalExample, find_examples
from pytest_examples.config import ExamplesConfig

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / 'README.md', ROOT / 'docs', ROOT / 'src' / 'pydantic_ai_history')
LINE_LENGTH = 110  # pyproject.toml's [tool.ruff]
KEY_VARIABLES = ('OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'GOOGLE_API_KEY', 'GEMINI_API_KEY', 'EXAMPLE_MODEL')
PRINTED = re.compile(r'^ *#> ', re.M)
"""A line of printed output, under the `print` that printed it."""
STAND_IN_ANSWER = 'Done: every item was checked.'
"""What every stand-in model answers in text (a summary, an answer, a reply)."""


def _major() -> int:
    from importlib.metadata import version

    return int(version('pydantic-ai-slim').split('.')[0])


def _has_capabilities() -> bool:
    from pydantic_ai_history._compat import HAS_CAPABILITIES

    return HAS_CAPABILITIES


NEEDS = {
    'capabilities': _has_capabilities,
    'history_processors': lambda: not _has_capabilities(),  # early 1.x; deprecated once capabilities came
    'pydantic-ai-2': lambda: _major() >= 2,
}


def _settings(example: CodeExample) -> dict[str, str]:
    """The settings in the block's fence as written (pytest-examples' `prefix_settings()` lower-cases)."""
    fence = example.path.read_text(encoding='utf-8').splitlines()[example.start_line - 1]
    assert fence.lstrip().startswith('```'), f'{example}: no fence at line {example.start_line}: {fence!r}'
    return {m.group(1): m.group(3) for m in re.finditer(r'([^{\s]+?)=([\'"])(.+?)\2', fence)}


def _examples() -> Iterator[Any]:
    for example in find_examples(*SOURCES):
        slow = _settings(example).get('test') == 'slow'
        yield pytest.param(
            example,
            id=f'{example.path.relative_to(ROOT)}:{example.start_line}',
            marks=[pytest.mark.slow] if slow else [],
        )


EXAMPLES = list(_examples())


def test_the_examples_are_found():
    """A fence the search misses (`py` as the language, a typo) would leave its block untested."""
    found = {(p.values[0].path, p.values[0].start_line) for p in EXAMPLES}
    pattern = re.compile(r'^ *```(?:python|py)\b', re.M)
    for path in (ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))):
        text = path.read_text(encoding='utf-8')
        for match in pattern.finditer(text):
            assert (path, text[: match.start()].count('\n') + 1) in found, f'{path}: {match.group(0)}'
    assert len(found) >= 10


@pytest.mark.parametrize('example', EXAMPLES)
# a block (run as `__main__`) that calls what is deprecated fails (pydantic-ai's are `UserWarning`s)
@pytest.mark.filterwarnings('error:.*deprecat:Warning:__main__')
def test_example(example: CodeExample, eval_example: EvalExample, monkeypatch: pytest.MonkeyPatch, tmp_path):
    settings = _settings(example)
    unknown = set(settings) - {'needs', 'test', 'lint'}
    assert not unknown, f'unknown settings {unknown} in the fence of {example}'
    eval_example.config = _Config()
    if not settings.get('lint', '').startswith('skip'):
        eval_example.lint_ruff(example)
        _check_format(example)
    test = settings.get('test', '')
    if test.startswith('skip'):
        pytest.skip(test[4:].lstrip(' :-') or 'running the block is skipped')
    for need in filter(None, (n.strip() for n in settings.get('needs', '').split(','))):
        assert need in NEEDS, f'unknown need {need!r} in the fence of {example} (known: {", ".join(NEEDS)})'
        if not NEEDS[need]():
            pytest.skip(f'the block needs {need}, which the installed pydantic-ai-slim does not fit')

    _offline(monkeypatch)
    monkeypatch.chdir(tmp_path)
    # pytest-examples re-points a failing block's traceback at the page with rebuilt frames, which break
    # pytest's report on Python 3.11 (an INTERNALERROR): keep the traceback through the block's own file,
    # <page>_<first line>_<last line>.py, whose line N is the page's line N + first line
    monkeypatch.setattr('pytest_examples.run_code.create_example_traceback', lambda *_: None)
    run = {'call': 'main', 'module_globals': {'__name__': '__main__'}}
    if not PRINTED.search(example.source):  # the doc shows no output: the block only has to run
        eval_example.run(example, **run)
    elif eval_example.update_examples:
        eval_example.run_print_update(example, **run)
    else:
        eval_example.run_print_check(example, **run)


@dataclass
class _Config(ExamplesConfig):
    """pytest-examples' ruff lint (pyflakes, isort, pyupgrade, quotes, line length) with the project's
    settings; `pydantic_ai_history` sorts as first-party, as in the project's own code."""

    line_length: int = LINE_LENGTH
    ruff_line_length: int | None = LINE_LENGTH
    quotes: Literal['single', 'double', 'either'] = 'single'
    target_version: Literal['py37', 'py38', 'py39', 'py310', 'py311'] = 'py310'
    upgrade: bool = True
    isort: bool = True

    def ruff_config(self) -> tuple[str, ...]:
        return (*super().ruff_config(), '--config', "lint.isort.known-first-party = ['pydantic_ai_history']")


def _check_format(example: CodeExample) -> None:
    """`ruff format` with the project's settings (pyproject.toml) leaves the block as it is."""
    from ruff.__main__ import find_ruff_bin

    # ruff would write `# >`: the print-output lines are pytest-examples' `#> `
    source = re.sub(r'^( *#)> ', r'\1 > ', example.source, flags=re.M)
    name = str(ROOT / f'{example.module_name}.py')  # in the repository: pyproject.toml's settings apply
    result = subprocess.run(
        [find_ruff_bin(), 'format', '--diff', '--stdin-filename', name, '-'],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    if result.returncode != 0:
        pytest.fail(f'ruff format would change {example}:\n{result.stdout}{result.stderr}', pytrace=False)


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No request leaves the machine: model names resolve to local stand-ins, real models refuse to run."""
    import pydantic_ai.models

    for variable in KEY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(pydantic_ai.models, 'ALLOW_MODEL_REQUESTS', False)
    # every module that holds pydantic-ai's `infer_model` (`WrapperModel`, `FallbackModel` import it by name);
    # those imported later take the stand-in from `pydantic_ai.models`
    infer_model = pydantic_ai.models.infer_model
    for name, module in list(sys.modules.items()):
        if name.startswith('pydantic_ai') and getattr(module, 'infer_model', None) is infer_model:
            monkeypatch.setattr(module, 'infer_model', _stand_in)


def _stand_in(model: Any, *args: Any, **kwargs: Any) -> Any:
    """A `FunctionModel` named after the model a name asks for (`openai:gpt-4o` -> `gpt-4o`), so the
    processor plans for that model's window, answering every request locally."""
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.test import TestModel

    if not isinstance(model, str):
        return model
    if model == 'test':
        return TestModel()
    return FunctionModel(_answer, stream_function=_stream, model_name=model.partition(':')[2] or model)


def _answer(messages: list[Any], info: Any) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    if info.output_tools and not info.allow_text_output:
        tool = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(tool.name, _sample(tool.parameters_json_schema))])
    return ModelResponse(parts=[TextPart(STAND_IN_ANSWER)])


async def _stream(messages: list[Any], info: Any) -> AsyncIterator[Any]:
    import json

    from pydantic_ai.models.function import DeltaToolCall

    if info.output_tools and not info.allow_text_output:
        tool = info.output_tools[0]
        yield {0: DeltaToolCall(name=tool.name, json_args=json.dumps(_sample(tool.parameters_json_schema)))}
    else:
        yield STAND_IN_ANSWER


def _sample(schema: dict[str, Any]) -> Any:
    """A value valid for a (simple) JSON schema: the structured output a stand-in model returns."""
    kind = schema.get('type')
    if kind == 'object':
        properties = schema.get('properties', {})
        return {name: _sample(properties[name]) for name in schema.get('required', properties)}
    if kind in ('integer', 'number'):
        return schema.get('maximum', schema.get('minimum', 1))
    if kind == 'boolean':
        return True
    if kind == 'array':
        return []
    return STAND_IN_ANSWER
