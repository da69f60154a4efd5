"""The conversion worker: started by the first document that needs one, stopped after
`conversion_idle_seconds` without work, started again by the next document."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pydantic_ai_history.files import ConvertedDocument, FileSettings, _worker, read_file

pytestmark = pytest.mark.slow


def _idle_processes() -> list[int]:
    pool = _worker._current_pool()
    with pool._condition:
        return [worker.process.pid for worker in pool._idle]


def _reaper_running() -> bool:
    return any(thread.name == 'file-converter-reaper' for thread in threading.enumerate())


def _wait_for(condition: Callable[[], bool], seconds: float = 60.0) -> bool:
    """Poll `condition` until true or `seconds` pass: a bound on waiting, not a timing check."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def no_workers() -> Iterator[None]:
    """No worker alive or being started (a stopped worker is replaced in the background)."""
    pool = _worker._current_pool()
    assert _wait_for(lambda: pool._busy == 0)
    _worker.shutdown_workers()
    yield
    _worker.shutdown_workers()


@pytest.mark.usefixtures('no_workers')
def test_an_idle_worker_is_stopped_and_the_next_document_starts_one(documents: Path) -> None:
    docx = (documents / 'test.docx').read_bytes()
    keep = FileSettings(conversion_idle_seconds=math.inf, conversion_workers=1)
    stop = FileSettings(conversion_idle_seconds=0.5, conversion_workers=1)
    assert not _idle_processes()
    first = read_file(docx, name='test.docx', settings=keep)
    assert isinstance(first, ConvertedDocument)
    (pid,) = _idle_processes()  # started by the first document, waiting for more
    assert isinstance(read_file(docx, name='test.docx', settings=keep), ConvertedDocument)
    assert _idle_processes() == [pid]  # the same process converted the second
    os.kill(pid, 0)  # alive
    # a conversion with a short idle timeout: the worker is stopped once idle that long, then the reaper ends
    assert isinstance(read_file(docx, name='test.docx', settings=stop), ConvertedDocument)
    assert _wait_for(lambda: not _idle_processes() and not _reaper_running())
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    again = read_file(docx, name='test.docx', settings=keep)
    assert isinstance(again, ConvertedDocument)
    assert again.text == first.text
    (second,) = _idle_processes()
    assert second != pid


@pytest.mark.parametrize('value', [-1.0, math.nan])
def test_an_idle_timeout_that_cannot_work_is_refused_naming_the_field(value: float) -> None:
    with pytest.raises(ValueError, match=r'FileSettings\.conversion_idle_seconds must be >= 0'):
        FileSettings(conversion_idle_seconds=value)


def test_the_idle_timeout_does_not_change_cache_keys() -> None:
    assert FileSettings(conversion_idle_seconds=5).fingerprint() == FileSettings().fingerprint()
