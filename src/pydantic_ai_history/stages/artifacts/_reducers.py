"""Per-tool reducers: tool-specific shrinking that runs before planning, and two built-ins to opt into.

Register them by tool name: `ArtifactSettings(reducers={'browser_snapshot': browser_snapshot_reducer(),
'run_tests': console_output_reducer()})`. A reducer receives the tool's return content and returns smaller
content; the original is kept in the spill store for read-back.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

INTERACTIVE_ROLES = frozenset(
    {
        'button',
        'link',
        'textbox',
        'searchbox',
        'checkbox',
        'radio',
        'combobox',
        'listbox',
        'option',
        'menuitem',
        'menuitemcheckbox',
        'menuitemradio',
        'slider',
        'spinbutton',
        'switch',
        'tab',
        'treeitem',
        'input',
        'select',
        'textarea',
        'heading',
    }
)
"""Roles kept at any depth by `browser_snapshot_reducer` (headings too: they are how a page is navigated)."""

_SNAPSHOT_LINE = re.compile(r'^(?P<indent>\s*)-\s*(?P<role>[A-Za-z]+)')


def browser_snapshot_reducer(
    max_depth: int = 4, *, keep_roles: frozenset[str] = INTERACTIVE_ROLES, max_name_chars: int = 100
) -> Callable[[Any], Any]:
    """A reducer for accessibility snapshots (Playwright MCP's `- role "name" [ref=e1]` text, or a
    `{'role', 'name', 'children'}` tree): keeps nodes down to `max_depth` and interactive ones at any depth;
    dropped runs become `- ... (N nodes omitted)`."""

    def reduce(content: Any) -> Any:
        if isinstance(content, Mapping):
            return _reduce_tree(content, 0, max_depth, keep_roles, max_name_chars)
        if not isinstance(content, str):
            return content
        return _reduce_snapshot_text(content, max_depth, keep_roles, max_name_chars)

    return reduce


def _reduce_snapshot_text(text: str, max_depth: int, keep_roles: frozenset[str], max_name_chars: int) -> str:
    lines = text.splitlines()
    indents = sorted({len(m.group('indent')) for line in lines if (m := _SNAPSHOT_LINE.match(line))})
    step = next((b - a for a, b in itertools.pairwise(indents) if b > a), 2) or 2
    kept: list[str] = []
    omitted = 0
    omitted_indent = ''
    for line in lines:
        match = _SNAPSHOT_LINE.match(line)
        if match is None:
            depth = (len(line) - len(line.lstrip())) // step
            keep = depth <= max_depth
        else:
            depth = len(match.group('indent')) // step
            keep = depth <= max_depth or match.group('role').lower() in keep_roles
        if keep:
            if omitted:
                kept.append(f'{omitted_indent}- ... ({omitted} nodes omitted)')
                omitted = 0
            kept.append(line if len(line) <= max_name_chars + 60 else line[: max_name_chars + 60] + '...')
        else:
            if not omitted:
                omitted_indent = line[: len(line) - len(line.lstrip())]
            omitted += 1
    if omitted:
        kept.append(f'{omitted_indent}- ... ({omitted} nodes omitted)')
    return '\n'.join(kept)


def _children(node: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """A tree node's child nodes; None when it has no `children` list."""
    children = node.get('children')
    if not isinstance(children, Sequence) or isinstance(children, str):
        return None
    return [child for child in children if isinstance(child, Mapping)]


def _reduce_tree(
    node: Mapping[str, Any], depth: int, max_depth: int, keep_roles: frozenset[str], max_name_chars: int
) -> dict[str, Any]:
    out = {key: _clipped(value, max_name_chars) for key, value in node.items() if key != 'children'}
    children = _children(node)
    if children is not None:
        kept: list[Any] = []
        omitted = 0
        for child in children:
            if depth + 1 <= max_depth:
                kept.append(_reduce_tree(child, depth + 1, max_depth, keep_roles, max_name_chars))
            else:
                found = _interactive_descendants(child, keep_roles, max_name_chars)
                omitted += _count_nodes(child) - len(found)
                kept.extend(found)
        if omitted:
            kept.append({'omitted_nodes': omitted})
        out['children'] = kept
    return out


def _clipped(value: Any, max_chars: int) -> Any:
    return value[:max_chars] + '...' if isinstance(value, str) and len(value) > max_chars else value


def _interactive_descendants(
    node: Mapping[str, Any], keep_roles: frozenset[str], max_name_chars: int
) -> list[Any]:
    found: list[Any] = []
    if str(node.get('role', '')).lower() in keep_roles:
        leaf = {k: v for k, v in node.items() if k != 'children'}
        if 'name' in leaf:
            leaf['name'] = _clipped(leaf['name'], max_name_chars)
        found.append(leaf)
    for child in _children(node) or ():
        found.extend(_interactive_descendants(child, keep_roles, max_name_chars))
    return found


def _count_nodes(node: Mapping[str, Any]) -> int:
    return 1 + sum(_count_nodes(c) for c in _children(node) or ())


DEFAULT_ERROR_PATTERN = re.compile(
    r'error|exception|traceback|fail(ed|ure)?\b|fatal|panic|assert|\bE\s{2,}|denied|not found', re.IGNORECASE
)


def console_output_reducer(
    tail_lines: int = 50, *, error_pattern: re.Pattern[str] = DEFAULT_ERROR_PATTERN, context_lines: int = 2
) -> Callable[[Any], Any]:
    """A reducer for console output (build logs, test runs, shells): the lines matching `error_pattern` (with
    `context_lines` after each) plus the last `tail_lines` lines, with `... N lines omitted ...` between runs.
    """

    def reduce(content: Any) -> Any:
        if not isinstance(content, str):
            return content
        lines = content.splitlines()
        if len(lines) <= tail_lines:
            return content
        keep = set(range(len(lines) - tail_lines, len(lines)))
        for index, line in enumerate(lines):
            if error_pattern.search(line):
                keep.update(range(index, min(index + context_lines + 1, len(lines))))
        out: list[str] = []
        previous = -1
        for index in sorted(keep):
            if index > previous + 1:
                out.append(f'... {index - previous - 1} lines omitted ...')
            out.append(lines[index])
            previous = index
        return '\n'.join(out)

    return reduce
