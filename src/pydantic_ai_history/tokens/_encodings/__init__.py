"""tiktoken encodings without the network: OpenAI's official `o200k_base` and `cl100k_base` files ship here.

The files are byte-for-byte tiktoken's downloads (their sha256 is re-checked on every load). On the first
count each is registered as a constructor in tiktoken's own registry, so tiktoken builds it once and an app
calling `tiktoken.get_encoding` gets the same object, with no download (a `tiktoken_ext` plugin cannot:
tiktoken refuses two plugins defining one name). A file that fails its hash falls back to tiktoken's own
constructor, with a warning. `load_tiktoken_bpe` is not used: it copies what it reads into its cache
directory (and raises when that is read-only).
"""

from __future__ import annotations

import binascii
import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

__all__ = (
    'PACKAGED',
    'EncodingFile',
    'EncodingUnavailableError',
    'PackagedConstructor',
    'load_encoding',
    'packaged_encoding',
    'parse_bpe',
    'register_with_tiktoken',
)

logger = logging.getLogger('pydantic_ai_history.tokens')

_ENDOFTEXT = '<|endoftext|>'
_ENDOFPROMPT = '<|endofprompt|>'


@dataclass(frozen=True, kw_only=True)
class EncodingFile:
    """One packaged encoding: its BPE file and the constructor arguments tiktoken gives it."""

    name: str
    """The tiktoken encoding name."""
    file: str
    """The BPE file's name in this package."""
    url: str
    """Where tiktoken downloads the same file."""
    sha256: str
    """tiktoken's `expected_hash` for the file."""
    pat_str: str
    """The pre-tokenization pattern (tiktoken's)."""
    special_tokens: dict[str, int]
    """The special tokens and their ranks (tiktoken's)."""


PACKAGED: dict[str, EncodingFile] = {
    'o200k_base': EncodingFile(
        name='o200k_base',
        file='o200k_base.tiktoken',
        url='https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken',
        sha256='446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d',
        pat_str='|'.join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    'cl100k_base': EncodingFile(
        name='cl100k_base',
        file='cl100k_base.tiktoken',
        url='https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken',
        sha256='223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7',
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        special_tokens={
            _ENDOFTEXT: 100257,
            '<|fim_prefix|>': 100258,
            '<|fim_middle|>': 100259,
            '<|fim_suffix|>': 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}
"""The encodings this package ships, by tiktoken name."""

_loaded: dict[str, tiktoken.Encoding | str] = {}
"""Each encoding obtained so far, or why it could not be (so a failure costs one attempt per process)."""
_lock = threading.Lock()

Constructor = Callable[[], dict[str, Any]]
"""What tiktoken's registry holds per encoding name: a function returning `tiktoken.Encoding`'s arguments."""


class EncodingUnavailableError(RuntimeError):
    """Neither the packaged file nor tiktoken could provide an encoding."""


def load_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding `name`, as `tiktoken.get_encoding` returns it: one object per process, shared
    with the app. Raises `EncodingUnavailableError` when no source has it; callers fall back to the offline
    estimate.
    """
    loaded = _loaded.get(name)
    if loaded is None:
        with _lock:  # two threads counting at once ask once (building an encoding takes about 0.35 s)
            loaded = _loaded.get(name)
            if loaded is None:
                loaded = _loaded[name] = _build(name)
    if isinstance(loaded, str):
        raise EncodingUnavailableError(loaded)
    return loaded


def _build(name: str) -> tiktoken.Encoding | str:
    try:
        import tiktoken

        if name in PACKAGED:
            register_with_tiktoken()
        return tiktoken.get_encoding(name)
    except EncodingUnavailableError as exc:  # from PackagedConstructor: both sources named
        return str(exc)
    except Exception as exc:
        return f'tiktoken: {type(exc).__name__}: {exc}'


def register_with_tiktoken() -> None:
    """Make tiktoken build the packaged encodings from the packaged files (idempotent); a damaged file falls
    back to the constructor replaced, and encodings tiktoken already built are left as they are."""
    from tiktoken import registry

    registry.list_encoding_names()  # tiktoken discovers its plugins' constructors once; ours go over them
    constructors = registry.ENCODING_CONSTRUCTORS
    if constructors is None:  # pragma: no cover - list_encoding_names() fills it or raises
        raise EncodingUnavailableError("tiktoken's registry has no constructors")
    for name, spec in PACKAGED.items():
        current = constructors.get(name)
        if name not in registry.ENCODINGS and not _is_packaged(current):
            constructors[name] = PackagedConstructor(spec=spec, replaced=current)


@dataclass(frozen=True, kw_only=True)
class PackagedConstructor:
    """tiktoken's constructor for a packaged encoding: the packaged file, else the constructor it replaced."""

    spec: EncodingFile
    """The packaged encoding."""
    replaced: Constructor | None
    """The constructor registered before (tiktoken's own, which downloads), for a damaged install."""

    def __call__(self) -> dict[str, Any]:
        try:
            return packaged_arguments(self.spec)
        except Exception as exc:  # a damaged install: tiktoken may still have the file cached
            if self.replaced is None:
                raise
            failure = exc
        try:
            arguments = self.replaced()
        except Exception as exc:
            raise EncodingUnavailableError(
                f'the packaged file: {failure}; tiktoken: {type(exc).__name__}: {exc}'
            ) from exc
        logger.warning('%s encoding loaded by tiktoken; the packaged file: %s', self.spec.name, failure)
        return arguments


def _is_packaged(constructor: object) -> bool:
    # By name, not identity: this module imported again (Temporal's workflow sandbox re-imports it) must
    # recognise the constructor an earlier import registered, instead of wrapping it once more.
    kind = type(constructor)
    return kind.__module__ == __name__ and kind.__qualname__ == PackagedConstructor.__qualname__


def packaged_arguments(spec: EncodingFile) -> dict[str, Any]:
    """`tiktoken.Encoding`'s arguments for `spec`, from the packaged file after checking its sha256."""
    data = resources.files(__name__).joinpath(spec.file).read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        raise ValueError(f'{spec.file} has sha256 {actual}, expected {spec.sha256}')
    return {
        'name': spec.name,
        'pat_str': spec.pat_str,
        'mergeable_ranks': parse_bpe(data),
        'special_tokens': dict(spec.special_tokens),
    }


def packaged_encoding(spec: EncodingFile) -> tiktoken.Encoding:
    """A new encoding built from `spec`'s packaged file, outside tiktoken's registry (for checks)."""
    import tiktoken

    return tiktoken.Encoding(**packaged_arguments(spec))


def parse_bpe(data: bytes) -> dict[bytes, int]:
    """The ranks of a `.tiktoken` file: one `base64-token rank` pair per line (tiktoken's format)."""
    fields = data.split()
    if len(fields) % 2:
        raise ValueError('a .tiktoken file has a token and a rank on every line')
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
