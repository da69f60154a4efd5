"""The two model-free scores: what the compacted context holds, and what one read-back call recovers."""

from __future__ import annotations

from collections.abc import Sequence

from ..readback import read_artifact_text
from ..stages._transcript import named_transcripts
from ..store import ArtifactStore
from ._probes import Probe
from ._text import contains, normalize


def present_share(facts: Sequence[str], context: str) -> list[bool]:
    """For each fact, whether it is in `context` (normalised: whitespace and case only)."""
    text = normalize(context)
    return [contains(text, normalize(fact)) for fact in facts]


async def recoverable_share(
    probes: Sequence[Probe], context: str, store: ArtifactStore | None, scope: str
) -> list[bool]:
    """For each probe, whether its answer is in what ONE `read_artifact(query=<its question>)` call on the
    artifact the context names first (the summary's reference) returns; all False when the strategy keeps
    nothing."""
    ids = named_transcripts(context)
    if store is None or not ids:
        return [False] * len(probes)
    texts = [await read_artifact_text(store, ids[0], query=p.question, scope=scope) for p in probes]
    return [contains(normalize(text), normalize(p.answer)) for text, p in zip(texts, probes, strict=True)]
