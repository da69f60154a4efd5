"""Which of the planted facts a contender kept: in the final context, or one read-back away.

- **In context**: the fact's exact string is in the text of the last request the provider received (tool
  definitions, instructions and every message part, as rendered for counting).
- **One read away**: not in context, but one call of the contender's own read-back tool, given an id the final
  context names and the fact itself as the query, returns text containing it. Ours:
  `read_artifact(artifact_id=id, query=fact)` for every `art_...` id in the final context; harness's
  `ToolOutputLimits(Spill)`: `read_tool_result(handle=h, pattern=fact)` for every spill handle in it. A
  contender without a read-back tool has nothing one read away. A contender whose read-back tool also
  searches everything it stored without an id (ours: `read_artifact(query=fact)`) has the fact one read away
  when that one call returns it too. This is generous to every contender in the same way: the model would have
  to pick the right id (or search), and to think of the fact as its query.
- **Billed**: every fact one read away costs the run one read-back, as a model that needs it would make it:
  `accounting.readback_bill` prices, per such fact, the tool call the model writes and one more request (the
  final context from the cache, the call and the answer the read-back gave, which `FactsKept.answers` keeps).
- **Strict**: a read-back answer holds the fact only outside its echoes of the query. Readers repeat their
  query in what they answer (ours: `[no stored passage matched 'X' ...]`, `[N passage(s) for 'X' ...]`), so
  an answer that merely contains the fact proves nothing. Each answer is weighed against the same reader's
  answer to a decoy query of the fact's length that no stored text holds: the fact counts only when the
  answer holds it more often than the decoy answer holds the decoy (its echoes).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

__all__ = (
    'ARTIFACT_ID',
    'SPILL_HANDLE',
    'FactsKept',
    'Searcher',
    'count_facts',
    'decoy',
    'found_by',
    'named_ids',
)

ARTIFACT_ID = re.compile(r'\bart_[0-9a-f]{16,64}\b')
"""How ours names what it stored (`store.keyed_artifact_id`: 'art_' + hex HMAC-SHA256)."""
SPILL_HANDLE = re.compile(r"""handle[= ]'([^']+)'""")
"""How harness's spill marker names its handle ("stored to handle '<h>'", "read_tool_result(handle='<h>'")."""

Reader = Callable[[str, str], Awaitable[str]]
"""`(id, fact) -> what one read-back call returns`."""
Searcher = Callable[[str], Awaitable[str]]
"""`fact -> what one search call (a read-back without an id) returns`."""


@dataclass(frozen=True)
class FactsKept:
    in_context: tuple[str, ...]
    one_read_away: tuple[str, ...]
    answers: tuple[str, ...]
    """For each fact one read away, in order, the answer of the read-back (or search) that found it."""
    ids_named: int
    """How many distinct read-back ids the final context names."""

    @property
    def kept(self) -> int:
        return len(self.in_context) + len(self.one_read_away)


def named_ids(text: str, pattern: re.Pattern[str]) -> list[str]:
    """The distinct ids `pattern` finds in `text`, in order of first appearance."""
    found: dict[str, None] = {}
    for match in pattern.finditer(text):
        found[match.group(match.lastindex or 0)] = None
    return list(found)


async def count_facts(
    facts: Iterable[str],
    final_text: str,
    ids: Sequence[str],
    read: Reader | None,
    search: Searcher | None = None,
) -> FactsKept:
    """Split `facts` into those in `final_text`, those one `read(id, fact)` (over `ids`) or one `search(fact)`
    away, the rest."""
    present: list[str] = []
    reachable: dict[str, str] = {}
    for fact in facts:
        if fact in final_text:
            present.append(fact)
        elif (answer := await _reachable(fact, ids, read, search)) is not None:
            reachable[fact] = answer
    return FactsKept(tuple(present), tuple(reachable), tuple(reachable.values()), len(ids))


async def _reachable(
    fact: str, ids: Sequence[str], read: Reader | None, search: Searcher | None
) -> str | None:
    """The answer of the first read-back (over `ids`), or else of the search, that holds `fact`."""
    for artifact_id in ids if read is not None else ():
        answer = await found_by(fact, lambda query, artifact_id=artifact_id: read(artifact_id, query))
        if answer is not None:
            return answer
    return await found_by(fact, search) if search is not None else None


def decoy(fact: str) -> str:
    """A query of `fact`'s length that no stored text holds (hex of its hash, after a `Q`)."""
    digest = hashlib.sha256(fact.encode()).hexdigest() * 4
    return 'Q' + digest[: max(len(fact) - 1, 8)]


async def found_by(fact: str, ask: Callable[[str], Awaitable[str]]) -> str | None:
    """The answer to the query `fact` when it holds the fact more often than the reader echoes a query
    (counted on its answer to a `decoy` of the same length): strictly, the fact was found, not repeated."""
    answer = await ask(fact)
    if fact not in answer:
        return None
    echo = decoy(fact)
    return answer if answer.count(fact) > (await ask(echo)).count(echo) else None
