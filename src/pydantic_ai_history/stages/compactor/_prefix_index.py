"""Which prefixes of a conversation were already compacted, so a reloaded full history is not re-summarized.

Apps that store only `new_messages()` hand over the full uncompacted history every turn, with a moving cut,
so a cache keyed on evicted content alone would always miss. Per conversation (a hash of its head) we record
each compacted prefix (length, rolling hash, summary key) and substitute the longest one a history starts
with. Hashes cover what the model sees, not timestamps or usage, so a history reloaded from JSON matches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import BinaryContent, ModelMessage

from ..._compat import is_media, media_type_of
from ...cache import SummaryCache, cache_key
from ...messages._nesting import json_text
from ...messages._utf8 import utf8

_MAX_RECORDS = 64
"""Recorded prefixes kept per conversation (the newest)."""


@dataclass(frozen=True)
class Origin:
    """Where a summary stands in the original history: it replaced messages `[head, length)`; `chain` is
    their rolling hash from the conversation key."""

    length: int
    chain: str


@dataclass(frozen=True)
class PrefixRecord:
    length: int
    chain: str
    summary_key: str


@dataclass
class PrefixIndex:
    """Rolling hashes of histories and the compacted-prefix records kept in a `SummaryCache`."""

    ttl: float | None = None

    # ---- hashing --------------------------------------------------------------------------------------

    def message_digest(self, message: ModelMessage) -> bytes:
        """Not memoized: it runs only when a compaction does, and a memo would hold a digest per message of
        every long history."""
        pieces: list[bytes] = [message.kind.encode()]
        for part in message.parts:
            pieces.append(b'\x00' + part.part_kind.encode())
            for name, label in _FIELDS:
                value = getattr(part, name, None)
                if value is not None:
                    pieces.append(label)
                    _feed(pieces, value)
        # One hash of the joined pieces: the same digest as feeding them one by one, with far less overhead.
        return hashlib.sha256(b''.join(pieces)).digest()

    def conversation_key(self, head: Sequence[ModelMessage]) -> str:
        return cache_key('compactor-conversation', *(self.message_digest(m) for m in head))

    def chains(self, seed: str, messages: Sequence[ModelMessage]) -> list[str]:
        """`result[i]` is the rolling hash of `messages[: i + 1]` from `seed`."""
        out: list[str] = []
        chain = seed
        for message in messages:
            chain = hashlib.sha256(chain.encode() + self.message_digest(message)).hexdigest()
            out.append(chain)
        return out

    def evicted_keys(
        self, chain: str | None, evicted: Sequence[ModelMessage], summarized: Sequence[ModelMessage]
    ) -> tuple[str, str | None]:
        """The rolling hashes of `summarized` from 'span' (the summary cache's key) and of `evicted` from
        `chain`, hashing each message once (`summarized` is a subsequence of `evicted`)."""
        wanted = {id(message) for message in summarized}
        span, seen = 'span', 0
        for message in evicted:
            digest = self.message_digest(message)
            if chain is not None:
                chain = hashlib.sha256(chain.encode() + digest).hexdigest()
            if id(message) in wanted:
                span = hashlib.sha256(span.encode() + digest).hexdigest()
                seen += 1
        if seen != len(summarized):  # not a subsequence after all: hashed on their own
            span = (self.chains('span', summarized) or ['span'])[-1]
        return span, chain

    # ---- records ----------------------------------------------------------------------------------------

    async def records(self, cache: SummaryCache, conversation: str) -> dict[int, PrefixRecord]:
        raw = await cache.get(_records_key(conversation))
        if not raw:
            return {}
        try:
            rows = json.loads(raw)
            return {int(n): PrefixRecord(int(n), str(chain), str(key)) for n, chain, key in rows}
        except (ValueError, TypeError):
            return {}

    async def add(self, cache: SummaryCache, conversation: str, record: PrefixRecord) -> None:
        current = await self.records(cache, conversation)
        current.pop(record.length, None)
        rows = [[r.length, r.chain, r.summary_key] for r in (*current.values(), record)]
        await cache.set(_records_key(conversation), json.dumps(rows[-_MAX_RECORDS:]), ttl=self.ttl)

    async def origin(self, cache: SummaryCache, conversation: str, summary: str) -> Origin | None:
        raw = await cache.get(cache_key('compactor-origin', conversation, summary))
        if not raw:
            return None
        try:
            length, chain = json.loads(raw)
            return Origin(int(length), str(chain))
        except (ValueError, TypeError):
            return None

    async def set_origin(self, cache: SummaryCache, conversation: str, summary: str, origin: Origin) -> None:
        value = json.dumps([origin.length, origin.chain])
        await cache.set(cache_key('compactor-origin', conversation, summary), value, ttl=self.ttl)


def _records_key(conversation: str) -> str:
    return cache_key('compactor-prefixes', conversation)


_FIELDS = tuple(
    (name, b'\x01' + name.encode() + b'\x02')
    for name in ('tool_name', 'tool_call_id', 'content', 'args', 'signature')
)
"""The part fields a message digest covers, with the label that precedes each in the hashed bytes."""

_ITEM_LABEL = b'\x01item\x02'


def _feed(pieces: list[bytes], value: Any) -> None:
    if isinstance(value, str):
        pieces.append(utf8(value))
    elif isinstance(value, bytes):
        pieces.append(value)
    elif isinstance(value, BinaryContent):
        pieces.append(value.media_type.encode() + b'\x03' + value.data)
    elif is_media(value):  # a file URL: serialising it may ask for a media type it cannot guess
        pieces.append(
            utf8(f'{type(value).__name__}\x03{getattr(value, "url", "")}\x03{media_type_of(value)}')
        )
    elif isinstance(value, (list, tuple)):
        for item in value:
            if item is not None:
                pieces.append(_ITEM_LABEL)
                _feed(pieces, item)
    else:
        pieces.append(utf8(json_text(value)))
