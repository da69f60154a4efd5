"""No function in the package is above radon complexity C unless a comment right above it says why."""

from __future__ import annotations

from pathlib import Path

import pytest

radon_complexity = pytest.importorskip('radon.complexity', reason='radon is a dev dependency')

PACKAGE = Path(__file__).resolve().parent.parent / 'src' / 'pydantic_ai_history'
JUSTIFICATION = '# complexity:'
"""The comment that justifies a function above C, on a line right above its `def` (or its decorators)."""


def _justified(lines: list[str], line_number: int) -> bool:
    index = line_number - 2  # the line above the def (radon numbers lines from 1)
    while index >= 0 and lines[index].lstrip().startswith(('@', '#')):
        if lines[index].lstrip().startswith(JUSTIFICATION):
            return True
        index -= 1
    return False


def test_no_function_above_c_without_a_reason() -> None:
    offenders: list[str] = []
    for path in sorted(PACKAGE.rglob('*.py')):
        source = path.read_text(encoding='utf-8')
        lines = source.splitlines()
        for block in radon_complexity.cc_visit(source):
            functions = [block, *getattr(block, 'methods', [])]
            for function in functions:
                rank = radon_complexity.cc_rank(function.complexity)
                if rank > 'C' and not _justified(lines, function.lineno):
                    offenders.append(
                        f'{path.relative_to(PACKAGE)}:{function.lineno} {function.fullname} {rank} '
                        f'({function.complexity})'
                    )
    assert not offenders, 'above radon C without a "# complexity:" reason:\n' + '\n'.join(offenders)
