"""What reading a file produces: a converted document, a fitted image or audio clip, or a reason it failed."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Truncation:
    """How much of something was shown, e.g. `Truncation('rows', 30, 10_000)`.

    `unit` is one of lines, rows, columns, tokens, items, pages, chars.
    """

    unit: str
    shown: int
    total: int


@dataclass(frozen=True)
class ConvertedDocument:
    """A document converted to markdown and cut to fit."""

    kind: Literal['text']
    name: str | None
    media_type: str
    format: str
    size_bytes: int
    text: str
    """The markdown the model sees, already truncated."""
    full_text_tokens: int | None
    """Tokens of the markdown before the final token cut."""
    shown_tokens: int
    truncations: tuple[Truncation, ...]
    pages: int | None
    note: str | None
    manifest: str
    """One line describing the file and what of it is shown."""

    def to_json(self) -> str:
        """Serialize, so callers can cache conversions as text."""
        return file_result_to_json(self)

    @classmethod
    def from_json(cls, s: str) -> ConvertedDocument:
        result = file_result_from_json(s)
        if not isinstance(result, cls):
            raise ValueError(f'{result.kind} is not a converted document')
        return result


@dataclass(frozen=True)
class FittedImage:
    """An image in a format providers accept, within the byte and dimension limits."""

    kind: Literal['image']
    name: str | None
    original_media_type: str
    media_type: str
    data: bytes
    width: int
    height: int
    original_width: int
    original_height: int
    original_size_bytes: int
    changes: tuple[str, ...]
    """What was done, e.g. 'EXIF orientation applied', 'resized 2048x12288 -> 1333x8000'; () if unchanged."""
    manifest: str


@dataclass(frozen=True)
class FittedAudio:
    """An audio clip, cut to the limits when it is a WAV."""

    kind: Literal['audio']
    name: str | None
    media_type: str
    data: bytes
    duration_seconds: float | None
    sample_rate: int | None
    channels: int | None
    original_size_bytes: int
    truncated: bool
    manifest: str


@dataclass(frozen=True)
class UnreadableFile:
    """A file that could not be converted, with a reason the model and the user can read."""

    kind: Literal['unreadable']
    name: str | None
    media_type: str
    size_bytes: int
    reason: str
    manifest: str


FileResult = ConvertedDocument | FittedImage | FittedAudio | UnreadableFile


_RESULT_KINDS: dict[str, type[Any]] = {
    'text': ConvertedDocument,
    'image': FittedImage,
    'audio': FittedAudio,
    'unreadable': UnreadableFile,
}


def file_result_to_json(result: FileResult) -> str:
    """Serialize any `FileResult` as JSON text (bytes as base64), e.g. to cross a durable boundary."""
    data = asdict(result)
    if isinstance(data.get('data'), bytes):
        data['data'] = base64.b64encode(data['data']).decode()
    return json.dumps(data, ensure_ascii=False)


def file_result_from_json(text: str) -> FileResult:
    """The `FileResult` that `file_result_to_json` serialized."""
    data: dict[str, Any] = json.loads(text)
    if 'data' in data:
        data['data'] = base64.b64decode(data['data'])
    if 'changes' in data:
        data['changes'] = tuple(data['changes'])
    if 'truncations' in data:
        data['truncations'] = tuple(Truncation(**t) for t in data['truncations'])
    result: FileResult = _RESULT_KINDS[data['kind']](**data)
    return result
