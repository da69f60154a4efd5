"""How this package marks the messages and parts it writes, and recognises them again: by identity, not text.

A user or a tool can type any text, so no text prefix is trusted. Our output carries either **metadata** (the
dict under `MARKER_KEY`, set by code and never sent to the model; a message records the kind of each part, so
a reloaded history still knows them) or, where no metadata can hold it (a `UserPromptPart`, every message on
1.0, a request pydantic-ai merged), a **seal**: a last line with an HMAC of its kind and exactly the text
before it. The key is the store's secret (`seal_key_scope`), so every process sharing the store recognises
our notes; a seal made with another key reads as plain text (treated as the user's, never dropped). A request
is ours only when every part but its system prompts is, so a merged user turn is never lost with it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import itertools
import logging
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, SystemPromptPart

from .._compat import make_request

logger = logging.getLogger('pydantic_ai_history')


MARKER_KEY = 'pydantic_ai_history'
"""Metadata key under which this package marks the messages and parts it wrote."""

READ_ARTIFACT_TOOL = 'read_artifact'
"""The read-back tool's default name (the tool itself is in `readback`); `HistoryProcessor(readback_tool_name=
...)` renames it, and every note, stub and summary of ours then names it so (`readback_tool()`)."""

READBACK_TOOL_METADATA = {MARKER_KEY: 'read-back'}
"""The metadata of the read-back tool's definition (where pydantic-ai's tools have metadata): how the
processor tells it from an app's tool of the same name."""

_readback_tool: ContextVar[str] = ContextVar('pydantic_ai_history_readback_tool', default=READ_ARTIFACT_TOOL)


def readback_tool() -> str:
    """The name the notes being written give the read-back tool: the processor's, within its processing."""
    return _readback_tool.get()


Kind = Literal['summary', 'pinned', 'transcript', 'trail', 'window', 'artifact', 'recall']
"""What a part of ours is: a summary, the pinned section, the stored-transcript reference or the trail of
exact details carried with it, a window note, the text that stands for an artifact, or the stored passages
recalled for a new question."""
_KINDS: frozenset[str] = frozenset(
    {'summary', 'pinned', 'transcript', 'trail', 'window', 'artifact', 'recall'}
)

OPENINGS: Mapping[str, str] = {
    'summary': '[pydantic-ai-history: summary of earlier conversation]',
    'window': '[pydantic-ai-history: earlier messages removed]',
    'recall': (
        '[pydantic-ai-history: passages of the earlier conversation that match the question below, best '
        'first, each headed by where it is stored and how to read on]'
    ),
}
"""Opening lines of the user-voice texts we write: what the model reads, never how we recognise them."""

SECRET_ENV = 'PYDANTIC_AI_HISTORY_SECRET'
"""No longer read: seals are keyed with the store's secret (see the module docstring); a warning says so once
when it is set."""

_SEAL_OPENING = '\n[pydantic-ai-history '
_SEAL = re.compile(
    r'\n\[pydantic-ai-history (summary|pinned|transcript|trail|window|artifact|recall) '
    r'mark ([0-9a-f]{24})\]\Z'
)
_SEAL_MAX = 64
"""A seal line is shorter than this: only the tail of a text is searched for one."""
SEAL_TOKENS = 24
"""Tokens a seal line adds to a text (a 24-hex-digit tag is about 14 tokens; rounded up)."""

_secret: bytes | None = None
_verified: dict[tuple[bytes, str], tuple[str, str] | None] = {}
_verified_chars = 0
_VERIFIED_MAX_CHARS = 16_000_000
"""Verdicts are remembered for texts up to this many characters in total (then forgotten all at once)."""


def set_mark_secret(secret: str | bytes | None) -> None:
    """Use `secret` as the process's secret (`process_secret`) from now on (None: a new random one).

    It keys seals made outside any `seal_key_scope`, and `MemoryStore`s made without a `secret=` that make
    their first id afterwards."""
    global _secret, _verified_chars
    _secret = secret.encode() if isinstance(secret, str) else secret
    _verified.clear()
    _verified_chars = 0


_scoped_key: ContextVar[bytes | None] = ContextVar('pydantic_ai_history_seal_key', default=None)


def seal_key_scope(secret: bytes) -> MarksScope:
    """Seal and verify with a key derived from `secret` within the block, with no environment or randomness:
    with the store's secret, every process (and durable worker and replay) sharing it reads the same seals."""
    return MarksScope(readback_tool(), secret)


@functools.lru_cache(maxsize=16)  # asked for every seal made or read
def seal_key(secret: bytes) -> bytes:
    """The seal key derived from a store's secret (not the secret itself, which keys artifact ids)."""
    return hmac.new(secret, b'pydantic-ai-history seal', hashlib.sha256).digest()


class MarksScope:
    """Notes written within the block name the read-back tool `tool` and, given a store's secret, are sealed
    with a key derived from it (`seal_key_scope`): entered on every request, so no generator."""

    __slots__ = ('_key', '_tokens', '_tool')

    def __init__(self, tool: str, secret: bytes | None = None) -> None:
        self._tool = tool
        self._key = seal_key(secret) if secret is not None else None
        self._tokens: tuple[Token[str], Token[bytes | None] | None] | None = None

    def __enter__(self) -> None:
        tool = _readback_tool.set(self._tool)
        key = _scoped_key.set(self._key) if self._key is not None else None
        self._tokens = tool, key

    def __exit__(self, *exc: object) -> None:
        assert self._tokens is not None
        tool, key = self._tokens
        self._tokens = None
        if key is not None:
            _scoped_key.reset(key)
        _readback_tool.reset(tool)


def process_secret() -> bytes:
    """The process's own secret: a `MemoryStore`'s when it is given none (its data dies with the process too),
    and the key of seals made and read outside any `seal_key_scope`. Random once per process;
    `set_mark_secret` replaces it."""
    global _secret
    if _secret is None:
        if os.environ.get(SECRET_ENV):
            logger.warning(
                "%s is no longer read: seals are keyed with the artifact store's secret (a DirectoryStore "
                'or RedisStore keeps one beside its data; pass `secret=` to MemoryStore to choose it)',
                SECRET_ENV,
            )
        _secret = secrets.token_bytes(32)
    return _secret


def _key() -> bytes:
    scoped = _scoped_key.get()
    return seal_key(process_secret()) if scoped is None else scoped


def _tag(kind: str, body: str) -> str:
    mac = hmac.new(_key(), f'{kind}\x00'.encode(), hashlib.sha256)
    mac.update(body.encode('utf-8', 'surrogatepass'))
    return mac.hexdigest()[:24]


def seal(kind: Kind, text: str) -> str:
    """`text` with a last line that proves this package wrote it, as `kind`."""
    return f'{text}\n[pydantic-ai-history {kind} mark {_tag(kind, text)}]'


def sealed_kind(text: str) -> tuple[str, str] | None:
    """`(kind, text without the seal)` when `text` carries a valid seal of ours, else None. Only a last line
    that looks like a seal is hashed, and verdicts are remembered (a history is examined many times)."""
    if _SEAL_OPENING not in text[-_SEAL_MAX:]:
        return None
    memo = (_key(), text)
    if memo in _verified:
        return _verified[memo]
    verdict = _verify(text)
    global _verified_chars
    if _verified_chars + len(text) > _VERIFIED_MAX_CHARS:
        _verified.clear()
        _verified_chars = 0
    _verified[memo] = verdict
    _verified_chars += len(text)
    return verdict


def _verify(text: str) -> tuple[str, str] | None:
    match = _SEAL.search(text, max(len(text) - _SEAL_MAX, 0))
    if match is not None:
        kind, body = match.group(1), text[: match.start()]
        if hmac.compare_digest(match.group(2), _tag(kind, body)):
            return kind, body
    return None


def strip_seal(text: str) -> str:
    """A text of ours (known from metadata) without its seal line, which another process's secret made."""
    match = _SEAL.search(text, max(len(text) - _SEAL_MAX, 0))
    return text[: match.start()] if match is not None else text


def unseal(kind: Kind, text: str) -> str | None:
    """The text without its seal when it is a `kind` text of ours, else None."""
    found = sealed_kind(text)
    return found[1] if found is not None and found[0] == kind else None


def own_metadata(metadata: Any) -> dict[str, Any]:
    """Our dict in a message's or part's metadata (empty when there is none)."""
    if not metadata:  # the common case, checked first: this runs for every part of every request
        return {}
    value = metadata.get(MARKER_KEY) if isinstance(metadata, (dict, Mapping)) else None
    return value if isinstance(value, dict) else {}


def _part_kind(part: Any) -> str | None:
    kind = own_metadata(getattr(part, 'metadata', None)).get('kind')
    if kind in _KINDS:
        return str(kind)
    content = getattr(part, 'content', None)
    if isinstance(content, str):
        found = sealed_kind(content)
        return found[0] if found is not None else None
    return None


def part_kinds(message: ModelMessage) -> list[str | None]:
    """The kind of each part of a request that is ours, None for every other part (all None for a response):
    from the layout the message's metadata records when it matches, else each part's own mark."""
    if not isinstance(message, ModelRequest):
        return [None] * len(message.parts)
    ours = own_metadata(getattr(message, 'metadata', None))
    layout = ours.get('parts')
    if isinstance(layout, list) and len(layout) == len(message.parts):
        return [kind if kind in _KINDS else None for kind in layout]
    legacy = ours.get('kind') if layout is None else None
    if legacy in ('summary', 'window'):
        # written before layouts were recorded: every part but the system prompts it carried is the note
        return [None if isinstance(p, SystemPromptPart) else str(legacy) for p in message.parts]
    return [_part_kind(part) for part in message.parts]


def marker_kind(message: ModelMessage) -> str | None:
    """'summary' or 'window' for a request this package wrote, else None: a request with any foreign part
    but its system prompts is foreign, whatever its text says."""
    if not isinstance(message, ModelRequest):
        return None
    kinds = part_kinds(message)
    found: str | None = None
    for part, kind in zip(message.parts, kinds, strict=True):
        if kind is None:
            if isinstance(part, SystemPromptPart):
                continue
            return None
        if kind in ('summary', 'window'):
            found = kind
    return found


def own_request(
    parts: Sequence[tuple[ModelRequestPart, str | None]],
    *,
    details: Mapping[str, Any],
    run_id: str | None = None,
) -> ModelRequest:
    """A request of ours from `(part, kind)` pairs (kind None for carried system prompts, each other part
    already marked); the message's metadata adds the layout and `details` where messages have metadata."""
    layout = [kind for _, kind in parts]
    kind = next((k for k in layout if k in ('summary', 'window')), None)
    metadata = {MARKER_KEY: {'kind': kind, **details, 'parts': layout}}
    return make_request([part for part, _ in parts], run_id=run_id, metadata=metadata)


def separate_own_parts(messages: list[ModelMessage]) -> list[ModelMessage]:
    """`messages` with every request that mixes our summary or window parts with foreign ones split in two.

    pydantic-ai merges consecutive requests when a run starts on a saved history; split back, our summary is
    ours again and the next compaction updates it rather than keep it as foreign content. Returns `messages`
    itself when no request mixes them.
    """
    split = [_separated(message) for message in messages]
    if not any(split):
        return messages
    return [piece for message, pieces in zip(messages, split, strict=True) for piece in pieces or [message]]


def _separated(message: ModelMessage) -> list[ModelMessage] | None:
    """A mixed request as consecutive requests, each all ours or all foreign; None when it is not mixed."""
    if not isinstance(message, ModelRequest):
        return None
    kinds = part_kinds(message)
    if not any(kind in ('summary', 'window') for kind in kinds) or all(kinds):
        return None
    run_id = getattr(message, 'run_id', None)
    runs = itertools.groupby(zip(message.parts, kinds, strict=True), key=lambda pair: pair[1] is not None)
    return [
        own_request(list(parts), details={}, run_id=run_id)
        if ours
        else dataclasses.replace(message, parts=[part for part, _ in parts])
        for ours, parts in runs
    ]
