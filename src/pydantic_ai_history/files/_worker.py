"""Document conversion in worker processes, under a hard time and memory limit.

A converter can spend minutes and gigabytes on a small hostile file: only a process can be stopped from
outside. Workers are plain `python -c` subprocesses speaking length-prefixed pickles on stdin/stdout, not
`multiprocessing` children (those re-import the app's `__main__`, breaking scripts without a main guard).
A worker loads the converters before any deadline runs, is kept for later conversions, and is killed past
`conversion_timeout_seconds` or `conversion_max_memory_bytes` (resident size from /proc; an rlimit 1 GiB
above is the backstop elsewhere); a reaper thread stops workers idle for `conversion_idle_seconds`.
Every call here blocks: callers run it in a thread, never on an event loop.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from ._base import Extraction
from ._manifest import human_size
from ._settings import FileSettings

logger = logging.getLogger('pydantic_ai_history.files')

_HEADER = struct.Struct('<Q')
_POLL_SECONDS = 0.05
_STARTUP_SECONDS = 120.0
"""Loading the converters takes seconds on a busy machine; it is not charged to any conversion."""
_ADDRESS_SPACE_HEADROOM = 1024 * 1024 * 1024
"""The address-space rlimit is the memory limit plus this: the interpreter and converters reserve far more
address space than they touch, and the resident-size poll is what enforces the limit on Linux."""
_MAX_JOBS = 200
"""A worker is replaced after this many conversions, so slow leaks in converters do not accumulate."""
_BOOTSTRAP = (
    'import pickle, struct, sys\n'
    'size = struct.unpack("<Q", sys.stdin.buffer.read(8))[0]\n'
    'sys.path[:] = pickle.loads(sys.stdin.buffer.read(size))\n'
    'from pydantic_ai_history.files._read import extract\n'
    'from pydantic_ai_history.files._worker import serve\n'
    'serve(extract)\n'
)
# Numeric libraries imported by converters reserve address space per thread; one thread each is plenty.
_ENV = {'OPENBLAS_NUM_THREADS': '1', 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}

Job = tuple[bytes, str, 'str | None', FileSettings]
Outcome = Extraction | str


class WorkerUnavailable(Exception):
    """No worker process could be started here: the caller converts inline instead."""


def _send(stream: IO[bytes], value: object) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    # Buffered streams: `read(n)` returns fewer than n bytes only at the end of the stream.
    header = stream.read(_HEADER.size)
    size = _HEADER.unpack(header)[0] if len(header) == _HEADER.size else -1
    payload = stream.read(size) if size >= 0 else b''
    if len(payload) != size:
        raise EOFError
    return pickle.loads(payload)


# ---- the worker side ------------------------------------------------------------------------------------


def serve(extract: Callable[[bytes, str, str | None, FileSettings], Outcome]) -> None:
    """The worker's loop: set the memory limit, load the converters, then convert with `extract` (the
    dispatcher's, passed in by the bootstrap so that this module need not import it) until stdin closes."""
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), 'wb')
    os.dup2(2, 1)  # a converter that prints must not corrupt the replies
    _limit_address_space(_receive(requests))
    _preload()
    _send(replies, 'ready')
    while True:
        try:
            data, media_type, name, settings = _receive(requests)
        except EOFError:
            return
        outcome: Outcome
        try:
            outcome = extract(data, media_type, name, settings)
        except MemoryError:
            outcome = 'conversion ran out of memory'
        del data
        _send(replies, (outcome, _resident_bytes(os.getpid()), peak_resident_bytes_of_self()))


def _limit_address_space(max_bytes: int) -> None:
    with contextlib.suppress(ImportError, ValueError, OSError):  # Windows, or a lower hard limit
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def _preload() -> None:
    # A converter that cannot load fails later, in the reader that needs it, with its own message.
    with contextlib.suppress(Exception):
        from markitdown import converters  # noqa: F401


# ---- the caller side ------------------------------------------------------------------------------------


def _resident_bytes(pid: int) -> int | None:
    """Resident set size of a process from /proc (Linux); None where it cannot be read."""
    try:
        with open(f'/proc/{pid}/statm', 'rb') as f:
            return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def peak_resident_bytes_of_self() -> int | None:
    """This process's own peak resident size (VmHWM, Linux): unlike `ru_maxrss`, not inherited from the
    process that started it."""
    with contextlib.suppress(OSError, ValueError, IndexError), open('/proc/self/status', 'rb') as f:
        for line in f:
            if line.startswith(b'VmHWM:'):
                return int(line.split()[1]) * 1024
    return None


_peak_lock = threading.Lock()
_peak: int = 0


def _record_peak(peak: int | None) -> None:
    global _peak
    with _peak_lock:
        _peak = max(_peak, peak or 0)


def worker_peak_bytes() -> int:
    """The largest peak resident size a worker reported since the last `shutdown_workers()` (Linux; 0
    elsewhere). Workers stopped at a limit report nothing: they were stopped at it."""
    return _peak


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    memory: int
    replies: queue.Queue[Any] = field(default_factory=queue.Queue)
    jobs: int = 0
    reaper: threading.Timer | None = None
    """Stops it once idle for `conversion_idle_seconds`."""

    @classmethod
    def start(cls, memory: int) -> _Worker:
        # stderr goes to a file, read back only to explain a worker that did not start.
        with tempfile.TemporaryFile() as errors:
            try:
                process = subprocess.Popen(
                    [sys.executable, '-c', _BOOTSTRAP],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    env={**os.environ, **_ENV},
                )
            except OSError as e:
                raise WorkerUnavailable(f'could not start {sys.executable}: {e}') from e
            worker = cls(process, memory)
            threading.Thread(target=worker._read_replies, daemon=True, name='file-converter-replies').start()
            reply: object
            try:
                assert process.stdin is not None
                _send(process.stdin, [p for p in sys.path if isinstance(p, str)])
                _send(process.stdin, memory + _ADDRESS_SPACE_HEADROOM)
                reply = worker.replies.get(timeout=_STARTUP_SECONDS)
            except (OSError, queue.Empty) as e:
                reply = e
            if reply != 'ready':
                worker.kill()
                errors.seek(0)
                detail = errors.read()[-2000:].decode(errors='replace').strip()
                raise WorkerUnavailable(f'converter worker did not start ({detail or reply!r})')
        return worker

    def _read_replies(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            try:
                self.replies.put(_receive(stream))
            except Exception as e:  # EOF or a garbled reply: the process is gone or unusable
                self.replies.put(e)
                return

    def convert(self, job: Job, settings: FileSettings, fmt: str) -> tuple[Outcome, bool]:
        """The outcome of one conversion, and whether this worker can take another."""
        assert self.process.stdin is not None
        self.jobs += 1
        try:
            _send(self.process.stdin, job)
        except OSError:
            self.kill()
            return f'{fmt} conversion failed: the converter process exited', False
        deadline = time.monotonic() + settings.conversion_timeout_seconds
        limit = human_size(settings.conversion_max_memory_bytes)
        while True:
            resident = _resident_bytes(self.process.pid)
            if resident is not None and resident > settings.conversion_max_memory_bytes:
                self.kill()
                return f'{fmt} conversion stopped at the {limit} memory limit; nothing shown', False
            try:
                reply = self.replies.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                reply = None
            if isinstance(reply, tuple):
                outcome, resident, peak = reply
                _record_peak(peak)
                healthy = (
                    self.jobs < _MAX_JOBS and (resident or 0) < settings.conversion_max_memory_bytes // 2
                )
                return outcome, healthy
            if reply is not None:  # the reader thread saw the process die
                # a failed allocation under the address-space limit often ends a converter's C code this way
                code = self.kill()
                how = f'signal {-code}' if code is not None and code < 0 else f'exit code {code}'
                return (
                    f'{fmt} conversion crashed ({how}), possibly at the {limit} memory limit; nothing shown',
                    False,
                )
            if time.monotonic() > deadline:
                self.kill()
                return (
                    f'{fmt} conversion stopped at the {settings.conversion_timeout_seconds:g} s time limit; '
                    'nothing shown'
                ), False

    def stop_reaper(self) -> None:
        if self.reaper is not None:
            self.reaper.cancel()

    def kill(self) -> int | None:
        self.stop_reaper()
        with contextlib.suppress(OSError):  # already reaped
            self.process.kill()
        try:
            return self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            return None
        finally:
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


class _Pool:
    """Idle workers by memory limit, at most `conversion_workers` alive; callers wait for a free one."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._condition = threading.Condition(threading.RLock())  # a worker or a slot is free
        self._idle: list[_Worker] = []
        self._busy = 0

    def convert(self, job: Job, settings: FileSettings, fmt: str) -> Outcome:
        worker = self._checkout(settings)
        healthy = False
        try:
            if worker is None:
                worker = _Worker.start(settings.conversion_max_memory_bytes)
            outcome, healthy = worker.convert(job, settings, fmt)
            return outcome
        finally:
            self._checkin(worker, healthy, settings.conversion_idle_seconds)

    def _checkout(self, settings: FileSettings) -> _Worker | None:
        """An idle worker with the right memory limit, or None when the caller may start one."""
        memory = settings.conversion_max_memory_bytes
        with self._condition:
            while True:
                for worker in self._idle:
                    if worker.memory == memory:
                        self._idle.remove(worker)
                        worker.stop_reaper()
                        self._busy += 1
                        return worker
                if self._busy + len(self._idle) < max(settings.conversion_workers, 1):
                    self._busy += 1
                    return None
                if self._idle:  # all idle workers have another limit: replace one
                    self._idle.pop(0).kill()
                    continue
                self._condition.wait()

    def _checkin(self, worker: _Worker | None, healthy: bool, idle_seconds: float) -> None:
        if worker is None or healthy:  # a worker that never started only frees its slot
            self._release(worker, idle_seconds)
            return
        if worker.process.poll() is None:
            worker.kill()
        # Retired or stopped: its replacement starts now, in the background, keeping the slot, so the
        # next conversion does not pay for loading the converters.
        threading.Thread(target=self._replace, args=(worker.memory, idle_seconds), daemon=True).start()

    def _replace(self, memory: int, idle_seconds: float) -> None:
        try:
            worker: _Worker | None = _Worker.start(memory)
        except WorkerUnavailable:
            worker = None
        self._release(worker, idle_seconds)

    def _release(self, worker: _Worker | None, idle_seconds: float) -> None:
        """Free a slot; `worker`, if any, becomes idle, stopped by its reaper after `idle_seconds`."""
        with self._condition:
            self._busy -= 1
            if worker is not None:
                self._idle.append(worker)
                if idle_seconds < threading.TIMEOUT_MAX:
                    worker.reaper = threading.Timer(idle_seconds, self._reap, (worker,))
                    worker.reaper.name, worker.reaper.daemon = 'file-converter-reaper', True
                    worker.reaper.start()
            self._condition.notify()

    def _reap(self, worker: _Worker) -> None:
        with self._condition:
            # taken out and parked again since: a newer reaper is in charge
            if worker.reaper is not threading.current_thread() or worker not in self._idle:
                return
            self._idle.remove(worker)
        logger.debug('stopping converter worker %d: idle', worker.process.pid)
        worker.kill()

    def shutdown(self) -> None:
        with self._condition:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_pool_lock = threading.Lock()
_pool: _Pool | None = None


def _current_pool() -> _Pool:
    global _pool
    with _pool_lock:
        # After a fork the parent's workers belong to the parent: start afresh.
        if _pool is None or _pool._pid != os.getpid():
            _pool = _Pool()
        return _pool


def convert_in_worker(
    data: bytes, media_type: str, name: str | None, settings: FileSettings, fmt: str
) -> Outcome:
    """`extract` run in a worker process under the settings' time and memory limits.

    Raises `WorkerUnavailable` when no worker can be started on this platform.
    """
    return _current_pool().convert((data, media_type, name, settings), settings, fmt)


def shutdown_workers() -> None:
    """Stop the idle worker processes (they are also stopped at exit); new ones start on demand."""
    global _peak
    pool = _pool
    if pool is not None and pool._pid == os.getpid():
        pool.shutdown()
    with _peak_lock:
        _peak = 0


atexit.register(shutdown_workers)
