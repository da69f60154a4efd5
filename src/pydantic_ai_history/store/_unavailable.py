"""Stand-ins for a store in one request, whose writes go elsewhere: reads go to the store itself."""

from __future__ import annotations

import os

from ._base import SECRET_BYTES, ArtifactStore, Metadata, StoredArtifact, StoreError


class StoreView(ArtifactStore):
    """`store` as one request sees it: writes are the subclass's own, reads (and listings) go to `store`."""

    def __init__(self, store: ArtifactStore, *, secret: bytes | None = None) -> None:
        super().__init__(secret=secret)
        self.store = store
        """The store read from."""

    async def prepare(self) -> None:
        """Nothing to load: the caller already did (or, under durability, the secret is explicit)."""

    async def _get(self, artifact_id: str, scope: str) -> bytes | None:
        return await self.store.get(artifact_id, scope=scope)

    async def _info(self, artifact_id: str, scope: str) -> StoredArtifact | None:
        return await self.store.info(artifact_id, scope=scope)

    async def _read(self, artifact_id: str, offset: int, limit: int | None, scope: str) -> bytes | None:
        return await self.store.read(artifact_id, offset=offset, limit=limit, scope=scope)

    async def _list(self, scope: str, limit: int) -> list[StoredArtifact]:
        return await self.store.list_artifacts(scope=scope, limit=limit)


class UnavailableStore(StoreView):
    """Stands for `store` in one request while `store.prepare()` fails (Redis unreachable, a root that cannot
    be created): every write raises `StoreError`, so the stages keep content inline and defer compaction.
    Ids use a throwaway secret, since nothing is stored under them; reads go to `store`.
    """

    def __init__(self, store: ArtifactStore, problem: str) -> None:
        super().__init__(store, secret=os.urandom(SECRET_BYTES))
        self.problem = problem
        """Why, from the store's own error."""

    async def _put(
        self, artifact_id: str, data: bytes, media_type: str, source: str, metadata: Metadata, scope: str
    ) -> StoredArtifact:
        raise StoreError(f'the store is unavailable: {self.problem}')
