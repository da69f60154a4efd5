"""The tool loop's material: what each of the N tool calls returns, and the facts planted in 30 of them.

Deterministic (one seed) and real: every output is a slice of `../shared/fixtures/tool_outputs` (the
readability test pages' articles as prose, the tau-bench product catalogue, octokit API recordings and vega
datasets as JSON, vega CSV tables), sized in o200k tokens: log-normal around 2,500 (median 2,500,
sigma 0.6, clipped to 400-12,000) and every 17th call ~16,000.

A *fact* is a distinctive string (an order id, an amount, a file path) found nowhere in the fixtures, put in
the middle (25-75%) of one output: as a paragraph of prose, an `audit_ref` field of one JSON record, or the
first cell of one CSV row. The 30 facts go to 30 outputs spread evenly over the run.
"""

from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers._data import _html_text, _json_items

__all__ = (
    'FACTS',
    'SEED',
    'TOOLS',
    'Fact',
    'ToolSpec',
    'ToolStep',
    'Workload',
    'build_workload',
    'fact_steps',
    'size_of',
)

SEED = 27_180
FACTS = 30
FIXTURES = Path(__file__).resolve().parents[3] / 'shared' / 'fixtures' / 'tool_outputs'
TOOLS = {'prose': 'search_docs', 'json': 'call_api', 'csv': 'query_table'}
"""The agent's tools, by the kind of content each returns."""
MEDIAN_TOKENS = 2_500
SIGMA = 0.6
LARGE_EVERY = 17
LARGE_TOKENS = 16_000


@dataclass(frozen=True)
class Fact:
    step: int
    text: str
    kind: str
    """'id', 'amount' or 'path'."""


@dataclass(frozen=True)
class ToolStep:
    index: int
    tool: str
    query: str
    output: Any
    """A string, or (a third of the JSON outputs) a dict the tool returns and pydantic-ai serializes."""
    target_tokens: int
    fact: Fact | None
    args: dict[str, Any] | None = None
    """The call's arguments (`step` added by the script); None: `{'query': query}`."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool of a workload that declares its own (name, description, JSON schema of its arguments)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Workload:
    steps: tuple[ToolStep, ...]
    facts: tuple[Fact, ...]
    seed: int
    name: str = 'tools'
    """'tools' (this module) or 'coding' (`cost.coding`)."""
    instructions: str | None = None
    """The agent's instructions and prompt; None: `cost.run`'s (the tool loop's)."""
    prompt: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    """The agent's tools; empty: `cost.run`'s three (`search_docs`, `call_api`, `query_table`)."""
    source: str = ''
    """Where the material comes from, for the report."""


def size_of(index: int, rng: random.Random, median: int = MEDIAN_TOKENS) -> int:
    """The target size in tokens of call `index` (0-based): every 17th large, the rest log-normal."""
    if (index + 1) % LARGE_EVERY == 0:
        return round(LARGE_TOKENS * rng.uniform(0.95, 1.05))
    return min(max(round(rng.lognormvariate(math.log(median), SIGMA)), 400), 12_000)


def fact_steps(steps: int, facts: int = FACTS) -> list[int]:
    """The calls that carry a fact: `facts` of them (at most one per call), evenly spread over the run."""
    count = min(facts, steps)
    return [int((k + 0.5) * steps / count) for k in range(count)]


class _Pools:
    def __init__(self) -> None:
        self.prose = '\n\n'.join(
            _html_text(FIXTURES / 'readability-pages' / name / 'expected.html')
            for name in ('nytimes-3', 'wikipedia-2')
        )
        products = json.loads((FIXTURES / 'tau-bench_retail_products.json').read_text())
        self.records: list[list[Any]] = [_json_items(products)]
        exchanges: list[Any] = []
        for name in ('paginate-issues', 'rename-repository', 'search-issues'):
            path = FIXTURES / 'octokit-fixtures' / f'{name}.normalized-fixture.json'
            exchanges.extend(_json_items(json.loads(path.read_text())))
        self.records.append(exchanges)
        for name in ('cars.json', 'iris.json'):
            self.records.append(_json_items(json.loads((FIXTURES / 'vega_datasets' / name).read_text())))
        self.csvs = [
            (FIXTURES / 'vega_datasets' / name).read_text(encoding='utf-8')
            for name in (
                'airports.csv',
                'seattle-weather.csv',
                'sf-temps.csv',
                'stocks.csv',
                'us-employment.csv',
            )
        ]
        self.corpus = '\n'.join([self.prose, *self.csvs, *(json.dumps(r) for r in self.records)])


class _Builder:
    def __init__(self, rng: random.Random, encode: Callable[[str], int]) -> None:
        self.rng = rng
        self.encode = encode
        self.pools = _Pools()

    def _span(self, text: str, tokens: int, chars_per_token: float) -> str:
        """A slice of `text` of about `tokens` tokens, from a random line start (wrapping around)."""
        doubled = text + '\n' + text
        start = text.find('\n', self.rng.randrange(len(text))) + 1
        chars = int(tokens * chars_per_token)
        piece = doubled[start : start + chars]
        measured = self.encode(piece)
        if measured:
            piece = doubled[start : start + int(chars * tokens / measured)]
        return piece.rsplit('\n', 1)[0] if '\n' in piece else piece

    def prose(self, tokens: int, fact: Fact | None) -> str:
        text = self._span(self.pools.prose, tokens, 4.2)
        if fact is None:
            return text
        paragraphs = text.split('\n\n')
        at = max(1, int(len(paragraphs) * self.rng.uniform(0.25, 0.75)))
        paragraphs.insert(
            at, f'Audit note: the {_LABELS[fact.kind]} recorded for this source is {fact.text}.'
        )
        return '\n\n'.join(paragraphs)

    def csv(self, tokens: int, fact: Fact | None) -> str:
        header, body = self.rng.choice(self.pools.csvs).split('\n', 1)
        rows = self._span(body, tokens, 2.6).split('\n')
        if fact is not None:
            at = int(len(rows) * self.rng.uniform(0.25, 0.75))
            cells = rows[at].split(',')
            rows[at] = ','.join([fact.text, *cells[1:]])
        return header + '\n' + '\n'.join(rows)

    def json(self, tokens: int, fact: Fact | None) -> Any:
        records = self.rng.choice(self.pools.records)
        start = self.rng.randrange(len(records))
        style = self.rng.choice(('dict', 'indented', 'compact'))
        # each record measured as it will be rendered (pydantic-ai serializes a dict without spaces)
        dumps = {
            'dict': lambda value: json.dumps(value, separators=(',', ':')),
            'indented': lambda value: json.dumps(value, indent=2),
            'compact': json.dumps,
        }[style]
        out: list[Any] = []
        size = 0
        last = 0
        while size < tokens:
            record = records[(start + len(out)) % len(records)]
            out.append(record)
            last = self.encode(dumps(record))
            size += last
        if len(out) > 1 and size - tokens > last / 2:  # closer to the target without the last record
            out.pop()
        if fact is not None:
            at = int(len(out) * self.rng.uniform(0.25, 0.75))
            record = out[at] if isinstance(out[at], dict) else {'value': out[at]}
            out[at] = {**record, 'audit_ref': fact.text}
        if style == 'dict':
            return {'results': out, 'count': len(out)}
        return json.dumps(out, indent=2 if style == 'indented' else None)

    def fact(self, step: int, number: int) -> Fact:
        kind = ('id', 'amount', 'path')[number % 3]
        while True:
            text = _FACT_MAKERS[kind](self.rng)
            if text not in self.pools.corpus:
                return Fact(step, text, kind)


_LABELS = {'id': 'order id', 'amount': 'disputed amount', 'path': 'export path'}


def _fact_id(rng: random.Random) -> str:
    code = ''.join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(4))
    return f'{rng.choice(("ORD", "INV", "TKT", "SHP", "RMA"))}-{code}-{rng.randint(10_000, 99_999)}'


def _fact_amount(rng: random.Random) -> str:
    return f'${rng.randint(10_000, 999_999):,}.{rng.randint(0, 99):02d}'


def _fact_path(rng: random.Random) -> str:
    area = rng.choice(('ingest', 'exports', 'ledger', 'billing', 'audit'))
    name = rng.choice(('manifest', 'part', 'snapshot', 'reconcile', 'dump'))
    ext = rng.choice(('parquet', 'json', 'csv', 'jsonl'))
    return (
        f'/srv/{area}/{rng.choice(("2023", "2024"))}-q{rng.randint(1, 4)}/batch-{rng.randint(1000, 9999)}/'
        f'{name}-{rng.getrandbits(16):04x}.{ext}'
    )


_FACT_MAKERS = {'id': _fact_id, 'amount': _fact_amount, 'path': _fact_path}


def build_workload(
    steps: int,
    encode: Callable[[str], int],
    seed: int = SEED,
    facts: int = FACTS,
    median_tokens: int = MEDIAN_TOKENS,
) -> Workload:
    """The outputs of `steps` tool calls and their facts (identical for every contender and every venv);
    `median_tokens` sets the median of the log-normal sizes (the large outputs stay ~16,000)."""
    rng = random.Random(seed)
    builder = _Builder(rng, encode)
    carriers = {step: number for number, step in enumerate(fact_steps(steps, facts))}
    out: list[ToolStep] = []
    planted: list[Fact] = []
    for index in range(steps):
        kind = rng.choice(('prose', 'json', 'json', 'csv'))
        tokens = size_of(index, rng, median_tokens)
        fact = builder.fact(index, carriers[index]) if index in carriers else None
        output = getattr(builder, kind)(tokens, fact)
        query = f'source {index}: {kind} batch {rng.randint(100, 999)}'
        out.append(ToolStep(index, TOOLS[kind], query, output, tokens, fact))
        if fact is not None:
            planted.append(fact)
    return Workload(tuple(out), tuple(planted), seed)
