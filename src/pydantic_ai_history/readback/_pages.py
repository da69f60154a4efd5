"""What a read-back answer holds: its first line for the model, its metadata for the stages.

`read_artifact` cannot always know the room of the request that carries its answer (a durable activity is
not given the history; parallel reads add up), so each answer records in its metadata which page of which
artifact it is: the request fit can then cut a page shorter instead of storing a copy of what is stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._compat import part_metadata
from ..messages._marks import MARKER_KEY

PAGE_KEY = 'readback'
"""The key, in our metadata dict on a tool return, of the page a read-back returned."""


@dataclass(frozen=True, kw_only=True)
class Page:
    """One read-back answer: characters `start` to `end` of the `total` of an artifact, or (with `query`)
    the passages most relevant to a question."""

    artifact_id: str
    start: int = 0
    end: int = 0
    total: int = 0
    query: str | None = None

    def text(self, body: str, *, room: int | None = None) -> str:
        """The answer: a positional page opens with the line that says where it ends and what comes next."""
        if self.query is not None:
            return body
        more = f' Call again with offset={self.end} for more.' if self.end < self.total else ''
        cut = f' This request had room for {room:,} tokens.' if room is not None else ''
        span = f'characters {self.start:,}-{self.end:,} of {self.total:,}'
        return f'[{self.artifact_id}: {span}.{more}{cut}]\n{body}'

    def shorter(self, body: str, chars: int) -> tuple[Page, str]:
        """This page cut to its first `chars` characters of `body` (what follows its first line)."""
        if self.query is not None:
            return self, f'{body[:chars]}\n[... cut to fit this request: a narrower question finds the rest]'
        return dataclasses.replace(self, end=self.start + min(chars, len(body))), body[:chars]

    def metadata(self) -> dict[str, Any]:
        return {MARKER_KEY: {PAGE_KEY: dataclasses.asdict(self)}}

    @classmethod
    def of(cls, part: object) -> Page | None:
        """The page a tool return carries (recorded by the read-back tool), else None."""
        ours = part_metadata(part).get(MARKER_KEY)
        found = ours.get(PAGE_KEY) if isinstance(ours, Mapping) else None
        if not isinstance(found, Mapping):
            return None
        try:
            return cls(**{f.name: found[f.name] for f in dataclasses.fields(cls) if f.name in found})
        except TypeError:
            return None

    def body(self, text: str) -> str:
        """The page's content without its first line."""
        return text if self.query is not None else text.partition('\n')[2]


def shrunk_to_fit(
    render: Callable[[int], str], size: int, max_tokens: int, cost: Callable[[str], int], *, floor: int = 1
) -> str:
    """`render(size)`, rendered again smaller (by its measured density, with a margin; never below `floor`)
    until it costs at most `max_tokens` (eight tries at most)."""
    text = render(size)
    for _ in range(8):
        tokens = cost(text)
        if tokens <= max_tokens or size <= floor:
            break
        size = max(int(size * max_tokens / tokens * 0.9), floor)
        text = render(size)
    return text
