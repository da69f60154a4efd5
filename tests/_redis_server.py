"""A real, throwaway `redis-server` on a free loopback port, shared by tests/cache and tests/store."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

START_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    """The `redis-server` path; when absent, skip the test, or fail it in CI (which installs the server)."""
    binary = shutil.which('redis-server')
    if binary is None:
        message = 'redis-server not installed (apt-get install redis-server); Redis tests need a real server'
        if os.environ.get('CI'):
            pytest.fail(message + ' and CI is set, so it must be there')
        pytest.skip(message)
    return binary


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=0.5) as s:
            s.sendall(b'PING\r\n')
            return s.recv(64).startswith(b'+PONG')
    except OSError:
        return False


class RedisServer:
    """One `redis-server` process with no persistence; `stop()` and `start()` again reuse the same port."""

    def __init__(self, binary: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f'redis://127.0.0.1:{self.port}/0'

    def start(self) -> None:
        assert self.process is None, 'already running'
        # A file, not a pipe: nobody reads the log while the server runs, and a full pipe would block it.
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop(), it outlives this method
        args = ['--port', str(self.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']
        self.process = subprocess.Popen(
            [self.binary, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._log = log
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log.seek(0)
                output = log.read().decode(errors='replace')
                log.close()
                self.process = None
                raise RuntimeError(f'redis-server exited early on port {self.port}:\n{output}')
            if _ping(self.port):
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f'redis-server did not answer PING on port {self.port} within {START_TIMEOUT}s')

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.kill()
        self.process.wait(timeout=10)
        self._log.close()
        self.process = None


@contextmanager
def running_redis_server() -> Iterator[RedisServer]:
    server = RedisServer(redis_server_binary())
    server.start()
    try:
        yield server
    finally:
        server.stop()
