"""What each provider accepts in one attached file: image bytes and pixels, document bytes.

An attachment the serving provider accepts goes to it unchanged while the history fits; only what it would
reject (or what no longer fits) is fitted or converted. Limits are the providers' documented ones (for the
base64 payload where that is what they measure); an undocumented provider gets conservative ones. Test
models get none, except a `FunctionModel` named after a real model, which gets its maker's limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..tokens._model_name import parse_model_name

NO_LIMIT = 2**62
"""A limit no file reaches: the provider documents none."""


@dataclass(frozen=True)
class FileLimits:
    """The most one attached file may be for a provider to accept it."""

    image_max_bytes: int
    """Bytes of one image, as sent (before base64)."""
    image_max_dimension: int
    """Pixels of an image's longer side."""
    document_max_bytes: int
    """Bytes of one document (a PDF, a plain-text file) sent as it is."""


CONSERVATIVE_LIMITS = FileLimits(
    image_max_bytes=2 * 1024 * 1024, image_max_dimension=8_000, document_max_bytes=4_500_000
)
"""For a provider none of the pages below covers: under the smallest of them (2 MiB images, Bedrock's 4.5 MB
documents, 8,000 px)."""

_ANTHROPIC = FileLimits(
    # platform.claude.com/docs/en/build-with-claude/vision, "General limits": 5 MB per image, which the API
    # measures on the base64 data ("image exceeds 5 MB maximum: ... > 5242880 bytes"): 3.75 MiB of image;
    # 8000x8000 px (2000x2000 when a request holds more than 20 images). /pdf-support: 32 MB per request.
    image_max_bytes=5 * 1024 * 1024 * 3 // 4,
    image_max_dimension=8_000,
    document_max_bytes=32_000_000,
)
_BEDROCK = FileLimits(
    # docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Message.html (Converse): each image at most
    # 3.75 MB and 8000x8000 px, up to 20 per request; each document at most 4.5 MB, up to five.
    image_max_bytes=3_750_000,
    image_max_dimension=8_000,
    document_max_bytes=4_500_000,
)
_OPENAI = FileLimits(
    # platform.openai.com/docs/guides/images-vision, "Image input requirements": up to 20 MB per image (50 MB
    # of images per request), PNG/JPEG/WEBP/non-animated GIF, no pixel limit (scaled server-side).
    # /docs/guides/pdf-files: up to 32 MB of files per request.
    image_max_bytes=20_000_000,
    image_max_dimension=NO_LIMIT,
    document_max_bytes=32_000_000,
)
_GOOGLE = FileLimits(
    # cloud.google.com/vertex-ai/generative-ai/docs/multimodal/image-understanding: 7 MB per inline image,
    # no pixel limit (scaled server-side); ai.google.dev/gemini-api/docs/document-processing: inline PDFs
    # under 20 MB (the whole request). The Gemini API and Vertex share one table: the smaller of each.
    image_max_bytes=7_000_000,
    image_max_dimension=NO_LIMIT,
    document_max_bytes=20_000_000,
)
_TEST_MODEL = FileLimits(NO_LIMIT, NO_LIMIT, NO_LIMIT)

PROVIDER_FILE_LIMITS: Mapping[str, FileLimits] = {
    'anthropic': _ANTHROPIC,
    'bedrock': _BEDROCK,
    **dict.fromkeys(('openai', 'openai-chat', 'openai-responses', 'azure', 'azure-responses'), _OPENAI),
    **dict.fromkeys(('google', 'google-gla', 'google-vertex', 'google-cloud', 'vertexai', 'gemini'), _GOOGLE),
}
"""By pydantic-ai provider name (`model_name_of`'s prefix); any other provider gets `CONSERVATIVE_LIMITS`."""

_TEST_PROVIDERS = frozenset({'function', 'test'})
"""pydantic-ai's test models (`FunctionModel`, `TestModel`): they send nothing anywhere."""

_FAMILY_LIMITS: Mapping[str, FileLimits] = {'openai': _OPENAI, 'anthropic': _ANTHROPIC, 'google': _GOOGLE}
"""A test model named after a real model takes what that model's maker accepts."""


def provider_file_limits(model_name: str | None) -> FileLimits:
    """The limits of the provider serving `model_name` (`provider:model`), `CONSERVATIVE_LIMITS` when it is
    not one of `PROVIDER_FILE_LIMITS` or the name has no provider."""
    if not model_name:
        return CONSERVATIVE_LIMITS
    parsed = parse_model_name(model_name)
    provider = parsed.provider or ''
    if provider in _TEST_PROVIDERS:
        return _FAMILY_LIMITS.get(parsed.family or '', _TEST_MODEL)
    if provider.startswith('gateway/'):
        provider = provider.partition('/')[2]
    return PROVIDER_FILE_LIMITS.get(provider, CONSERVATIVE_LIMITS)
