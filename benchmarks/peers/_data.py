"""Builds the benchmark inputs once, as JSON under benchmarks/.data/ (every venv loads the same bytes).

Deterministic: a fixed seed, real content only. Sources:
- real agent conversations: ../shared/fixtures/conversations/ (tau-bench, SWE-Gym, SWE-agent; MIT);
- English prose: the readability test pages' extracted articles (fixtures/tool_outputs/readability-pages);
- JSON: tau-bench retail products, octokit API recordings, vega cars/iris (fixtures/tool_outputs);
- CSV: vega datasets;
- code: CPython standard-library modules of the interpreter that runs this script (real code, PSF licence);
- CJK: CPython's own CJK codec test texts (Lib/test/cjkencodings/*-utf8.txt: Chinese, Japanese, Korean prose),
  with an embedded fallback paragraph when the interpreter ships without its test package.

Run in our package's venv (only pydantic-ai + tiktoken are used): `python benchmarks/peers/_data.py OUT_DIR`.
"""

from __future__ import annotations

import html
import json
import random
import re
import sys
import sysconfig
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _strict import Encoder, count_history, part_text

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / 'shared' / 'fixtures'
SEED = 20_240_515
KINDS = ('prose', 'code', 'json', 'csv', 'cjk')
TOOLS = {
    'prose': 'read_page',
    'code': 'read_source',
    'json': 'call_api',
    'csv': 'query_table',
    'cjk': 'search_zh',
}
SYSTEM_PROMPT = (
    'You are a careful research assistant. Use the tools to gather facts, cite what you used, '
    'and keep answers short.'
)

_FALLBACK_CJK = (
    'Python（派森）语言是一种功能强大而完善的通用型计算机程序设计语言，已经具有十多年的发展历史，成熟且稳定。'
    '这种语言具有非常简捷而清晰的语法特点，适合完成各种高层任务，几乎可以在所有的操作系统中运行。'
)


# ---- content pools -------------------------------------------------------------------------------------


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ('script', 'style'):
            self._skip += 1
        elif tag in ('p', 'div', 'br', 'li', 'h1', 'h2', 'h3', 'tr'):
            self.parts.append('\n')

    def handle_endtag(self, tag: str) -> None:
        if tag in ('script', 'style') and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding='utf-8', errors='replace'))
    text = html.unescape(''.join(parser.parts))
    return re.sub(r'\n\s*\n+', '\n\n', re.sub(r'[ \t]+', ' ', text)).strip()


def _pools() -> dict[str, Any]:
    tool_outputs = FIXTURES / 'tool_outputs'
    prose = '\n\n'.join(
        _html_text(tool_outputs / 'readability-pages' / name / 'expected.html')
        for name in ('nytimes-3', 'wikipedia-2')
    )
    stdlib = Path(sysconfig.get_paths()['stdlib'])
    code_files = [
        'dataclasses.py',
        'argparse.py',
        'json/decoder.py',
        'asyncio/base_events.py',
        'typing.py',
        'textwrap.py',
    ]
    code = '\n\n'.join((stdlib / f).read_text(encoding='utf-8') for f in code_files if (stdlib / f).exists())
    json_values: list[Any] = [json.loads((tool_outputs / 'tau-bench_retail_products.json').read_text())]
    for name in ('paginate-issues.normalized-fixture.json', 'rename-repository.normalized-fixture.json'):
        json_values.append(json.loads((tool_outputs / 'octokit-fixtures' / name).read_text()))
    for name in ('cars.json', 'iris.json'):
        json_values.append(json.loads((tool_outputs / 'vega_datasets' / name).read_text()))
    csvs = [
        (tool_outputs / 'vega_datasets' / n).read_text(encoding='utf-8')
        for n in ('airports.csv', 'seattle-weather.csv', 'sf-temps.csv', 'stocks.csv', 'us-employment.csv')
    ]
    cjk_dir = stdlib / 'test' / 'cjkencodings'
    cjk_texts = [
        p.read_text(encoding='utf-8', errors='ignore')
        for p in sorted(cjk_dir.glob('*-utf8.txt'))
        if p.name.split('-')[0] in ('gb2312', 'gb18030', 'big5', 'euc_jp', 'euc_kr', 'gbk')
    ] or [_FALLBACK_CJK]
    sentences = [
        s for t in cjk_texts for s in re.split(r'(?<=[。！？.])\s*', t.replace('\n', '')) if len(s) > 4
    ]
    return {'prose': prose, 'code': code, 'json': json_values, 'csv': csvs, 'cjk': sentences}


def _json_items(value: Any) -> list[Any]:
    """The list of records inside a JSON document (the natural unit an API returns a page of)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list) and len(v) > 3]
        if lists:
            return max(lists, key=len)
        return [{k: v} for k, v in value.items()]
    return [value]


class Content:
    """Chunks of real content of about N o200k tokens, by kind."""

    def __init__(self, rng: random.Random, encode: Encoder) -> None:
        self.rng = rng
        self.encode = encode
        self.pools = _pools()
        self.records = [_json_items(v) for v in self.pools['json']]

    def _slice(self, text: str, tokens: int, ratio: float) -> str:
        chars = max(int(tokens * ratio), 40)
        if chars >= len(text):
            return text
        start = self.rng.randrange(0, len(text) - chars)
        piece = text[start : start + chars]
        measured = self.encode(piece)
        if measured:
            piece = text[start : start + max(int(chars * tokens / measured), 40)]
        return piece

    def chunk(self, kind: str, tokens: int) -> str | Any:
        rng = self.rng
        if kind == 'prose':
            return self._slice(self.pools['prose'], tokens, 4.4)
        if kind == 'code':
            return self._slice(self.pools['code'], tokens, 3.6)
        if kind == 'csv':
            text = rng.choice(self.pools['csv'])
            header, *rows = text.splitlines()
            body = self._slice('\n'.join(rows), tokens, 2.6)
            return header + '\n' + body.split('\n', 1)[-1]
        if kind == 'json':
            records = rng.choice(self.records)
            out: list[Any] = []
            start = rng.randrange(0, max(len(records) - 1, 1))
            size = 0
            for record in records[start:] + records[:start]:
                out.append(record)
                size += self.encode(json.dumps(record, ensure_ascii=False))
                if size >= tokens:
                    break
            style = rng.random()
            if style < 0.35:  # a dict/list returned by the tool itself: pydantic-ai serializes it compactly
                return {'results': out, 'count': len(out)}
            return json.dumps(out, indent=2 if style < 0.7 else None, ensure_ascii=False)
        if kind == 'cjk':
            sentences = self.pools['cjk']
            parts: list[str] = []
            size = 0
            while size < tokens:
                if rng.random() < 0.3:  # search results with CJK fields, as a search tool returns them
                    item = {
                        'title': rng.choice(sentences)[:30],
                        'snippet': ''.join(rng.choice(sentences) for _ in range(2)),
                        'score': round(rng.random(), 3),
                    }
                    piece = json.dumps(item, ensure_ascii=False)
                else:
                    piece = ''.join(rng.choice(sentences) for _ in range(3))
                parts.append(piece)
                size += self.encode(piece) + 1
            return '\n'.join(parts)
        raise ValueError(kind)


# ---- histories -------------------------------------------------------------------------------------------


def _anchor(messages: list[ModelMessage], encode: Encoder) -> list[ModelMessage]:
    """Sets each response's usage as a provider reports it: input = its prefix, output = its own parts."""
    out: list[ModelMessage] = []
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            message = ModelResponse(
                parts=message.parts,
                model_name='gpt-4o',
                usage=RequestUsage(
                    input_tokens=count_history(messages[:index], encode),
                    output_tokens=sum(encode(part_text(p)) for p in message.parts),
                ),
                timestamp=message.timestamp,
            )
        out.append(message)
    return out


def _dump(messages: list[ModelMessage]) -> Any:
    return json.loads(ModelMessagesTypeAdapter.dump_json(messages))


def tool_loop(
    content: Content, kinds: list[str], sizes: list[int], prompt: str, *, system: bool = True
) -> list[ModelMessage]:
    """System + user prompt, then one tool round per size; ends with the request holding the last return."""
    first: list[Any] = [SystemPromptPart(SYSTEM_PROMPT)] if system else []
    messages: list[ModelMessage] = [ModelRequest(parts=[*first, UserPromptPart(prompt)])]
    for i, (kind, size) in enumerate(zip(kinds, sizes, strict=True)):
        call = ToolCallPart(TOOLS[kind], {'item': i, 'query': f'step {i}'}, tool_call_id=f'call_{i:04d}')
        messages.append(
            ModelResponse(parts=[TextPart(f'Looking at source {i} next.'), call], model_name='gpt-4o')
        )
        messages.append(
            ModelRequest(
                parts=[ToolReturnPart(TOOLS[kind], content.chunk(kind, size), tool_call_id=call.tool_call_id)]
            )
        )
    return messages


def _prompt(kind: str) -> str:
    if kind == 'cjk':
        return '请根据搜索结果总结这个编程语言的主要特点，并列出每个来源。'
    return 'Collect the facts from every source the tools return and write a short, cited summary at the end.'


def real_conversations() -> list[tuple[str, list[ModelMessage]]]:
    """The fixture conversations, cleaned to end with a request (dangling final tool calls dropped)."""
    out = []
    for path in sorted((FIXTURES / 'conversations').glob('*.json')):
        messages = list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
        while messages and isinstance(messages[-1], ModelResponse):
            messages.pop()
        if len(messages) >= 3:
            out.append((path.stem, messages))
    return out


def joined_real(
    conversations: list[tuple[str, list[ModelMessage]]], encode: Encoder, min_tokens: int
) -> list[ModelMessage]:
    """Real conversations back to back (later system prompts dropped, each closed by a short answer)."""
    joined: list[ModelMessage] = []
    while count_history(joined, encode) < min_tokens:
        for _, messages in conversations:
            for index, message in enumerate(messages):
                if joined and index == 0 and isinstance(message, ModelRequest):
                    parts = [p for p in message.parts if not isinstance(p, SystemPromptPart)]
                    message = ModelRequest(parts=parts)
                joined.append(message)
            joined.append(ModelResponse(parts=[TextPart('Done with that task.')], model_name='gpt-4o'))
            if count_history(joined, encode) >= min_tokens:
                break
    return joined


def _ending_at_requests(
    messages: list[ModelMessage], fractions: tuple[float, ...]
) -> list[list[ModelMessage]]:
    out = []
    for fraction in fractions:
        end = max(int(len(messages) * fraction), 1)
        while end > 1 and not isinstance(messages[end - 1], ModelRequest):
            end -= 1
        out.append(messages[:end])
    return out


def accuracy_samples(content: Content, encode: Encoder, per_kind: int) -> dict[str, list[dict[str, Any]]]:
    rng = content.rng
    samples: dict[str, list[dict[str, Any]]] = {}
    for kind in KINDS:
        samples[kind] = []
        for i in range(per_kind):
            rounds = rng.randint(1, 12)
            sizes = [int(rng.lognormvariate(7.0, 0.9)) + 50 for _ in range(rounds)]  # median ~1.1K tokens
            messages = _anchor(tool_loop(content, [kind] * rounds, sizes, _prompt(kind)), encode)
            samples[kind].append(
                {
                    'name': f'{kind}-{i}',
                    'messages': _dump(messages),
                    'true_tokens': count_history(messages, encode),
                }
            )
    conversations = real_conversations()
    samples['real'] = []
    for name, messages in conversations:
        for j, prefix in enumerate(_ending_at_requests(messages, (0.35, 0.7, 1.0))):
            prefix = _anchor(prefix, encode)
            samples['real'].append(
                {
                    'name': f'{name}-{j}',
                    'messages': _dump(prefix),
                    'true_tokens': count_history(prefix, encode),
                }
            )
    return samples


def scenario_items(content: Content, window: int, count: int) -> list[dict[str, Any]]:
    """Tool outputs of a tool-loop scenario: mixed kinds, 2-10% of the window, a quarter window every 17th."""
    rng = content.rng
    items = []
    for i in range(count):
        kind = KINDS[rng.randrange(len(KINDS))]
        share = 0.25 if i % 17 == 16 else rng.uniform(0.02, 0.10)
        items.append({'tool': TOOLS[kind], 'kind': kind, 'content': content.chunk(kind, int(window * share))})
    return items


def big_history(content: Content, encode: Encoder, rounds: int, mean_tokens: int) -> list[ModelMessage]:
    """The overhead history: a mixed tool loop closed by a final answer (so a new prompt can follow)."""
    rng = content.rng
    kinds = [KINDS[rng.randrange(len(KINDS))] for _ in range(rounds)]
    sizes = [max(int(rng.uniform(0.3, 1.7) * mean_tokens), 50) for _ in range(rounds)]
    messages = tool_loop(content, kinds, sizes, _prompt('prose'))
    messages.append(
        ModelResponse(parts=[TextPart('Here is the cited summary of every source.')], model_name='gpt-4o')
    )
    return _anchor(messages, encode)


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    encode = Encoder()
    content = Content(random.Random(SEED), encode)
    accuracy = accuracy_samples(content, encode, per_kind=40)
    scenarios = {
        'tool_loop': {str(w): scenario_items(content, w, 130) for w in (16_000, 32_000)},
        'reload': {str(w): scenario_items(content, w, 90) for w in (32_000,)},
    }
    conversations = real_conversations()
    big = big_history(content, encode, rounds=149, mean_tokens=770)
    real = _anchor(joined_real(conversations, encode, 150_000), encode)
    (out_dir / 'accuracy.json').write_text(json.dumps(accuracy, ensure_ascii=False))
    (out_dir / 'scenarios.json').write_text(json.dumps(scenarios, ensure_ascii=False))
    (out_dir / 'overhead.json').write_text(
        json.dumps(
            {
                'synthetic': {'messages': _dump(big), 'true_tokens': count_history(big, encode)},
                'real_joined': {'messages': _dump(real), 'true_tokens': count_history(real, encode)},
                'push': content.chunk('json', 15_000),
            },
            ensure_ascii=False,
        )
    )
    summary = {
        'accuracy_samples': {k: len(v) for k, v in accuracy.items()},
        'synthetic_history': [len(big), count_history(big, encode)],
        'real_joined_history': [len(real), count_history(real, encode)],
    }
    (out_dir / 'manifest.json').write_text(json.dumps(summary))
    print(json.dumps(summary))


if __name__ == '__main__':
    main(Path(sys.argv[1]))
