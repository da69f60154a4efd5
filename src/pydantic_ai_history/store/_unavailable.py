"""The configured store while its secret cannot be loaded: reads go through, every write is refused."""

from __future__ import annotations

import os

from ._base import SECRET_BYTES, ArtifactStore, StoredArtifact, StoreError


class UnavailableStore(ArtifactStore):
    """Stands for `store` in one request while `store.prepare()` fails (Redis unreachable, a root that cannot
    be created): every write raises `StoreError`, so the stages keep content inline and defer compaction.
    Ids use a throwaway secret, since nothing is stored under them; reads go to `store`.
    """

    def __init__(self, store: ArtifactStore, problem: str) -> None:
        super().__init__(secret=os.urandom(SECRET_BYTES))
        self.store = store
        """The store that cannot give its secret."""
        self.problem = problem
        """Why, from the store's own error."""

    async def prepare(self) -> None:
        """Nothing to load: the caller already tried the store's own."""

    async def _put(
        self,
        artifact_id: str,
        data: bytes,
        media_type: str,
        source: str,
        metadata: dict[str, str],
        scope: str,
    ) -> StoredArtifact:
        raise StoreError(f'the store is unavailable: {self.problem}')

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        return await self.store.get(artifact_id, scope=scope)

    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        return await self.store.info(artifact_id, scope=scope)

    async def _read(self, artifact_id: str, offset: int, limit: int | None, scope: str) -> bytes | None:
        return await self.store.read(artifact_id, offset=offset, limit=limit, scope=scope)
