"""What the Redis cache and the Redis store share: the optional import and a client per event loop."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

DEFAULT_REDIS_URL = 'redis://localhost:6379/0'


def import_redis_asyncio() -> Any:
    """Import `redis.asyncio` on first use, so `redis` stays an optional dependency."""
    try:
        import redis.asyncio
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f'the Redis backends need the `redis` package ({e}): '
            "install it with `pip install 'pydantic-ai-history[redis]'`"
        ) from e
    return redis.asyncio


@dataclass(frozen=True, kw_only=True)
class RedisPoolSettings:
    """How a client this package makes from a URL connects: one pool per store or cache, for every run.

    A burst of runs waits for a free connection instead of failing, and a connection error or timeout is
    retried with backoff before it is reported. A client passed in by the caller keeps its own configuration.
    """

    max_connections: int = 64
    """Connections at most in the pool; further calls wait for one to be free."""
    pool_timeout: float = 10.0
    """Seconds a call waits for a free connection before it fails."""
    connect_timeout: float = 5.0
    """Seconds to open a connection. Longer than the socket timeout: a loop busy with a burst of runs is slow
    to see a connection open, and a hung server is found by the socket timeout of its first call anyway."""
    retries: int = 3
    """Attempts after the first, on a connection error or a timeout."""
    backoff_base: float = 0.05
    """Seconds before the first retry; doubled for each further one (with jitter)."""
    backoff_cap: float = 1.0
    """The longest wait between two attempts, in seconds."""

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.retries < 0 or min(self.pool_timeout, self.connect_timeout) <= 0:
            raise ValueError(
                'RedisPoolSettings: max_connections, pool_timeout and connect_timeout must be positive and '
                f'retries not negative (got {self})'
            )


class RedisClients:
    """The client to use on the running event loop (`url` defaults to `DEFAULT_REDIS_URL`).

    An asyncio client's connections fail with "Event loop is closed" on another loop (each `Agent.run_sync`
    may run on a new one), so a client made from a URL is re-created when the loop changes; a client passed
    in by the caller is used as-is, since its lifetime is the caller's.
    """

    def __init__(
        self,
        url: str | None,
        client: Any | None,
        socket_timeout: float | None,
        pool: RedisPoolSettings | None = None,
    ) -> None:
        if url is not None and client is not None:
            raise ValueError('pass exactly one of `url` or `client`')
        if client is None:
            url = url or DEFAULT_REDIS_URL
            import_redis_asyncio()  # fail at construction, not on the first call
        self.url = url
        self.socket_timeout = socket_timeout
        self.pool = pool if pool is not None else RedisPoolSettings()
        self._given = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owned: Any | None = None

    def get(self) -> Any:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._owned is None or self._loop is not loop:
            # The previous client (if any) is bound to a loop that is gone or not ours; drop it.
            self._owned = self._create()
            self._loop = loop
        return self._owned

    def _create(self) -> Any:
        from redis.asyncio.retry import Retry  # retries on connection errors and timeouts
        from redis.backoff import ExponentialWithJitterBackoff

        settings = self.pool
        redis = import_redis_asyncio()
        pool = redis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=settings.max_connections,
            timeout=settings.pool_timeout,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=settings.connect_timeout,
            decode_responses=False,
            retry=Retry(
                ExponentialWithJitterBackoff(base=settings.backoff_base, cap=settings.backoff_cap),
                settings.retries,
            ),
        )
        return redis.Redis.from_pool(pool)  # closing the client closes its pool

    async def aclose(self) -> None:
        owned, loop = self._owned, self._loop
        self._owned = self._loop = None
        # A client from a previous loop cannot be closed from this one; its sockets went with that loop.
        if owned is not None and loop is asyncio.get_running_loop():
            await owned.aclose()
