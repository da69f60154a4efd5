"""The documented list of public names (docs/api.md, "Every public name") is the code's: each public package's
`__all__`, and no private module carries one."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pydantic_ai_history

ROOT = Path(__file__).resolve().parents[1]
LISTED = re.compile(r'^- `(?P<package>pydantic_ai_history[\w.]*)`: (?P<names>.+)$', re.M)


def _public_packages() -> dict[str, set[str]]:
    packages = {'pydantic_ai_history': set(pydantic_ai_history.__all__)}
    for info in pkgutil.walk_packages(pydantic_ai_history.__path__, 'pydantic_ai_history.'):
        if info.ispkg and '._' not in info.name:
            module = importlib.import_module(info.name)
            if hasattr(module, '__all__'):
                packages[info.name] = set(module.__all__)
    return packages


def test_the_documented_names_are_the_exported_ones() -> None:
    text = (ROOT / 'docs' / 'api.md').read_text(encoding='utf-8')
    documented = {m['package']: set(re.findall(r'`([^`]+)`', m['names'])) for m in LISTED.finditer(text)}
    assert documented == _public_packages()


def test_only_package_inits_declare_all() -> None:
    declaring = []
    for path in (ROOT / 'src' / 'pydantic_ai_history').rglob('*.py'):
        if path.name == '__init__.py':
            continue
        tree = ast.parse(path.read_text(encoding='utf-8'))
        targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
        if any(isinstance(t, ast.Name) and t.id == '__all__' for t in targets):
            declaring.append(path.relative_to(ROOT).as_posix())
    assert declaring == []
