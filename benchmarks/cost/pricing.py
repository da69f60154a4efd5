"""How a provider with prompt caching bills a request: two cache models and one price list (pure functions).

A request is a sequence of `Block`s in the order providers build their prompt prefix: tool definitions,
instructions, then every message (a header block for its role markers, one block per part), then the reply
priming. Two blocks are the same when their `key` is (kind, exact text, tool call id): what a provider's
prefix cache compares.

**Automatic prefix caching** (OpenAI style): the cached part of a request is its longest common prefix with
the previous request, in tokens, counted as OpenAI reports `cached_tokens`: nothing below 1,024 tokens, then
in steps of 128 (`automatic_cached_tokens`). The rest is written to the cache for the next request.

**Breakpoint caching** (Anthropic style, breakpoints set by pydantic-ai's `Caching` capability): a request
writes a cache entry at each of its breakpoints (the end of the tool definitions, of the instructions, of the
last message, and at any `CachePoint`), if the prefix there is at least 1,024 tokens (Claude Sonnet's
minimum). It reads the longest prefix that ends where an earlier request wrote an entry, searched back from
each of its own breakpoints over at most 20 content blocks (Anthropic's lookback; a tool loop adds 2-4 per
step). It writes from there to its last breakpoint, billed at 1.25x input; what follows its last breakpoint
is plain input.

Every cache entry is assumed alive (each read refreshes Anthropic's 5-minute TTL; a tool loop re-reads it
every few seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

__all__ = (
    'ANTHROPIC_LOOKBACK_BLOCKS',
    'MIN_CACHEABLE_TOKENS',
    'OPENAI_CACHE_STEP',
    'Billed',
    'Block',
    'BreakpointCache',
    'CommonPrefix',
    'Prices',
    'automatic_billing',
    'automatic_cached_tokens',
    'common_prefix',
)

MIN_CACHEABLE_TOKENS = 1_024
"""Below this a prefix is not cached (OpenAI; Anthropic's Sonnet and Opus models)."""
OPENAI_CACHE_STEP = 128
"""OpenAI reports cache hits of 1,024 tokens and then in increments of 128."""
ANTHROPIC_LOOKBACK_BLOCKS = 20
"""How many content blocks back from a breakpoint Anthropic looks for an earlier cache entry."""


@dataclass(frozen=True)
class Block:
    """One piece of a request, in prompt order."""

    key: Hashable
    """What makes two blocks the same for a prefix cache: kind, exact text and tool call id."""
    tokens: int
    """What the block costs (its text and its framing tokens)."""
    text: str = ''
    """The text, for the token-level common prefix inside the first block that differs."""
    content: bool = True
    """A content block (a tool definition, the instructions, a message part): where a cache entry can end and
    what Anthropic's lookback counts. Message headers and the reply priming are not."""


@dataclass(frozen=True)
class CommonPrefix:
    """The longest common prefix of two requests."""

    tokens: int
    """In tokens, exact (inside the first differing block, the common prefix of the two texts' tokens)."""
    blocks: int
    """Whole blocks shared before the first difference."""


def common_prefix(
    previous: Sequence[Block], current: Sequence[Block], token_ids: Callable[[str], Sequence[int]]
) -> CommonPrefix:
    """The longest common prefix of `current` with `previous`: whole equal blocks, then, in the first block
    that differs, the common prefix of the two texts' token ids (framing tokens count as part of the block's
    end, so a changed block shares at most its text's common tokens)."""
    tokens = 0
    index = 0
    for before, now in zip(previous, current, strict=False):
        if before.key != now.key:
            break
        tokens += now.tokens
        index += 1
    else:
        return CommonPrefix(tokens, index)
    before, now = previous[index], current[index]
    if before.text and now.text and type(before.key) is type(now.key) and _kind(before.key) == _kind(now.key):
        a, b = token_ids(before.text), token_ids(now.text)
        shared = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            shared += 1
        tokens += shared
    return CommonPrefix(tokens, index)


def _kind(key: Hashable) -> Hashable:
    return key[0] if isinstance(key, tuple) and key else key


def automatic_cached_tokens(common_tokens: int) -> int:
    """The part of a request an automatic prefix cache serves: 0 below 1,024 tokens, then 1,024 + 128 k."""
    if common_tokens < MIN_CACHEABLE_TOKENS:
        return 0
    return (
        MIN_CACHEABLE_TOKENS + (common_tokens - MIN_CACHEABLE_TOKENS) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP
    )


@dataclass(frozen=True)
class Billed:
    """A request's input tokens by how they are billed (they add up to `input_tokens`)."""

    input_tokens: int
    cache_read: int
    cache_write: int
    uncached: int
    """Billed at the plain input price: after the last breakpoint, or a request with no cache at all."""

    def __post_init__(self) -> None:
        if self.cache_read + self.cache_write + self.uncached != self.input_tokens:
            raise ValueError(f'billed parts do not add up to the request: {self}')


def automatic_billing(total_tokens: int, common_tokens: int) -> Billed:
    """Automatic prefix caching: the cached part is read, everything after it is written for the next request
    (billed as a cache write, as a breakpoint at the end of every request would be)."""
    read = min(automatic_cached_tokens(common_tokens), total_tokens)
    return Billed(total_tokens, read, total_tokens - read, 0)


def prefix_keys(blocks: Sequence[Block]) -> list[int]:
    """A hash of every prefix (`result[i]` is the prefix of `i` blocks): equal prefixes, equal hashes."""
    hashes = [0]
    for block in blocks:
        hashes.append(hash((hashes[-1], block.key)))
    return hashes


@dataclass
class BreakpointCache:
    """Anthropic-style cache entries, written at breakpoints, read back through the lookback window."""

    lookback: int = ANTHROPIC_LOOKBACK_BLOCKS
    min_tokens: int = MIN_CACHEABLE_TOKENS
    entries: set[int] = field(default_factory=set)
    """Hashes of the prefixes some earlier request wrote."""

    def bill(self, blocks: Sequence[Block], breakpoints: Sequence[int]) -> Billed:
        """Price a request whose breakpoints sit after the blocks at `breakpoints` (indices), and record the
        entries it writes."""
        total = sum(b.tokens for b in blocks)
        if not breakpoints:
            return Billed(total, 0, 0, total)
        keys = prefix_keys(blocks)
        ends = _token_ends(blocks)
        read = max((self._hit(blocks, keys, ends, b + 1) for b in breakpoints), default=0)
        last = max(breakpoints) + 1
        written_to = ends[last] if ends[last] >= self.min_tokens else 0
        for b in breakpoints:
            if ends[b + 1] >= self.min_tokens:
                self.entries.add(keys[b + 1])
        write = max(written_to - read, 0)
        return Billed(total, read, write, total - read - write)

    def _hit(self, blocks: Sequence[Block], keys: list[int], ends: list[int], end: int) -> int:
        """Tokens of the longest cached prefix ending at most `lookback` content blocks before `end`."""
        seen = 0
        position = end
        while position > 0 and seen <= self.lookback:
            if blocks[position - 1].content:
                if keys[position] in self.entries:
                    return ends[position]
                seen += 1
            position -= 1
        return 0


def _token_ends(blocks: Sequence[Block]) -> list[int]:
    ends = [0]
    for block in blocks:
        ends.append(ends[-1] + block.tokens)
    return ends


@dataclass(frozen=True)
class Prices:
    """Dollars per million tokens (Claude Sonnet-class, as issue 27 prices them)."""

    input: float = 3.0
    cache_write: float = 3.75
    cache_read: float = 0.30
    output: float = 15.0

    def request(self, billed: Billed, output_tokens: int) -> float:
        return (
            billed.cache_read * self.cache_read
            + billed.cache_write * self.cache_write
            + billed.uncached * self.input
            + output_tokens * self.output
        ) / 1_000_000

    def uncached(self, input_tokens: int, output_tokens: int) -> float:
        """A call with no cache at all (the summarizer's)."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000
