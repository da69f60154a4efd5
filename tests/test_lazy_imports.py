"""`import pydantic_ai_history` loads nothing until a name is used; file readers, the tokenizer, the store
and cache backends and passage retrieval load on first use.

Each check runs in a fresh interpreter and reads `sys.modules` (what was imported), never a clock.
"""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import pydantic_ai_history

DEFERRED = (
    'PIL',
    'markitdown',
    'tiktoken',
    'pydantic_ai_history.files._read',
    'pydantic_ai_history.files._images',
    'pydantic_ai_history.files._audio',
    'pydantic_ai_history.files._registry',
    'pydantic_ai_history.files._markitdown',
    'pydantic_ai_history.files._structured',
    'pydantic_ai_history.files._tables',
    'pydantic_ai_history.files._worker',
    'sqlite3',
    'pydantic_ai_history.cache._sqlite',
    'pydantic_ai_history.cache._redis',
    'pydantic_ai_history.store._directory',
    'pydantic_ai_history.store._redis',
    'pydantic_ai_history.readback._retrieval',
)
"""Modules (and their submodules) that only a file, a token count, a chosen backend or a cut may load."""


def _loaded_after(script: str) -> set[str]:
    """The entries of DEFERRED that a fresh interpreter has loaded (itself or a submodule) after `script`."""
    probe = script + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps(sorted(
            d for d in {DEFERRED!r} if any(m == d or m.startswith(d + '.') for m in sys.modules)
        )))
        """
    )
    done = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_loads_no_file_reader_and_no_tokenizer() -> None:
    assert _loaded_after('import pydantic_ai_history\n') == set()


def test_import_alone_loads_no_module_of_the_package() -> None:
    probe = textwrap.dedent(
        """
        import json, sys
        import pydantic_ai_history
        print(json.dumps(sorted(m for m in sys.modules if m.startswith('pydantic_ai_history'))))
        """
    )
    done = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ['pydantic_ai_history', 'pydantic_ai_history._lazy']


_PACKAGES = sorted(
    info.name
    for info in pkgutil.walk_packages(pydantic_ai_history.__path__, 'pydantic_ai_history.')
    if info.ispkg and hasattr(importlib.import_module(info.name), '__all__')
)


@pytest.mark.parametrize('package', ['pydantic_ai_history', *_PACKAGES])
def test_every_public_name_resolves_once_used(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        home = getattr(value, '__module__', None)
        if isinstance(home, str) and home.startswith('pydantic_ai_history'):
            assert getattr(importlib.import_module(home), name) is value, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_building_a_processor_loads_none_of_them_either() -> None:
    script = textwrap.dedent(
        """
        from pydantic_ai_history import create_history_processor
        from pydantic_ai_history.files import FileSettings

        create_history_processor(model='openai:gpt-4o')
        FileSettings()
        """
    )
    assert _loaded_after(script) == set()


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new('RGB', (4, 4), 'red').save(buffer, format='PNG')
    return buffer.getvalue()


def test_the_first_file_loads_the_readers() -> None:
    """The control: the same probe sees Pillow and the readers once a file is read."""
    script = textwrap.dedent(
        f"""
        from pydantic_ai_history import files
        from pydantic_ai_history.files._read import read_file

        result = files.read_file({_png()!r}, media_type='image/png')
        assert type(result).__name__ == 'FittedImage', result
        assert files.read_file is read_file
        """
    )
    loaded = _loaded_after(script)
    assert {'PIL', 'pydantic_ai_history.files._read', 'pydantic_ai_history.files._images'} <= loaded
    assert 'markitdown' not in loaded  # an image needs no document converter


def test_lazy_names_resolve_like_the_modules_that_define_them() -> None:
    from pydantic_ai_history import files
    from pydantic_ai_history.files import _read, _registry

    assert files.read_file is _read.read_file
    assert files.read_path is _read.read_path
    assert files.sniff_media_type is _registry.sniff_media_type
    assert set(files.__all__) <= set(dir(files))
    with pytest.raises(AttributeError, match="no attribute 'read_files'"):
        files.read_files  # noqa: B018


LOADED_BY_USE = (
    'pydantic_ai_history.stages',
    'pydantic_ai_history.tokens._counter',
    'pydantic_ai_history.readback',
    'pydantic_ai_history.files',
    'pydantic_ai_history.context._llm',
    'pydantic_ai_history.context._artifact_settings',
    'pydantic_ai_history.budget._local_server',
    'pydantic_ai_history.messages.units',
    'pydantic_ai_history.messages.validate',
)
"""Modules the processor's factory does not load: the stages and the read-back tool load with the first
processor, the counter and the checks with its first request, the rest when used (issue 37)."""


def test_the_factory_alone_loads_no_stage_counter_or_check() -> None:
    probe = textwrap.dedent(
        f"""
        import json, sys
        from pydantic_ai_history import create_history_processor
        print(json.dumps(sorted(
            d for d in {LOADED_BY_USE!r} if any(m == d or m.startswith(d + '.') for m in sys.modules)
        )))
        """
    )
    done = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_an_agent_built_and_run_without_a_durable_engine_loads_no_durable_machinery() -> None:
    """The check for a store durable workers share runs where a durability capability could exist: only once
    its machinery was loaded (some 20 ms of imports, once paid by every first agent)."""
    pytest.importorskip('pydantic_ai.capabilities', reason='capabilities are pydantic-ai 2.x')
    script = textwrap.dedent(
        """
        import json, sys
        from pydantic_ai import Agent
        from pydantic_ai.models.test import TestModel
        from pydantic_ai_history import create_history_processor

        Agent(TestModel(), capabilities=[create_history_processor()]).run_sync('hello')
        print(json.dumps('pydantic_ai.durable_exec._base' in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) is False, 'the durability capability base was loaded'
