"""Passage retrieval without a model: structure-aware chunking and BM25 ranking.

BM25 (Okapi, `k1=1.5`, `b=0.75`) needs no weights or network, is deterministic (cacheable, testable) and is
good where tool outputs need it: identifiers, names, error codes, column values, which embeddings blur.
Chunks are exact spans of the original (their offsets can be quoted for read-back), each with a `context`
line (JSON path or table header) shown before it and counted when ranking.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from ..messages._nesting import json_too_deep

BM25_K1 = 1.5
BM25_B = 0.75
DEFAULT_CHUNK_CHARS = 2_000
"""Target chunk size: small enough that a question's answer does not drag much else along, large enough
to keep a JSON object or a few table rows together."""

TextKind = Literal['json', 'table', 'markdown']


@dataclass(frozen=True)
class Chunk:
    """`text[start:end]` of the original, with the context that locates it (JSON path or table header)."""

    index: int
    start: int
    end: int
    text: str
    context: str = ''
    kind: TextKind = 'markdown'


# ---- tokenizing and ranking ---------------------------------------------------------------------------

_WORD = re.compile(r'[^\W_]+')


@functools.cache
def _cjk() -> re.Pattern[str]:
    # Compiled at first use: a class this wide takes milliseconds to compile, a cost every import would pay.
    return re.compile(r'[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]')


_STOP_WORDS_TEXT = (
    'a an and are as at be by can could did do does for from has have how i in is it its me my of on or '
    'please show tell that the their them there these this to was were what when where which who whom why '
    'will with would you your'
)
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


def tokenize(text: str) -> list[str]:
    """Lower-cased words and numbers; `_`, punctuation and JSON syntax separate them; CJK per character."""
    tokens: list[str] = []
    for token in _WORD.findall(text.lower()):
        cjk = None if token.isascii() else _cjk()
        if cjk is not None and cjk.search(token):
            tokens.extend(cjk.findall(token))
            rest = cjk.sub(' ', token).split()
            tokens.extend(rest)
        else:
            tokens.append(token)
    return tokens


_QUERY_CHARS = 4_000
"""A longer query (a whole user message used as the question) is read from its beginning and its end."""
_QUERY_TERMS = 64
"""At most this many distinct terms rank the chunks: each one costs a pass over every chunk."""


def query_terms(query: str) -> list[str]:
    """The terms that rank chunks for `query` (stop words out, each once, at most 64)."""
    if len(query) > _QUERY_CHARS:
        query = query[: _QUERY_CHARS // 2] + ' ' + query[-_QUERY_CHARS // 2 :]
    terms = [t for t in tokenize(query) if t not in _STOP_WORDS]
    return list(dict.fromkeys(terms))[:_QUERY_TERMS]


def bm25_scores(documents: Sequence[Sequence[str]], query_terms: Sequence[str]) -> list[float]:
    """Okapi BM25 score of each tokenized document for the query terms (idf with +1, so it stays positive)."""
    if not documents or not query_terms:
        return [0.0] * len(documents)
    return _bm25([Counter(doc) for doc in documents], [len(doc) for doc in documents], query_terms)


def _chunk_scores(text: str, spans: Sequence[_Span], query_terms: Sequence[str]) -> list[float]:
    """`bm25_scores` of the chunks (context included), tokenizing one chunk at a time and keeping only the
    counts of the query's terms: the words of a 20 MB text are never all held at once."""
    if not spans or not query_terms:
        return [0.0] * len(spans)
    tallies = list(_tallies(text, spans, frozenset(query_terms)))
    return _bm25([counts for _, counts in tallies], [length for length, _ in tallies], query_terms)


def _tallies(text: str, spans: Iterable[_Span], wanted: frozenset[str]) -> Iterator[tuple[int, Counter[str]]]:
    """Each span's tokens (its context included) and how often each `wanted` term occurs in it, one span
    tokenized at a time."""
    for span in spans:
        tokens = tokenize(span.context + '\n' + text[span.start : span.end])
        yield len(tokens), Counter(t for t in tokens if t in wanted)


def _bm25(
    counts: Sequence[Mapping[str, int]],
    lengths: Sequence[int],
    query_terms: Sequence[str],
    *,
    chunks: int | None = None,
    total_length: int | None = None,
) -> list[float]:
    """BM25 of each chunk; `chunks` and `total_length` (when given) are the collection's, of which `counts`
    are only the chunks holding a query term (the others score 0 and weigh only through these two)."""
    k1, b = BM25_K1, BM25_B
    n = len(counts) if chunks is None else chunks
    average = (sum(lengths) if total_length is None else total_length) / n or 1.0
    scores = [0.0] * len(counts)
    for term in query_terms:
        df = sum(1 for c in counts if term in c)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, c in enumerate(counts):
            tf = c.get(term, 0)
            if tf:
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / average))
    return scores


# ---- chunking -------------------------------------------------------------------------------------------


def detect_kind(text: str) -> TextKind:
    """`json` when the whole text parses as a JSON object or array, `table` for CSV/TSV, else `markdown`."""
    # the opening first: no copy of a large text that is not JSON; one too deep to parse reads as text
    if text[:4_096].lstrip()[:1] in ('{', '[') and not json_too_deep(stripped := text.strip()):
        with contextlib.suppress(ValueError, RecursionError):
            json.loads(stripped)
            return 'json'
    return 'table' if _looks_like_table(text) else 'markdown'


def _looks_like_table(text: str) -> bool:
    lines = text[:20_000].splitlines()[:20]
    if len(lines) < 3:
        return False
    for delimiter in (',', '\t', ';', '|'):
        if delimiter not in lines[0]:
            continue
        try:
            widths = {len(row) for row in csv.reader(io.StringIO('\n'.join(lines[:-1])), delimiter=delimiter)}
        except csv.Error:
            continue
        if len(widths) == 1 and widths.pop() >= 2:
            return True
    return False


def chunk_text(
    text: str, *, max_chars: int = DEFAULT_CHUNK_CHARS, kind: TextKind | None = None
) -> list[Chunk]:
    """Split `text` into chunks of about `max_chars`, along its structure: JSON per item or key (the context
    is the path), tables by whole rows (the header is the context), markdown and text by headings, paragraphs,
    then lines (the latest heading is the context)."""
    return [
        Chunk(s.number, s.start, s.end, text[s.start : s.end], s.context, s.kind)
        for s in _spans(text, max_chars, kind)
    ]


class _Span(NamedTuple):
    """A chunk without its text: where it lies in the original, which is read only when needed."""

    number: int
    """The chunk's index (`Chunk.index`)."""
    start: int
    end: int
    context: str
    kind: TextKind


def _spans(text: str, max_chars: int, kind: TextKind | None) -> list[_Span]:
    """`chunk_text`'s chunks as spans (blank ones left out, their indices kept)."""
    if not text:
        return []
    max_chars = max(max_chars, 200)
    kind = kind or detect_kind(text)
    spans: list[tuple[int, int, str]] = []
    if kind == 'json' and json_too_deep(text):  # a given kind too: the spans recurse once per level
        kind = 'markdown'
    if kind == 'json':
        try:
            _json_spans(text, 0, len(text), '', max_chars, spans)
        except _NotJson:
            spans = []
            kind = 'markdown'
    if kind == 'table':
        spans = _table_spans(text, max_chars)
    if kind == 'markdown' or not spans:
        kind = 'markdown'
        spans = _markdown_spans(text, max_chars)
    return [
        _Span(i, s, e, ctx, kind) for i, (s, e, ctx) in enumerate(spans) if not text[s:e].isspace() and e > s
    ]


class _NotJson(Exception):
    pass


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],]')
_JSON_KEY = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:\s*')
_NAME_FIELD = re.compile(
    r'"(name|title|login|id|key|sku|product_id|item_id)"\s*:\s*("(?:[^"\\]|\\.){1,80}"|-?\d{1,20})'
)


def _json_members(text: str, open_pos: int, end: int) -> list[tuple[int, int]]:
    """Spans of the items (or `"key": value` members) of the container opening at `open_pos`."""
    members: list[tuple[int, int]] = []
    depth = 0
    member_start = open_pos + 1
    for match in _JSON_TOKEN.finditer(text, open_pos, end):
        token = match.group()
        if token in '{[':
            depth += 1
        elif token in '}]':
            depth -= 1
            if depth == 0:
                _add_member(text, member_start, match.start(), members)
                return members
        elif token == ',' and depth == 1:
            _add_member(text, member_start, match.start(), members)
            member_start = match.end()
    raise _NotJson


def _add_member(text: str, start: int, end: int, members: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        members.append((start, end))


def _member_label(text: str, start: int, end: int, index: int) -> tuple[str, int]:
    """A path label for a member and the position where its value starts."""
    key = _JSON_KEY.match(text, start, end)
    value_start = key.end() if key else start
    label = json.loads(key.group(1)) if key else f'[{index}]'
    if value_start < end and text[value_start] == '{':
        # only the object's own fields: stop at its first nested container
        nested = min(
            (
                p
                for p in (text.find('{', value_start + 1, end), text.find('[', value_start + 1, end))
                if p >= 0
            ),
            default=end,
        )
        name = _NAME_FIELD.search(text, value_start, min(nested, value_start + 600))
        if name and name.group(2).strip('"') != label:
            label += f' ({name.group(1)}: {name.group(2).strip(chr(34))})'
    return str(label), value_start


def _json_spans(
    text: str, start: int, end: int, path: str, max_chars: int, out: list[tuple[int, int, str]]
) -> None:
    value_start = start
    while value_start < end and text[value_start].isspace():
        value_start += 1
    if value_start >= end or text[value_start] not in '{[':
        if not out and start == 0:
            raise _NotJson
        _split_span(text, start, end, max_chars, path, out)
        return
    members = _json_members(text, value_start, end)
    group_start: int | None = None
    group_end = 0
    for index, (m_start, m_end) in enumerate(members):
        if m_end - m_start > max_chars:
            if group_start is not None:
                out.append((group_start, group_end, path))
                group_start = None
            label, inner = _member_label(text, m_start, m_end, index)
            child_path = f'{path} > {label}' if path else label
            if inner < m_end and text[inner] in '{[':
                _json_spans(text, inner, m_end, child_path, max_chars, out)
            else:  # one huge string or number
                _split_span(text, m_start, m_end, max_chars, child_path, out)
            continue
        if group_start is not None and m_end - group_start > max_chars:
            out.append((group_start, group_end, path))
            group_start = None
        if group_start is None:
            group_start = m_start
        group_end = m_end
    if group_start is not None:
        out.append((group_start, group_end, path))


def _split_span(
    text: str, start: int, end: int, max_chars: int, context: str, out: list[tuple[int, int, str]]
) -> None:
    """Cut `text[start:end]` into pieces of at most `max_chars`, preferring line breaks, then spaces."""
    while end - start > max_chars:
        limit = start + max_chars
        cut = text.rfind('\n', start + max_chars // 2, limit)
        if cut < 0:
            cut = text.rfind(' ', start + max_chars // 2, limit)
        cut = cut + 1 if cut >= 0 else limit
        out.append((start, cut, context))
        start = cut
    if end > start:
        out.append((start, end, context))


_LINE_BREAK = re.compile('\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]')
"""Where `str.splitlines` breaks lines."""


def _line_spans(text: str) -> Iterator[tuple[int, int]]:
    """The lines of `text` as `splitlines(keepends=True)` cuts them, as spans, one at a time: a 20 MB text
    is never held again as a list of its lines."""
    position = 0
    for match in _LINE_BREAK.finditer(text):
        yield position, match.end()
        position = match.end()
    if position < len(text):
        yield position, len(text)


def _table_spans(text: str, max_chars: int) -> list[tuple[int, int, str]]:
    lines = _line_spans(text)
    first = next(lines, None)
    if first is None:
        return []
    header = text[first[0] : first[1]].rstrip('\r\n')
    return _group(text, ((start, end, header, False) for start, end in lines), max_chars)


_HEADING = re.compile(r'^(#{1,6})\s+(.+?)\s*#*\s*$')


def _markdown_spans(text: str, max_chars: int) -> list[tuple[int, int, str]]:
    """Blocks separated by blank lines or headings, grouped up to `max_chars`; a heading opens a new chunk."""
    blocks: list[tuple[int, int, str, bool]] = []  # start, end, heading in effect, opens with a heading
    heading = ''
    block: list[int] = []  # [start] of the open block
    opens_heading = False
    for start, end in _line_spans(text):
        line = text[start:end]
        match = _HEADING.match(line.rstrip('\r\n'))
        if match or not line.strip():
            if block:
                blocks.append((block[0], start, heading, opens_heading))
                block = []
            if match:
                heading = match.group(2)
                block, opens_heading = [start], True
            continue
        if not block:
            block, opens_heading = [start], False
    if block:
        blocks.append((block[0], len(text), heading, opens_heading))
    return _group(text, blocks, max_chars)


def _group(
    text: str, blocks: Iterable[tuple[int, int, str, bool]], max_chars: int
) -> list[tuple[int, int, str]]:
    """Consecutive `(start, end, context, opens)` blocks grouped up to `max_chars` (a block that opens, e.g.
    with a heading, starts a new group); a block larger than `max_chars` is split on its own."""
    out: list[tuple[int, int, str]] = []
    group_start: int | None = None
    group_end = 0
    group_context = ''
    for start, end, context, opens in blocks:
        if group_start is not None and (end - group_start > max_chars or opens):
            out.append((group_start, group_end, group_context))
            group_start = None
        if end - start > max_chars:
            _split_span(text, start, end, max_chars, context, out)
            continue
        if group_start is None:
            group_start, group_context = start, context
        group_end = end
    if group_start is not None:
        out.append((group_start, group_end, group_context))
    return out


# ---- selection and rendering ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Extract:
    """What `extract_passages` chose: the rendered text and which chunks it shows."""

    text: str
    chunks_total: int
    shown: tuple[int, ...]
    matched: bool
    """True when the query matched at least one chunk (otherwise the text is the opening chunks)."""


def extract_passages(
    text: str, query: str | None, max_chars: int, *, chunk_chars: int | None = None
) -> Extract:
    """The chunks of `text` most relevant to `query`, best first until `max_chars`, shown in original order,
    each run headed by a `[showing chunks i..j of n, characters a-b of N]` marker so the model knows where
    the rest is. Without a query, or when nothing matches, the opening chunks."""
    if chunk_chars is None:
        chunk_chars = min(DEFAULT_CHUNK_CHARS, max(max_chars // 3, 300))
    return rank_passages(text, query, chunk_chars=chunk_chars).select(max_chars)


@dataclass(frozen=True)
class Ranking:
    """A text's chunks ranked for a query: chunked and scored once, then selected for any size (no second pass
    over a 200 MB text); chunks are spans, not copies."""

    text: str
    spans: list[_Span]
    order: list[int]
    """Chunk positions, best first (every chunk, in order, when nothing matched)."""
    matched: bool
    terms: tuple[str, ...] = ()
    """The query's terms (`query_terms`): where in a chunk cut to fit the part shown starts."""

    def select(self, max_chars: int) -> Extract:
        """The best chunks within `max_chars` as they render, shown in original order; when the best does not
        fit, its part around the query's terms (never a worse chunk in its place: a short one that fits is
        often the least relevant)."""
        spans, order = self.spans, self.order
        chosen: list[int] = []
        room = max_chars
        shortest = min((s.end - s.start for s in spans), default=0)
        for index in order:
            if room < shortest:
                break  # no chunk fits any more: the rest need not be tried
            if spans[index].end - spans[index].start > room:
                if not self.matched or not chosen:
                    break
                continue  # it cannot fit, whatever its marker costs
            candidate = sorted([*chosen, index])
            rendered = len(_render(self.text, spans, candidate))
            if rendered <= max_chars:
                chosen, room = candidate, max_chars - rendered
            elif not self.matched or not chosen:
                break
        if not chosen and spans:  # even the best chunk is too large: show its part around the terms
            best = order[0]
            cut_at = max(max_chars - 120 - len(spans[best].context), 50)
            shown = list(spans)
            start = self._cut_start(spans[best], cut_at)
            shown[best] = spans[best]._replace(start=start, end=min(start + cut_at, spans[best].end))
            return Extract(_render(self.text, shown, [best]), len(spans), (best,), self.matched)
        return Extract(_render(self.text, spans, chosen), len(spans), tuple(chosen), self.matched)

    def _cut_start(self, span: _Span, length: int) -> int:
        """Where `length` characters of `span` start: at the line holding most of the query's terms, moved
        back so they end with the chunk where they would run past it (its beginning when nothing matched)."""
        if not self.matched or not self.terms or span.end - span.start <= length:
            return span.start
        best, best_hits, offset = span.start, 0, span.start
        for line in self.text[span.start : span.end].splitlines(keepends=True):
            hits = len(set(tokenize(line)).intersection(self.terms))
            if hits > best_hits:
                best, best_hits = offset, hits
            offset += len(line)
        start = max(min(best, span.end - length), span.start)
        line_start = self.text.find('\n', max(start - 1, 0), best) + 1  # a whole first line, where one fits
        return line_start if line_start > start else start


def rank_passages(text: str, query: str | None, *, chunk_chars: int) -> Ranking:
    """`text` chunked along its structure and ranked by BM25 against `query` (see `extract_passages`), the
    chunks that hold the query verbatim first (`exact_first`)."""
    spans = _spans(text, chunk_chars, None)
    terms = query_terms(query or '')
    order = _best_first(_chunk_scores(text, spans, terms))
    order = exact_first(order, lambda i: _holds(text[spans[i].start : spans[i].end], query))
    return Ranking(text, spans, order or list(range(len(spans))), bool(order), tuple(terms))


def exact_first(order: list[int], holds: Callable[[int], bool]) -> list[int]:
    """`order` with the positions whose chunk holds the query verbatim moved ahead, each group in its order:
    an id or a path asked for is in the answer, even where many chunks share most of its words (paths of one
    shape, ids of one prefix) and BM25 alone ranks another chunk higher."""
    verdicts = [holds(i) for i in order]  # each chunk is looked at once
    if not any(verdicts):
        return order
    return [i for i, h in zip(order, verdicts, strict=True) if h] + [
        i for i, h in zip(order, verdicts, strict=True) if not h
    ]


def _holds(chunk: str, query: str | None) -> bool:
    phrase = (query or '').strip()
    return bool(phrase) and phrase in chunk


def _render(text: str, spans: Sequence[_Span], chosen: Sequence[int]) -> str:
    if not chosen:
        return ''
    runs: list[list[int]] = []
    for index in chosen:
        if runs and runs[-1][-1] == index - 1 and spans[index].context == spans[runs[-1][-1]].context:
            runs[-1].append(index)
        else:
            runs.append([index])
    n = len(spans)
    pieces: list[str] = []
    for run in runs:
        first, last = spans[run[0]], spans[run[-1]]
        which = f'chunk {run[0] + 1}' if len(run) == 1 else f'chunks {run[0] + 1}..{run[-1] + 1}'
        marker = f'[showing {which} of {n}, characters {first.start:,}-{last.end:,} of {len(text):,}'
        if first.context and first.kind == 'json':
            marker += f', at {first.context}'
        pieces.append(marker + ']')
        if first.context and first.kind == 'table':
            pieces.append(first.context)
        elif first.context and first.kind == 'markdown':
            pieces.append(f'(section: {first.context})')
        pieces.append(''.join(text[spans[i].start : spans[i].end] for i in run).strip('\n'))
    return '\n'.join(pieces)


def top_passages(text: str, query: str, max_chars: int) -> str:
    """The passages of `text` most relevant to `query` within `max_chars` (read-back's query mode)."""
    result = extract_passages(text, query, max_chars)
    if not result.matched:
        return f'[no passage matched {query!r}; showing the beginning]\n' + result.text
    return result.text


class Tallied(NamedTuple):
    """One chunk that holds a term searched for: where it lies and what `rank_tallied` needs of it."""

    start: int
    end: int
    tokens: int
    """Its tokens, its context line included."""
    counts: dict[str, int]
    """How often each term searched for occurs in it (only those that do)."""
    phrases: frozenset[str] = frozenset()
    """The queries searched for that it holds verbatim."""


def tally_chunks(
    text: str, wanted: frozenset[str], phrases: frozenset[str] = frozenset()
) -> tuple[int, int, list[Tallied]]:
    """`text` chunked as `rank_documents` chunks it, one chunk tokenized at a time: `(chunks, tokens of all of
    them, the chunks holding a term of `wanted`)`, each with the `phrases` it holds verbatim. The text's words
    are never all held at once."""
    spans = _spans(text, DEFAULT_CHUNK_CHARS, None)
    total = 0
    found: list[Tallied] = []
    for span, (length, counts) in zip(spans, _tallies(text, spans, wanted), strict=True):
        total += length
        if counts:
            chunk = text[span.start : span.end] if phrases else ''  # sliced only when a phrase is looked for
            held = frozenset(p for p in phrases if p in chunk)
            found.append(Tallied(span.start, span.end, length, dict(counts), held))
    return len(spans), total, found


def rank_tallied(tallied: Sequence[Tallied], query: str, *, chunks: int, tokens: int) -> list[int]:
    """Positions in `tallied` (chunks of a collection of `chunks` chunks and `tokens` tokens) that match
    `query`, best first by BM25 (ties: the earlier first): the order `rank_documents` gives them, the chunks
    that hold `query` verbatim first (`exact_first`)."""
    terms = query_terms(query)
    if not tallied or not terms:
        return []
    counts, lengths = [t.counts for t in tallied], [t.tokens for t in tallied]
    order = _best_first(_bm25(counts, lengths, terms, chunks=chunks, total_length=tokens))
    phrase = query.strip()
    return exact_first(order, lambda i: phrase in tallied[i].phrases)


def rank_documents(documents: Sequence[str], query: str, max_chars: int) -> list[tuple[int, Chunk]]:
    """The chunks of all `documents` most relevant to `query`, best first, together at most `max_chars`, as
    `(document index, chunk)` pairs. One ranking over every chunk, so a term rare across the collection (an
    id, an error code) weighs most wherever it is."""
    chunked = [
        (d, c) for d, text in enumerate(documents) for c in chunk_text(text, max_chars=DEFAULT_CHUNK_CHARS)
    ]
    order = _best_first(
        bm25_scores([tokenize(c.context + '\n' + c.text) for _, c in chunked], query_terms(query))
    )
    chosen = [chunked[order[i]] for i in greedy_fit([len(chunked[i][1].text) for i in order], max_chars)]
    if chosen and len(chosen[0][1].text) > max_chars:  # even the best chunk is too large: its head
        document, chunk = chosen[0]
        return [(document, replace(chunk, end=chunk.start + max_chars, text=chunk.text[:max_chars]))]
    return chosen


def _best_first(scores: Sequence[float]) -> list[int]:
    """The positions of the positive `scores`, highest first (ties: the earlier first)."""
    return sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))


def greedy_fit(sizes: Sequence[int], max_chars: int) -> list[int]:
    """Positions of the items of `sizes` (best first) that fit `max_chars` together, each taken when it still
    fits; when even the first does not, that one alone (its head is shown)."""
    picked: list[int] = []
    used = 0
    for position, size in enumerate(sizes):
        if used + size <= max_chars:
            picked.append(position)
            used += size
        elif not picked:
            return [position]
    return picked
