"""Which attached files the serving model takes as they are: one pure decision and its documented table."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from ...budget.model_info import model_name_of, serving_candidates
from ...files import FileSettings
from ...files._provider_limits import provider_file_limits

ACCEPTED_AS_IS: Mapping[str, frozenset[str]] = {
    'image': frozenset({'image/png', 'image/jpeg', 'image/gif', 'image/webp'}),
    'document': frozenset({'application/pdf', 'text/plain'}),
}
"""The most the artifact stage ever leaves as it is, by kind: the images every pydantic-ai adapter sends, and
PDF and plain text, the documents every major provider takes; everything else is converted to markdown. The
model profile's file-input flags (2.x) narrow it; on 1.x, PDF is the only document (1.0's Anthropic and
Mistral adapters reject plain-text `BinaryContent`)."""

_LEGACY_DOCUMENTS = frozenset({'application/pdf'})


def accepted_as_is(media_type: str, profile: Mapping[str, Any] | None) -> bool:
    """Whether a file of `media_type` reaches the serving model as it is, given its file-input `profile`."""
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
    """The model (among a `FallbackModel`'s) whose provider accepts the least in one file."""
    names = [model_name_of(candidate) for candidate in serving_candidates(model)]

    def limits(name: str | None) -> tuple[int, int, int]:
        found = provider_file_limits(name)
        return found.image_max_bytes, found.image_max_dimension, found.document_max_bytes

    return min(names, key=limits, default=None)


def unidentified_image(data: bytes) -> bool:
    """Whether no image decoder recognises `data` (truncated or oversized images are recognised): such bytes
    are the provider's to judge, exactly as without this package."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)):
            return False
    except UnidentifiedImageError:
        return True
    except Exception:  # a decompression bomb, a broken header: recognised, and handled by the converter
        return False


def fits_as_is(media_type: str, size_bytes: int, settings: FileSettings) -> bool:
    """Whether an accepted file is also within `settings`' size limits as it is (an image's dimensions are
    the converter's to check: `_passes_as_is` leaves a recognised image to it)."""
    if media_type.startswith('image/'):
        return size_bytes <= settings.image_limits[0]
    document_max = settings.for_model(None).document_max_bytes or 0
    return size_bytes <= min(document_max, settings.max_file_bytes)


def inline_text(media_type: str, data: bytes, identifier: str, settings: FileSettings) -> str | None:
    """A plain-text file framed the way pydantic-ai inlines text files, or None when not plain UTF-8 or over
    `max_tokens` (about four bytes a token).

    For 1.x, whose profiles cannot say whether the model takes text documents: a document block could be
    rejected (1.0's Anthropic and Mistral adapters raise for `text/plain`).
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
