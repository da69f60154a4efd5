"""Limits applied when turning an attached file into something a model can afford."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from ._provider_limits import provider_file_limits

# Bumped when conversion output changes for the same settings, so cached conversions are not reused.
_CONVERTER_VERSION = 3
# Settings that change how a conversion runs, never what it produces: left out of cache keys.
_OPERATIONAL = frozenset({'conversion_isolation', 'conversion_workers', 'conversion_idle_seconds'})
# Settings that default to what the serving provider accepts (`for_model`).
_PROVIDER_FIELDS = ('image_max_bytes', 'image_max_dimension', 'document_max_bytes')


@dataclass(frozen=True)
class FileSettings:
    """Every limit of the file conversion layer; the defaults are the project's documented ones."""

    max_file_bytes: int = 50 * 1024 * 1024
    """Larger files are not read at all: a note is returned instead."""
    max_tokens: int = 5_000
    """Final cut per converted file, keeping head and tail."""
    text_max_lines: int = 200
    text_max_line_chars: int = 1_000
    table_head_rows: int = 20
    table_tail_rows: int = 10
    table_max_columns: int = 50
    table_max_cell_chars: int = 500
    struct_max_depth: int = 5
    struct_max_items: int = 50
    struct_max_keys: int = 50
    struct_max_string_chars: int = 500
    image_max_bytes: int | None = None
    """The most bytes an image is sent with. Default: what the serving provider documents (Anthropic 3.75 MiB,
    OpenAI 20 MB, Google 7 MB, Bedrock 3.75 MB: `files._provider_limits`), 2 MiB for any other provider."""
    image_max_dimension: int | None = None
    """The most pixels of an image's longer side. Default: what the serving provider documents (8,000 for
    Anthropic and Bedrock, none for OpenAI and Google, which scale images themselves), 8,000 otherwise."""
    document_max_bytes: int | None = None
    """The largest document (PDF, plain text) sent as it is when the model reads such files; a larger one is
    converted to text. Default: what the serving provider documents (Anthropic and OpenAI 32 MB, Google 20 MB,
    Bedrock 4.5 MB), 4.5 MB otherwise."""
    image_max_pixels: int = 50_000_000
    """Decompression-bomb guard: images with more pixels are never decoded."""
    audio_max_seconds: float = 30.0
    audio_max_bytes: int = 10 * 1024 * 1024
    conversion_timeout_seconds: float = 10.0
    """Wall-clock limit of one document conversion; the worker converting it is killed when it runs over."""
    conversion_max_memory_bytes: int = 512 * 1024 * 1024
    """Memory limit of the worker process converting a document (its resident size, about 150 MB of which
    are the converters themselves); a conversion that needs more is stopped."""
    conversion_isolation: Literal['process', 'inline'] = 'process'
    """'process' converts documents in a separate worker process under the time and memory limits;
    'inline' converts in the calling thread with only the format limits below (for platforms without
    subprocesses). When a worker cannot be started, conversion falls back to inline with a warning."""
    conversion_workers: int = 2
    """Worker processes converting documents at the same time; further conversions wait for one."""
    conversion_idle_seconds: float = 60.0
    """A worker process left idle this long is stopped (it holds the converters, some 150-200 MB); the next
    document conversion starts a new one, which takes a few seconds. `math.inf` keeps workers until exit."""
    max_uncompressed_bytes: int = 100 * 1024 * 1024
    """ZIP-based documents (DOCX, XLSX, PPTX, ODF, EPUB, ZIP) declaring more uncompressed bytes than this
    are not opened."""
    max_compression_ratio: int = 100
    """A ZIP member over 1 MiB that compressed better than this many to one is taken for a zip bomb."""
    max_archive_entries: int = 10_000
    """ZIP-based documents with more members are not opened (the directory alone can exhaust memory)."""
    xlsx_max_shared_strings_bytes: int = 32 * 1024 * 1024
    """XLSX workbooks whose shared-strings part is larger are not opened: readers load it whole."""
    table_max_rows: int = 50_000
    """Rows read from a CSV; beyond it reading stops and the total is reported as a lower bound."""
    xlsx_max_rows: int = 10_000
    """Rows read from each XLSX sheet (parsing one costs some 50 times a CSV row); beyond it reading stops
    and the sheet's declared size is reported."""
    pdf_max_pages: int = 100
    """Pages of a PDF that are converted; the page count of the rest is still reported."""
    max_extracted_chars: int = 2_000_000
    """Characters of converted text kept (head and tail) before the token cut: nothing larger is ever
    tokenized."""

    def for_model(self, model_name: str | None) -> FileSettings:
        """These settings with each provider limit left unset filled in for the provider serving `model_name`
        (conservative limits when it is unknown or None); the limits given stay as they are."""
        if all(getattr(self, f) is not None for f in _PROVIDER_FIELDS):
            return self
        limits = provider_file_limits(model_name)
        return replace(self, **{f: getattr(self, f) or getattr(limits, f) for f in _PROVIDER_FIELDS})

    @property
    def image_limits(self) -> tuple[int, int]:
        """`(image_max_bytes, image_max_dimension)`, conservative where unset (see `for_model`)."""
        limits = provider_file_limits(None)
        return (
            self.image_max_bytes or limits.image_max_bytes,
            self.image_max_dimension or limits.image_max_dimension,
        )

    def __post_init__(self) -> None:
        if not self.conversion_idle_seconds >= 0:  # also refuses NaN
            raise ValueError(
                f'FileSettings.conversion_idle_seconds must be >= 0, got {self.conversion_idle_seconds!r}'
            )

    def fingerprint(self) -> str:
        """A stable string of every setting (and the converter version), for callers' cache keys."""
        parts = [f'v={_CONVERTER_VERSION}']
        parts.extend(
            f'{f.name}={getattr(self, f.name)!r}' for f in fields(self) if f.name not in _OPERATIONAL
        )
        return ';'.join(parts)
