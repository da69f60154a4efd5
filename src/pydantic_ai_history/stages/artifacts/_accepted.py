"""Which attached files the serving model takes as they are: one pure decision and its documented table."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from ...budget.model_info import model_name_of, serving_candidates
from ...files import FileSettings
from ...files._provider_limits import provider_file_limits

__all__ = (
    'ACCEPTED_AS_IS',
    'accepted_as_is',
    'fits_as_is',
    'inline_text',
    'strictest_file_model',
    'unidentified_image',
)

ACCEPTED_AS_IS: Mapping[str, frozenset[str]] = {
    'image': frozenset({'image/png', 'image/jpeg', 'image/gif', 'image/webp'}),
    'document': frozenset({'application/pdf', 'text/plain'}),
}
"""The most the artifact stage ever leaves as it is, by kind.

Images: the four formats every provider adapter of pydantic-ai sends (`ImageMediaType`). Documents: PDF and
plain text, the two that Anthropic, Google, Mistral, Bedrock and OpenAI take (Anthropic takes no other).
Everything else (Word, Excel, PowerPoint, HTML, CSV, archives, audio, ...) is converted: some provider rejects
it, and a markdown conversion is what the model can read anywhere.

Where the model profile has file-input flags (2.x: `supports_image_input`, `supports_document_input`,
`supported_document_media_types`), they narrow this table for the serving model, so a model that takes no
documents gets its PDFs converted. Where it has none (1.x) the table is narrowed by what 1.x adapters send:
images, and PDF documents only (1.0's Anthropic and Mistral adapters reject plain-text `BinaryContent`).
"""

_LEGACY_DOCUMENTS = frozenset({'application/pdf'})


def accepted_as_is(media_type: str, profile: Mapping[str, Any] | None) -> bool:
    """Whether a file of `media_type` reaches the serving model as it is, with the model's file-input
    `profile` (None where pydantic-ai has no such flags). Pure: no I/O, no model call."""
    media_type = media_type.split(';', 1)[0].strip().lower()
    if media_type in ACCEPTED_AS_IS['image']:
        return profile is None or bool(profile.get('supports_image_input', True))
    if media_type not in ACCEPTED_AS_IS['document']:
        return False
    if profile is None:
        return media_type in _LEGACY_DOCUMENTS
    if not profile.get('supports_document_input', True):
        return False
    supported = profile.get('supported_document_media_types')
    return supported is None or media_type in supported


def strictest_file_model(model: object) -> str | None:
    """The name of the model, among those that may serve the request (a `FallbackModel`'s), whose provider
    accepts the least in one file: its limits hold for every one of them."""
    names = [model_name_of(candidate) for candidate in serving_candidates(model)]

    def limits(name: str | None) -> tuple[int, int, int]:
        found = provider_file_limits(name)
        return found.image_max_bytes, found.image_max_dimension, found.document_max_bytes

    return min(names, key=limits, default=None)


def unidentified_image(data: bytes) -> bool:
    """Whether no image decoder recognises `data` at all (not a truncated or oversized image: those are
    recognised and fail later). Such bytes are the provider's to judge, exactly as without this package."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)):
            return False
    except UnidentifiedImageError:
        return True
    except Exception:  # a decompression bomb, a broken header: recognised, and handled by the converter
        return False


def fits_as_is(
    media_type: str, size_bytes: int, dimensions: tuple[int, int] | None, settings: FileSettings
) -> bool:
    """Whether a file the model accepts is also within the limits of `settings` (resolved for the serving
    provider: `FileSettings.for_model`) as it is: an image within `image_max_bytes` and `image_max_dimension`
    (dimensions None: its header could not be read, so the provider, not us, judges it), a document within
    `document_max_bytes` and `max_file_bytes`."""
    if media_type.startswith('image/'):
        max_bytes, max_dimension = settings.image_limits
        if size_bytes > max_bytes:
            return False
        return dimensions is None or max(dimensions) <= max_dimension
    document_max = settings.for_model(None).document_max_bytes or 0
    return size_bytes <= min(document_max, settings.max_file_bytes)


def inline_text(media_type: str, data: bytes, identifier: str, settings: FileSettings) -> str | None:
    """A plain-text file as the text every provider reads, framed the way pydantic-ai inlines text files
    (`-----BEGIN FILE id=... type=...-----`), or None when it is not plain UTF-8 text or is over the
    per-file token cap (`max_tokens`, about four bytes a token: the converter's job then).

    For versions whose model profiles cannot say whether the model takes text documents (1.x): a small
    text attachment stays its own text, without a manifest or a stored copy, where a document block could be
    rejected by the provider (1.0's Anthropic and Mistral adapters raise for `text/plain`).
    """
    if media_type.split(';', 1)[0].strip().lower() != 'text/plain' or len(data) > settings.max_tokens * 4:
        return None
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError:
        return None
    return '\n'.join(
        [
            f'-----BEGIN FILE id="{identifier}" type="text/plain"-----',
            text,
            f'-----END FILE id="{identifier}"-----',
        ]
    )
