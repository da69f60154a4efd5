"""The one interface every document reader implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from ._results import Truncation
from ._settings import FileSettings


@dataclass(frozen=True)
class FileInfo:
    """What is known about the bytes being read."""

    media_type: str
    name: str | None
    extension: str | None
    """Lower-case, with the dot, e.g. '.csv'."""
    members: MemberReader
    """How a container (a ZIP archive) reads the files inside it."""


@dataclass(frozen=True)
class MemberReader:
    """The dispatcher's own sniffing and conversion, handed to container readers so that they read their
    members the way top-level files are read without importing the dispatcher (which imports them)."""

    sniff: Callable[[bytes, str | None, str | None], str]
    """The media type of bytes, given their name and declared type (`sniff_media_type`)."""
    convert: Callable[[bytes, str, str | None, FileSettings], Extraction | str]
    """A member's extraction, cut to `max_tokens`, or the reason it could not be read."""


@dataclass(frozen=True)
class Extraction:
    """A reader's output before the final token cut."""

    text: str
    truncations: tuple[Truncation, ...] = ()
    pages: int | None = None
    note: str | None = None
    format: str | None = None
    """Overrides the reader's format name when the content turned out to be something else."""


class ReaderError(Exception):
    """A reader's clear, user-facing reason why a file could not be read."""


class Reader(ABC):
    """Turns the bytes of one format into markdown, applying that format's own truncation."""

    format: str
    """Short name shown in manifests, e.g. 'PDF'."""
    media_types: tuple[str, ...]
    extensions: tuple[str, ...] = ()

    @abstractmethod
    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        """Convert `data`; raise `ReaderError` (or anything) when it cannot be read."""
