"""`import pydantic_ai_history` loads no file readers and no tokenizer: they load on first use.

Each check runs in a fresh interpreter and reads `sys.modules` (what was imported), never a clock.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest

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
)
"""Modules (and their submodules) that only a file or a token count may load."""


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
