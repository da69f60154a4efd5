"""`TokenCounter`: counts of every part type, media pricing, provider-usage anchoring, memoized."""

from __future__ import annotations

import codecs
import dataclasses
import io
import itertools
import logging
import math
import operator
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai import messages as _messages
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition

from .._compat import (
    CACHE_POINTS,
    COMPACTION_PART,
    FILE_PART,
    INSTRUCTION_DELTA_PART,
    NATIVE_TOOL_CALL_PARTS,
    NATIVE_TOOL_RETURN_PARTS,
    RETRY_FEEDBACK_PART,
    SPEECH_PART,
    TOOL_AVAILABILITY_DELTA_PART,
    decode_data_url,
    is_compaction_response,
    is_media,
    media_type_of,
    tool_availability_text,
)
from ..messages._nesting import json_text
from ._encodings import load_encoding
from ._estimate import estimate_tokens_offline
from ._model_name import parse_model_name
from ._running_counts import CountsView, IdentityMemo, RunningCounts

logger = logging.getLogger('pydantic_ai_history.tokens')

ImageFormula = Literal['openai', 'anthropic', 'gemini']


@dataclass(frozen=True)
class TokenizerProfile:
    """How one provider family is counted: a message costs
    `ceil(correction * (message_overhead * wire messages + its parts))`. The constants follow OpenAI's chat
    format, checked by `benchmarks/calibrate_tokens.py`; `correction` scales tiktoken's count for providers
    whose tokenizer is not public, and errs on the side of over-counting.
    """

    name: str
    """The family's name, as events and logs report it (`openai`, `anthropic`, `google`, `other`)."""
    encoding: str = 'cl100k_base'
    """The tiktoken encoding that counts the text."""
    correction: float = 1.0
    """What tiktoken's count is multiplied by (over 1 for families whose tokenizer is not public)."""
    image_formula: ImageFormula = 'openai'
    """How an image's pixels become tokens (`image_tokens`)."""
    message_overhead: int = 4
    """Tokens per wire message for the role markers: `<|im_start|>role<|im_sep|>...<|im_end|>` is 4 on
    gpt-4o/4.1; the o-series and gpt-5 format costs 3 (both checked on real provider counts)."""
    tool_call_overhead: int = 2
    """Tokens per tool call or return beyond its name, arguments or content and the message framing (the
    call id); calibrated: a call with its return costs 3 tokens more on gpt-4o."""
    reply_overhead: int = 3
    """Tokens every request adds to prime the reply (OpenAI: `<|start|>assistant<|message|>`)."""
    tool_definition_overhead: int = 0
    """Tokens per tool definition beyond its name, description and JSON schema (calibrated: the JSON schema
    already costs about what OpenAI's rendering of it does)."""
    tools_overhead: int = 5
    """Tokens, in the provider's own units (not corrected), a request with any tool definitions adds once
    for the tools preamble (OpenAI, calibrated; Anthropic documents 346 for its tool use system prompt)."""
    pdf_tokens_per_page: int = 1_500
    """What a page of a PDF sent as a file costs."""
    audio_tokens_per_second: int = 32
    """What a second of audio costs."""
    video_tokens_per_second: int = 263
    """What a second of video costs."""


OPENAI = TokenizerProfile('openai', encoding='o200k_base', image_formula='openai')
OPENAI_REASONING = TokenizerProfile('openai-reasoning', encoding='o200k_base', message_overhead=3)
OPENAI_LEGACY = TokenizerProfile('openai-legacy', encoding='cl100k_base', image_formula='openai')
ANTHROPIC = TokenizerProfile(
    'anthropic', encoding='cl100k_base', correction=1.2, image_formula='anthropic', tools_overhead=346
)
GOOGLE = TokenizerProfile('google', encoding='o200k_base', correction=1.1, image_formula='gemini')
OTHER = TokenizerProfile('other', encoding='cl100k_base', correction=1.15, image_formula='openai')

_LEGACY_OPENAI = re.compile(r'^(gpt-4(?!o|\.)|gpt-3\.5|text-|davinci|babbage)')
_REASONING_OPENAI = re.compile(r'^(o\d|gpt-5|gpt-oss|codex)')


def profile_for_model(model_name: str | None) -> TokenizerProfile:
    """The tokenizer profile for a model name such as `openai:gpt-4o` or `claude-sonnet-4-5`, chosen by the
    model's family, not by who serves it (Claude on Bedrock is counted as Anthropic's). Other families and
    unknown models get the generic `other` profile, whose correction errs high.
    """
    if not model_name:
        return OTHER
    parsed = parse_model_name(model_name)
    if parsed.family != 'openai':
        return {'anthropic': ANTHROPIC, 'google': GOOGLE}.get(parsed.family or '', OTHER)
    if _LEGACY_OPENAI.match(parsed.ref):
        return OPENAI_LEGACY
    return OPENAI_REASONING if _REASONING_OPENAI.match(parsed.ref) else OPENAI


def image_tokens(width: int, height: int, formula: ImageFormula) -> int:
    """Tokens an image of `width` x `height` pixels costs.

    - openai: fit in 2048x2048, scale the short side to 768, then 85 + 170 per 512-px tile (gpt-4o, high
      detail).
    - anthropic: fit the long edge in 1568 px, then w*h/750.
    - gemini: 258 when both sides <= 384, else 258 per 768x768 tile.
    """
    if width <= 0 or height <= 0:
        return 0
    if formula == 'anthropic':
        scale = min(1.0, 1568 / max(width, height))
        return math.ceil((width * scale) * (height * scale) / 750)
    if formula == 'gemini':
        if width <= 384 and height <= 384:
            return 258
        return 258 * math.ceil(width / 768) * math.ceil(height / 768)
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    return 85 + 170 * math.ceil(w * scale / 512) * math.ceil(h * scale / 512)


_DEFAULT_IMAGE_SIDE = 1024
"""Assumed size of an image whose pixels we cannot see (a remote URL): a typical 1024x1024 upload."""
_SVG = 'image/svg+xml'
_TEXT_MEDIA = frozenset({'application/json', 'application/xml', 'application/x-yaml', _SVG})


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from an image header, without decoding pixels (a decompression bomb is harmless);
    None when Pillow cannot read or refuses the header."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            return int(width), int(height)
    except Exception:
        return None


_PDF_PAGE = re.compile(rb'/Type\s*/Page(?!s)')
_SCAN_BYTES = 4 * 1024 * 1024
"""Large files are scanned this much at a time: `re` holds the GIL for a whole call (a 200 MB scan in a worker
thread would stall the event loop), a piece for a few milliseconds."""


def _pdf_pages(data: bytes) -> int:
    """Page objects counted in the bytes, a piece at a time (a match across two pieces counts once)."""
    pages = 0
    for start in range(0, len(data), _SCAN_BYTES):
        end = min(start + _SCAN_BYTES + 64, len(data))
        pages += sum(1 for m in _PDF_PAGE.finditer(data, start, end) if m.start() < start + _SCAN_BYTES)
    return max(1, pages)


_MIN_AUDIO_BYTE_RATE = 1_000
"""Bytes per second of the leanest audio taken seriously (8-bit mono at 1 kHz): the most seconds any
`n` bytes of audio can hold is `n / 1000`, whatever a header claims."""


def _wav_seconds(data: bytes) -> float | None:
    """Duration of a PCM WAV from the bytes actually present: the header's byte rate is ignored (a lying
    one turned 16 KB into 4.5 hours), its sample format taken only within sane ranges."""
    if len(data) < 44 or data[:4] != b'RIFF' or data[8:12] != b'WAVE':
        return None
    try:
        channels, rate = struct.unpack('<HI', data[22:28])
        (bits,) = struct.unpack('<H', data[34:36])
    except struct.error:
        return None
    byte_rate: int = rate * channels * bits // 8
    if not (1 <= channels <= 64 and 8 <= bits <= 64 and 1_000 <= rate <= 768_000):
        return None
    return float((len(data) - 44) / max(byte_rate, _MIN_AUDIO_BYTE_RATE))


_EXACT_TEXT_BYTES = 256 * 1024
"""Text attachments up to this size are tokenized whole; larger ones from three samples."""
_TEXT_SAMPLE_BYTES = 32 * 1024


def _text_samples(data: bytes) -> tuple[str, int]:
    """Head, middle and tail samples of a large text attachment, and how many bytes they stand for."""
    middle = len(data) // 2 - _TEXT_SAMPLE_BYTES // 2
    parts = (
        data[:_TEXT_SAMPLE_BYTES],
        data[middle : middle + _TEXT_SAMPLE_BYTES],
        data[-_TEXT_SAMPLE_BYTES:],
    )
    return '\n'.join(p.decode('utf-8', errors='replace') for p in parts), sum(len(p) for p in parts)


@dataclass(frozen=True)
class TokenEstimate:
    """The size of a history, two ways: `total` anchors on the provider's `usage.input_tokens` for a prefix
    verifiably sent, plus counts of newer messages; it is never below `tokenizer`, the corrected tokenizer
    count alone."""

    total: int
    tokenizer: int
    per_message: Sequence[int]
    """Each message's count (corrected), in order: a read-only sequence (slices are tuples)."""
    anchor_index: int | None = None
    anchor_input_tokens: int | None = None
    anchor_verified: bool = False
    overhead: int = 0
    """Tokens the provider counts beyond the messages (instructions, tools, reply priming): learned from
    verified usage, else the documented default (see `TokenCounter.estimate`)."""
    bounded: bool = False
    """True when nothing was counted: `total` is `TokenCounter.upper_bound` (UTF-8 bytes for tokens), which
    proved the history far below its limit; `per_message` are bounds too."""


_HASHED_CHARS = 1 << 22
"""Texts longer than this (4M characters) are memoized by identity, not by content."""
_LARGE_MEMO = 4
"""Very large texts whose counts a counter keeps (the newest first)."""

_BYTE_BOUND_ENCODINGS = frozenset({'o200k_base', 'cl100k_base'})
"""Encodings that never make more tokens than a text has UTF-8 bytes (byte-level BPE: a token is at least
one byte): for them a byte length is an upper bound of the count."""


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode('utf-8', 'surrogatepass'))


_TOOL_MEMO_SIZE = 1_024
"""Tool definitions whose counts a counter keeps (oldest forgotten first)."""
_COUNTED_TOOL_FIELDS = operator.attrgetter('name', 'description', 'parameters_json_schema')
"""What a request's tool definition costs is counted from (read in C for a whole tool list)."""
_IMAGE_MEMO_SIZE = 4_096
"""Image dimensions a counter keeps, by size and hash of the data (oldest forgotten first)."""


@dataclass
class TokenCounter:
    """Counts tokens of PydanticAI messages for one model family.

    Args:
        model_name: picks the `TokenizerProfile` (encoding, correction, image formula).
        profile: overrides the profile outright.
        correction: overrides only the profile's correction factor.
    """

    model_name: str | None = None
    profile: TokenizerProfile | None = None
    correction: float | None = None
    max_memo_chars: int = 64_000_000
    _encode: Callable[[str], int] | None = field(default=None, init=False, repr=False)
    _encoding: Any = field(default=None, init=False, repr=False)
    _text_memo: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _text_memo_chars: int = field(default=0, init=False, repr=False)
    _large_memo: list[tuple[str, int]] = field(default_factory=list, init=False, repr=False)
    _message_memo: IdentityMemo[int] = field(default_factory=IdentityMemo, init=False, repr=False)
    _image_memo: dict[tuple[int, int], tuple[int, int] | None] = field(
        default_factory=dict, init=False, repr=False
    )
    _running: RunningCounts = field(default_factory=RunningCounts, init=False, repr=False)
    _overhead: int | None = field(default=None, init=False, repr=False)
    _last_tools: tuple[tuple[tuple[str, str | None, Any], ...], int] = field(
        default=((), 0), init=False, repr=False
    )
    _tool_memo: dict[tuple[str, str], tuple[Any, int]] = field(default_factory=dict, init=False, repr=False)
    _bytes: TokenCounter | None = field(default=None, init=False, repr=False)
    """The same counting with UTF-8 byte lengths for tokens (`upper_bound`), made on first use."""

    def __post_init__(self) -> None:
        base = self.profile or profile_for_model(self.model_name)
        self.profile = (
            base if self.correction is None else dataclasses.replace(base, correction=self.correction)
        )

    @property
    def tokenizer_profile(self) -> TokenizerProfile:
        assert self.profile is not None
        return self.profile

    @property
    def offline(self) -> bool:
        """True when tiktoken could not load its encoding and counts are estimates."""
        self._encoder()
        return self._encoding is None

    @property
    def loaded(self) -> bool:
        """Whether the tokenizer is loaded (building it takes some hundred milliseconds, once per process)."""
        return self._encode is not None

    def load(self) -> None:
        """Load the tokenizer now (callers on an event loop do it in a thread: see `HistoryContext`)."""
        self._encoder()

    # ---- text -----------------------------------------------------------------------------------------

    def _encoder(self) -> Callable[[str], int]:
        if self._encode is None:
            try:
                encoding = load_encoding(self.tokenizer_profile.encoding)
                self._encoding = encoding
                self._encode = lambda text: _count_in_pieces(encoding, text)
            except Exception as exc:  # not packaged, not cached, no network, or tiktoken broken: estimate
                _warn_offline_once(self.tokenizer_profile.encoding, exc)
                self._encode = estimate_tokens_offline
        return self._encode

    def count_text(self, text: str) -> int:
        """Raw tokenizer count of a string (no correction, no overhead), memoized by content."""
        if not text:
            return 0
        if not self.max_memo_chars:  # the byte-length bound: cheaper than any memo
            return self._encoder()(text)
        if len(text) > _HASHED_CHARS:
            return self._count_large(text)
        cached = self._text_memo.get(text)
        if cached is not None:
            return cached
        count = self._encoder()(text)
        if self._text_memo_chars + len(text) > self.max_memo_chars:
            self._text_memo.clear()
            self._text_memo_chars = 0
        self._text_memo[text] = count
        self._text_memo_chars += len(text)
        return count

    def _count_large(self, text: str) -> int:
        """A very large text, memoized by identity: hashing 200 MB for a dict lookup holds the GIL for a
        quarter of a second (and the same object is what the stages count again)."""
        for entry in self._large_memo:
            if entry[0] is text:
                return entry[1]
        count = self._encoder()(text)
        self._large_memo = [(text, count), *self._large_memo[: _LARGE_MEMO - 1]]
        return count

    def truncate_text(self, text: str, max_tokens: int, *, head_fraction: float = 0.7) -> str:
        """Cut `text` to at most `max_tokens` (corrected), keeping head and tail around an omission marker.
        Cut on token boundaries, so dense text at one end (CJK, code) cannot push the result over the cap."""
        total = self.count_text(text)
        limit = int(max_tokens / self.tokenizer_profile.correction)
        if total <= limit:
            return text
        marker = f'\n[... about {total - limit:,} tokens omitted ...]\n'
        keep = max(limit - self.count_text(marker) - 2, 0)  # 2: merges across the two seams
        self._encoder()
        encoding = self._encoding
        if encoding is not None:
            ids = encoding.encode_ordinary(text)
            head_ids = int(keep * head_fraction)
            tail_ids = keep - head_ids
            head = encoding.decode(ids[:head_ids], errors='ignore')
            tail = encoding.decode(ids[len(ids) - tail_ids :], errors='ignore') if tail_ids else ''
            return f'{head}{marker}{tail}'
        chars = int(keep * len(text) / max(total, 1))
        while True:
            head_chars = int(chars * head_fraction)
            tail_chars = chars - head_chars
            result = text[:head_chars] + marker + (text[len(text) - tail_chars :] if tail_chars else '')
            if self.count_text(result) <= limit or chars == 0:
                return result
            chars = int(chars * 0.9)

    def split_text(self, text: str, max_tokens: int, *, first_max_tokens: int | None = None) -> list[str]:
        """`text` in consecutive pieces of at most `max_tokens` (corrected) each, nothing left out; the first
        piece at most `first_max_tokens` when given (the room left where it goes)."""
        correction = self.tokenizer_profile.correction
        limit = max(int(max_tokens / correction) - 2, 1)  # 2: merges at the seams
        first = (
            limit if first_max_tokens is None else min(max(int(first_max_tokens / correction) - 2, 1), limit)
        )
        if self.count_text(text) <= first:
            return [text]
        self._encoder()
        encoding = self._encoding
        if encoding is not None:
            return _split_on_tokens(encoding, text, first, limit)
        # offline: the whole text's density sizes each piece (counting every remainder again would estimate,
        # and memoize, text of quadratic total length)
        chars_per_token = len(text) / max(self.count_text(text), 1)
        pieces: list[str] = []
        rest, room = text, first
        while rest:
            chars = max(int(room * chars_per_token), 1)
            while chars > 1 and self.count_text(rest[:chars]) > room:
                chars = int(chars * 0.9)
            pieces.append(rest[:chars])
            rest, room = rest[chars:], limit
        return pieces

    # ---- parts and messages ---------------------------------------------------------------------------

    def count_message(self, message: ModelMessage) -> int:
        """Tokens one message costs as input (corrected), memoized by identity. Framing is `message_overhead`
        per wire message: one per response, one per sent part of a request (OpenAI Chat sends each apart)."""
        memoized = self._message_memo.get(message)
        if memoized is not None:
            return memoized
        profile = self.tokenizer_profile
        raw = 0
        framed = 0
        for part in message.parts:
            raw += self._count_part(part)
            framed += isinstance(part, _SENT_REQUEST_PARTS)
        if isinstance(message, ModelResponse):
            framed = 1
        raw += profile.message_overhead * framed
        count = math.ceil(raw * profile.correction)
        if isinstance(message, ModelResponse) and is_compaction_response(message):
            # an opaque (encrypted) compaction item has no text to count: its size is the provider's output
            count = max(count, message.usage.output_tokens)
        self._message_memo.set(message, count)
        return count

    def counted(self, message: ModelMessage) -> bool:
        """Whether `message` (this object) was counted already."""
        return self._message_memo.get(message) is not None

    def bound_messages(self, messages: Iterable[ModelMessage]) -> None:
        """Count each message by bytes as `upper_bound` does (memoized), so that a bound made later costs
        lookups (nothing for an encoding without that bound)."""
        counts = self._byte_counter()
        if counts is not None:
            for message in messages:
                counts.count_message(message)

    def bound_counted(self, message: ModelMessage) -> bool:
        """Whether `message` was counted by bytes already (or no byte bound exists: nothing to count)."""
        counts = self._byte_counter()
        return counts is None or counts.counted(message)

    def count_messages(self, messages: Iterable[ModelMessage]) -> int:
        """Tokenizer count of a history (corrected), without anchoring."""
        return sum(self.count_message(m) for m in messages)

    def count_part(self, part: Any) -> int:
        """Tokens of one part (corrected), without the message overhead."""
        return math.ceil(self._count_part(part) * self.tokenizer_profile.correction)

    def _count_part(self, part: Any) -> int:
        profile = self.tokenizer_profile
        if isinstance(part, (SystemPromptPart, TextPart, ThinkingPart)):
            return self.count_text(part.content)
        if isinstance(part, UserPromptPart):
            return self._count_content(part.content)
        if isinstance(part, ToolCallPart) or isinstance(part, NATIVE_TOOL_CALL_PARTS):  # noqa: SIM101
            return profile.tool_call_overhead + self.count_text(part.tool_name) + self._count_args(part.args)
        if isinstance(part, ToolReturnPart) or isinstance(part, NATIVE_TOOL_RETURN_PARTS):  # noqa: SIM101
            return (
                profile.tool_call_overhead
                + self.count_text(part.tool_name)
                + self._count_return(part.content)
            )
        if isinstance(part, RetryPromptPart) or (
            RETRY_FEEDBACK_PART and isinstance(part, RETRY_FEEDBACK_PART)
        ):
            return profile.tool_call_overhead + self.count_text(part.model_response())
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            return self.count_text(part.content or '')
        if FILE_PART is not None and isinstance(part, FILE_PART):
            return self._count_media(part.content)
        announced = tool_availability_text(part)
        if announced is not None:  # sent as a system-voice announcement naming the tools
            return self.count_text(announced)
        # Other framework bookkeeping parts (capability loads, settings deltas) are not sent as text.
        content = getattr(part, 'content', None)
        return self.count_text(content) if isinstance(content, str) else 0

    def _count_args(self, args: Any) -> int:
        if args is None:
            return 0
        return self.count_text(args if isinstance(args, str) else json_text(args))

    def _count_return(self, content: Any) -> int:
        # A tool return without files goes on the wire as one JSON document (strings quoted); only one with
        # files is split into text, JSON and media.
        if isinstance(content, (list, tuple)) and not any(is_media(item) for item in content):
            return self.count_text(json_text(content))
        return self._count_content(content)

    def _count_content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        if is_media(content):
            return self._count_media(content)
        if isinstance(content, (list, tuple)):
            total = 0
            plain: list[Any] = []
            for item in content:
                if isinstance(item, str):
                    total += self.count_text(item)
                elif is_media(item):
                    total += self._count_media(item)
                elif isinstance(item, CACHE_POINTS):
                    continue
                else:
                    plain.append(item)
            if plain:
                total += self.count_text(json_text(plain))
            return total
        return self.count_text(json_text(content))

    def _count_media(self, item: Any) -> int:
        """Images by pixels, PDFs by pages, audio/video by duration, text by its text. Bounded whatever the
        size: large text is counted from samples, audio durations from the bytes present."""
        profile = self.tokenizer_profile
        media_type = media_type_of(item)
        data = item.data if isinstance(item, BinaryContent) else None
        if data is None and (decoded := decode_data_url(getattr(item, 'url', '') or '')) is not None:
            data = decoded[0]
        kind = media_type.split('/', 1)[0]
        if media_type != _SVG and (kind == 'image' or isinstance(item, _messages.ImageUrl)):
            size = self._image_dimensions(data) if data is not None else None
            width, height = size or (_DEFAULT_IMAGE_SIDE, _DEFAULT_IMAGE_SIDE)
            return image_tokens(width, height, profile.image_formula)
        if data is None:
            return 1_000  # a remote document we will not fetch: a documented flat guess
        if media_type == 'application/pdf':
            return profile.pdf_tokens_per_page * _pdf_pages(data)
        if kind == 'audio':
            seconds = _wav_seconds(data) or len(data) / 16_000
            return math.ceil(seconds * profile.audio_tokens_per_second)
        if kind == 'video':
            return math.ceil(len(data) / 250_000 * profile.video_tokens_per_second)
        if kind == 'text' or media_type in _TEXT_MEDIA:
            return self._count_text_bytes(data)
        return math.ceil(len(data) / 4)

    def _count_text_bytes(self, data: bytes) -> int:
        if len(data) <= _EXACT_TEXT_BYTES:
            return self.count_text(data.decode('utf-8', errors='replace'))
        sample, sample_bytes = _text_samples(data)
        return math.ceil(self._encoder()(sample) * len(data) / sample_bytes)

    def _image_dimensions(self, data: bytes) -> tuple[int, int] | None:
        key = (len(data), hash(data))
        if key not in self._image_memo:
            if len(self._image_memo) >= _IMAGE_MEMO_SIZE:
                self._image_memo.pop(next(iter(self._image_memo)))
            self._image_memo[key] = image_size(data)
        return self._image_memo[key]

    def count_tool_definitions(self, tools: Iterable[ToolDefinition]) -> int:
        """Tokens a request's `ToolDefinition`s cost (corrected): each its name, description and schema plus
        `tool_definition_overhead`, and `tools_overhead` once; the previous call's list is not counted
        again."""
        # pydantic-ai builds new definitions at every step around the same names, descriptions and schemas:
        # what is counted of them is read and compared with the previous call's in C, not tool by tool
        counted = tuple(map(_COUNTED_TOOL_FIELDS, tools))
        if not counted:  # a request's tool list, then a prediction without tools: the list stays remembered
            return 0
        previous, count = self._last_tools
        if counted == previous:
            return count
        profile = self.tokenizer_profile
        tools_raw = sum(itertools.starmap(self._count_tool, counted))
        raw = profile.tool_definition_overhead * len(counted) + tools_raw
        count = math.ceil(raw * profile.correction) + profile.tools_overhead
        self._last_tools = (counted, count)
        return count

    def _count_tool(self, name: str, description: str | None, schema: Any) -> int:
        """A tool's name, description and schema, kept per name and description while the schema is equal."""
        description = description or ''
        known = self._tool_memo.get((name, description))
        if known is not None and (known[0] is schema or known[0] == schema):
            return known[1]
        count = self.count_text(name) + self.count_text(description)
        if schema:
            count += self.count_text(json_text(schema))
        if len(self._tool_memo) >= _TOOL_MEMO_SIZE:
            self._tool_memo.pop(next(iter(self._tool_memo)))
        self._tool_memo[(name, description)] = (schema, count)
        return count

    # ---- anchoring --------------------------------------------------------------------------------------

    def mark_sent(
        self, messages: Sequence[ModelMessage], *, tool_definitions: Iterable[ToolDefinition] | None = None
    ) -> None:
        """Remember that exactly these messages (and `tool_definitions`) went to the model, so a later usage
        figure can be trusted; tools added later are counted on top of it."""
        if messages:
            tools = self.count_tool_definitions(tool_definitions) if tool_definitions is not None else None
            self._running.mark_sent(messages, self.count_message, tools)

    def release(self, keep: int = 0) -> None:
        """Runs have ended: hold weakly the histories of all but the `keep` most recently counted
        conversations (the runs still going on), so a conversation the app let go of is not kept alive by its
        counts, and forget the counts of freed messages. A history continued later is counted afresh only
        where its messages were freed (a reloaded copy)."""
        self._running.park(keep)
        self._message_memo.collect()
        if self._bytes is not None:
            self._bytes.release(keep)

    def estimate(
        self, messages: Sequence[ModelMessage], *, tool_definitions: Iterable[ToolDefinition] = ()
    ) -> TokenEstimate:
        """The anchored and tokenizer-only size of a history.

        The newest response's `usage.input_tokens` stands for its prefix only when `mark_sent` saw that prefix
        go out: a reloaded uncompacted history would otherwise be measured by a compacted request's usage.
        Otherwise: the tokenizer count plus the overhead learned from verified usage, or the documented one
        before any was learned. A history extending one already seen costs only its new messages.
        """
        # What this request's own instructions and tools cost is a floor: the overhead learned from usage is
        # the counter's (shared by every run on this model), and another agent's requests may have had fewer.
        default = self._default_overhead(messages, tool_definitions)
        overhead = default if self._overhead is None else max(self._overhead, default)
        if not messages:
            return TokenEstimate(overhead, 0, (), overhead=overhead)
        length = len(messages)
        branch = self._running.sync(messages, self.count_message)
        per_message = CountsView(branch.counts, length)
        tokenizer = branch.cumulative[length]
        anchor_index = branch.newest_usage(length)
        if anchor_index is None:
            return TokenEstimate(tokenizer + overhead, tokenizer, per_message, overhead=overhead)
        response = messages[anchor_index]
        assert isinstance(response, ModelResponse)
        input_tokens = response.usage.input_tokens
        if anchor_index not in branch.sent:
            total = tokenizer + overhead
            return TokenEstimate(total, tokenizer, per_message, anchor_index, input_tokens, overhead=overhead)
        prefix_tokens = branch.cumulative[anchor_index]
        self._overhead = overhead = max(input_tokens - prefix_tokens, 0)
        # tools offered since that request (e.g. the read-back tool) are not in its usage figure
        sent_tools = branch.sent[anchor_index]
        added = (
            0 if sent_tools is None else max(self.count_tool_definitions(tool_definitions) - sent_tools, 0)
        )
        total = max(input_tokens, prefix_tokens) + tokenizer - prefix_tokens + added
        return TokenEstimate(
            total, tokenizer, per_message, anchor_index, input_tokens, anchor_verified=True, overhead=overhead
        )

    def part_bound(self, part: Any) -> int | None:
        """`count_part(part)` at most, without the tokenizer (as `upper_bound`); None when no proof."""
        bytes_counter = self._byte_counter()
        return None if bytes_counter is None else bytes_counter.count_part(part)

    def _byte_counter(self) -> TokenCounter | None:
        if self._bytes is not None:  # asked several times per request
            return self._bytes
        profile = self.tokenizer_profile
        if profile.encoding not in _BYTE_BOUND_ENCODINGS:
            return None
        self._bytes = TokenCounter(self.model_name, profile=profile, max_memo_chars=0)
        self._bytes._encode = _utf8_length
        return self._bytes

    def upper_bound(
        self, messages: Sequence[ModelMessage], *, tool_definitions: Iterable[ToolDefinition] = ()
    ) -> TokenEstimate | None:
        """An estimate whose `total` is never below `estimate(...).total`, made without the tokenizer: every
        text's UTF-8 byte length stands for its count (o200k and cl100k never make more tokens than bytes),
        times the profile's correction, with the same framing, media pricing (images by pixels) and
        overheads; a verified usage figure it may anchor on is bounded too. None for an encoding without
        that proof. Costs what is new, like `estimate`."""
        counts = self._byte_counter()
        if counts is None:
            return None
        tools = tuple(tool_definitions)
        overhead = counts._default_overhead(messages, tools) + (self._overhead or 0)
        if not messages:
            return TokenEstimate(overhead, 0, (), overhead=overhead, bounded=True)
        length = len(messages)
        branch = counts._running.sync(messages, counts.count_message)
        tokenizer = branch.cumulative[length]
        total = tokenizer + overhead
        anchor = branch.newest_usage(length)
        if anchor is not None:  # an anchored total is at most its usage figure plus what came after it
            response = messages[anchor]
            assert isinstance(response, ModelResponse)
            after = tokenizer - branch.cumulative[anchor + 1]
            total = max(total, response.usage.input_tokens + after + overhead)
        per_message = CountsView(branch.counts, length)
        return TokenEstimate(total, tokenizer, per_message, overhead=overhead, bounded=True)

    def _default_overhead(
        self, messages: Sequence[ModelMessage], tool_definitions: Iterable[ToolDefinition]
    ) -> int:
        profile = self.tokenizer_profile
        raw = profile.reply_overhead
        last = messages[-1] if messages else None
        instructions = last.instructions if isinstance(last, ModelRequest) else None
        if isinstance(instructions, str) and instructions:
            raw += profile.message_overhead + self.count_text(instructions)
        return math.ceil(raw * profile.correction) + self.count_tool_definitions(tool_definitions)


_SENT_REQUEST_PARTS: tuple[type[Any], ...] = tuple(
    t
    for t in (
        SystemPromptPart,
        UserPromptPart,
        ToolReturnPart,
        RetryPromptPart,
        RETRY_FEEDBACK_PART,
        COMPACTION_PART,
        INSTRUCTION_DELTA_PART,
        TOOL_AVAILABILITY_DELTA_PART,
        SPEECH_PART,
    )
    if t is not None
)
"""Request parts a provider receives as a message of their own; bookkeeping parts are not among them."""


_offline_warned: set[str] = set()


def _warn_offline_once(encoding: str, exc: Exception) -> None:
    if encoding in _offline_warned:
        return
    _offline_warned.add(encoding)
    logger.warning(
        'tiktoken encoding %r could not be loaded (%s); counting with an offline estimate that errs high. '
        'The package ships o200k_base and cl100k_base; for another encoding, set TIKTOKEN_CACHE_DIR to a '
        'folder holding its file to count exactly.',
        encoding,
        exc,
    )


_PIECE_CHARS = 1 << 18
"""Texts longer than this are counted a piece at a time, cut after a line break, so a 20 MB text's token list
(some 40 bytes per token) is never held at once; a count differs by at most one per piece."""


def _count_in_pieces(encoding: Any, text: str) -> int:
    size = len(text)
    if size <= _PIECE_CHARS:
        return len(encoding.encode_ordinary(text))
    total = 0
    start = 0
    while start < size:
        end = min(start + _PIECE_CHARS, size)
        if end < size:
            newline = text.rfind('\n', start + _PIECE_CHARS // 2, end)
            end = newline + 1 if newline >= 0 else end
        total += len(encoding.encode_ordinary(text[start:end]))
        start = end
    return total


def _split_on_tokens(encoding: Any, text: str, first: int, limit: int) -> list[str]:
    """`text` in pieces of `first`, then `limit` tokens; a character whose bytes two pieces would share goes
    to the later one."""
    ids = encoding.encode_ordinary(text)
    bounds = [0, *range(first, len(ids), limit), len(ids)]
    decoder = codecs.getincrementaldecoder('utf-8')(errors='replace')  # holds a cut character's first bytes
    pieces = [
        decoder.decode(encoding.decode_bytes(ids[start:end])) for start, end in itertools.pairwise(bounds)
    ]
    pieces.append(decoder.decode(b'', final=True))
    return [piece for piece in pieces if piece]
