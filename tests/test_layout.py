"""The package's modules import one another without cycles, counting every import the source holds:
TYPE_CHECKING blocks and imports inside functions too (a cycle hidden in a function is still a cycle)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = 'pydantic_ai_history'
ROOT = Path(__file__).resolve().parents[1] / 'src' / PACKAGE

KNOWN_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()
"""Imports that still close a cycle, as (importer, imported) relative to the package; to be removed, never
added to."""


def _modules() -> dict[str, tuple[Path, bool]]:
    modules: dict[str, tuple[Path, bool]] = {}
    for path in ROOT.rglob('*.py'):
        parts = list(path.relative_to(ROOT.parent).with_suffix('').parts)
        is_package = parts[-1] == '__init__'
        modules['.'.join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _imported(node: ast.Import | ast.ImportFrom, package: str, modules: dict[str, object]) -> set[str]:
    """The package modules an import statement loads: `from m import sub` loads the submodule `sub`,
    `from m import name` loads `m`, `import a.b` loads `a.b`."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = package.split('.')[: len(package.split('.')) - node.level + 1]
            module = '.'.join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ''
        names = [f'{module}.{a.name}' if f'{module}.{a.name}' in modules else module for a in node.names]
    found = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition('.')[0]
        if name.startswith(PACKAGE):
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its source."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition('.')[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets |= _imported(node, package, modules)
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                if len(group) > 1:
                    groups.append(_cycle_in(sorted(group), graph))
    return groups


def _cycle_in(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, for the failure message."""
    members = set(group)
    paths = {group[0]: [group[0]]}
    frontier = [group[0]]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == group[0]:
                    return [*paths[node], child]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    return group  # pragma: no cover - a strongly connected group always closes


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, frontier = {start}, [start]
    while frontier:
        frontier = [m for node in frontier for m in graph[node] - seen if not seen.add(m)]
    return goal in seen


def _short(name: str) -> str:
    return name.removeprefix(PACKAGE + '.')


def test_no_import_cycle():
    graph = import_graph()
    for importer, imported in KNOWN_CYCLE_EDGES:
        graph[f'{PACKAGE}.{importer}'].discard(f'{PACKAGE}.{imported}')
    found = [' -> '.join(map(_short, cycle)) for cycle in cycles(graph)]
    assert not found, 'import cycles:\n' + '\n'.join(found)


def test_known_cycle_edges_still_exist_and_still_close_a_cycle():
    """An edge fixed upstream leaves the list, so the list only ever shrinks."""
    graph = import_graph()
    for importer, imported in sorted(KNOWN_CYCLE_EDGES):
        a, b = f'{PACKAGE}.{importer}', f'{PACKAGE}.{imported}'
        assert b in graph[a], f'{importer} no longer imports {imported}: drop it from KNOWN_CYCLE_EDGES'
        assert _reaches(graph, b, a), f'{importer} -> {imported} closes no cycle: drop it'


def test_the_detector_sees_imports_in_functions_and_type_checking_blocks(tmp_path, monkeypatch):
    package = tmp_path / PACKAGE
    (package / 'sub').mkdir(parents=True)
    (package / '__init__.py').write_text('')
    (package / 'sub' / '__init__.py').write_text('from .b import thing\n')
    (package / 'a.py').write_text(
        'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import b\n'
    )
    (package / 'sub' / 'b.py').write_text('def thing():\n    from ..c import x\n')
    (package / 'c.py').write_text(f'import {PACKAGE}.a\n')
    (package / 'd.py').write_text('from . import c\n')
    monkeypatch.setattr(sys.modules[__name__], 'ROOT', package)
    graph = import_graph()
    assert graph[f'{PACKAGE}.d'] == {f'{PACKAGE}.c'}
    assert [list(map(_short, c)) for c in cycles(graph)] == [['a', 'sub.b', 'c', 'a']]


def test_only_the_command_line_imports_the_command_line():
    """The library (evaluation included) works without the CLI; the CLI builds on the library."""
    cli = (f'{PACKAGE}.cli', f'{PACKAGE}.__main__')
    importers = {
        _short(module)
        for module, imported in import_graph().items()
        if not module.startswith(cli) and any(m.startswith(cli) for m in imported)
    }
    assert not importers


def test_the_package_root_holds_few_modules():
    """One folder per concept: the root keeps the public surface (processor, events, testing), the entry
    points and the version shims; everything else lives in the package of its concept."""
    root = sorted(p.name for p in ROOT.glob('*.py'))
    assert root == [
        '__init__.py',
        '__main__.py',
        '_compat.py',
        '_lazy.py',
        'events.py',
        'processor.py',
        'testing.py',
    ]


def test_stages_reach_the_processor_only_through_the_capability_base():
    """A stage is a capability of its own (`pipeline`), never a part of the composition (`processor`)."""
    importers = {
        _short(module)
        for module, imported in import_graph().items()
        if module.startswith(f'{PACKAGE}.stages') and f'{PACKAGE}.processor' in imported
    }
    assert not importers


LAYERS: tuple[frozenset[str], ...] = (
    frozenset({'_compat', '_lazy'}),
    frozenset({'messages', 'events', 'tokens'}),
    frozenset({'budget'}),
    frozenset({'store', 'cache', 'files'}),
    frozenset({'context'}),
    frozenset({'readback'}),
    frozenset({'pipeline'}),
    frozenset({'stages'}),
    frozenset({'processor', 'testing', '__init__', 'evaluation', 'cli', '__main__'}),
)
"""The package's layers, bottom to top (CONTRIBUTING.md draws them): a part imports only its own layer and the
ones below it."""

MAX_NON_BLANK_LINES = 800


def _part(module: str) -> str:
    """The top-level part of the package a module belongs to (`stages` for `stages.compactor._stage`)."""
    return _short(module).split('.')[0] if module != PACKAGE else '__init__'


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Part -> the other parts its modules import (TYPE_CHECKING blocks and functions included)."""
    parts: dict[str, set[str]] = {}
    for module, imported in graph.items():
        parts.setdefault(_part(module), set()).update(_part(m) for m in imported)
    return {part: imported - {part} for part, imported in parts.items()}


def test_no_two_parts_of_the_package_import_each_other():
    """No cycle among the sub-packages (and root modules), however long: the layers can be drawn."""
    found = [' -> '.join(cycle) for cycle in cycles(part_graph(import_graph()))]
    assert not found, 'import cycles among the parts of the package:\n' + '\n'.join(found)


def test_every_part_imports_only_its_own_layer_and_those_below():
    layer_of = {part: level for level, layer in enumerate(LAYERS) for part in layer}
    parts = part_graph(import_graph())
    assert set(parts) <= set(layer_of), f'parts in no layer: {sorted(set(parts) - set(layer_of))}'
    upward = sorted(
        f'{part} -> {imported}'
        for part, imports in parts.items()
        for imported in imports
        if layer_of[imported] > layer_of[part]
    )
    assert not upward, 'imports of a layer above:\n' + '\n'.join(upward)


def test_the_detector_sees_cycles_among_parts(tmp_path, monkeypatch):
    package = tmp_path / PACKAGE
    for part in ('low', 'high'):
        (package / part).mkdir(parents=True)
        (package / part / '__init__.py').write_text('')
    (package / '__init__.py').write_text('')
    (package / 'low' / 'a.py').write_text(
        'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high import b\n'
    )
    (package / 'high' / 'b.py').write_text('from ..low.c import x\n')
    (package / 'low' / 'c.py').write_text('x = 1\n')
    monkeypatch.setattr(sys.modules[__name__], 'ROOT', package)
    graph = import_graph()
    assert not cycles(graph)  # no module cycle: low.a -> high.b -> low.c
    assert cycles(part_graph(graph)) == [['high', 'low', 'high']]


def test_no_module_is_over_800_non_blank_lines():
    sizes = {
        path.relative_to(ROOT).as_posix(): sum(
            1 for line in path.read_text(encoding='utf-8').splitlines() if line.strip()
        )
        for path in ROOT.rglob('*.py')
    }
    over = sorted(f'{name}: {size}' for name, size in sizes.items() if size > MAX_NON_BLANK_LINES)
    assert not over, f'modules over {MAX_NON_BLANK_LINES} non-blank lines:\n' + '\n'.join(over)
