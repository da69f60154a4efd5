"""What the Redis cache and the Redis store share: the optional import and a client per event loop."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ('DEFAULT_REDIS_URL', 'RedisClients', 'import_redis_asyncio')

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


class RedisClients:
    """The client to use on the running event loop.

    An asyncio Redis client's connections belong to the loop that opened them, and fail with
    "Event loop is closed" on the next loop (each `Agent.run_sync` may run on a new one). A client this
    package created from a URL is therefore re-created when the loop changes; a client passed in by
    the caller is used as-is, since its lifetime is the caller's.
    """

    def __init__(self, url: str | None, client: Any | None, socket_timeout: float | None) -> None:
        if (url is None) == (client is None):
            raise ValueError('pass exactly one of `url` or `client`')
        if url is not None:
            import_redis_asyncio()  # fail at construction, not on the first call
        self.url = url
        self.socket_timeout = socket_timeout
        self._given = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owned: Any | None = None

    def get(self) -> Any:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._owned is None or self._loop is not loop:
            # The previous client (if any) is bound to a loop that is gone or not ours; drop it.
            self._owned = import_redis_asyncio().Redis.from_url(
                self.url,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.socket_timeout,
                decode_responses=False,
            )
            self._loop = loop
        return self._owned

    async def aclose(self) -> None:
        owned, loop = self._owned, self._loop
        self._owned = self._loop = None
        # A client from a previous loop cannot be closed from this one; its sockets went with that loop.
        if owned is not None and loop is asyncio.get_running_loop():
            await owned.aclose()
