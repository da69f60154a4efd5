"""JSON, JSON Lines, YAML and XML: parsed, cut structurally (depth, items, keys, string length)."""

from __future__ import annotations

import importlib
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from defusedxml import DefusedXmlException

from ..messages._nesting import json_too_deep
from ._base import Extraction, FileInfo, Reader
from ._results import Truncation
from ._settings import FileSettings
from ._text import as_text, cut_lines, decode_text, shorten


@dataclass
class _Counter:
    shown: int = 0
    omitted: list[str] = field(default_factory=list)


def count_values(value: Any) -> int:
    """Every scalar and container in `value`, counted without recursion (depth is unbounded here)."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def prune(value: Any, settings: FileSettings, counter: _Counter, depth: int = 0) -> Any:
    """A copy of `value` within the structural limits, with in-band markers where things were left out.

    Recursion stops at `struct_max_depth`, so it is bounded whatever the input's depth.
    """
    counter.shown += 1
    if isinstance(value, dict):
        if depth >= settings.struct_max_depth:
            counter.omitted.append('depth')
            return f'{{… {len(value):,} keys}}' if value else {}
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= settings.struct_max_keys:
                out['…'] = f'{len(value) - i:,} more keys'
                counter.omitted.append('keys')
                break
            out[str(key)] = prune(item, settings, counter, depth + 1)
        return out
    if isinstance(value, list):
        if depth >= settings.struct_max_depth:
            counter.omitted.append('depth')
            return f'[… {len(value):,} items]' if value else []
        items = [prune(item, settings, counter, depth + 1) for item in value[: settings.struct_max_items]]
        if len(value) > settings.struct_max_items:
            items.append(f'… {len(value) - settings.struct_max_items:,} more items')
            counter.omitted.append('items')
        return items
    return _short(value, settings, counter) if isinstance(value, str) else value


def _describe(counter: _Counter) -> str | None:
    if not counter.omitted:
        return None
    reasons = {
        'depth': 'nesting deeper than the depth limit',
        'keys': 'keys',
        'items': 'list items',
        'chars': 'long strings',
    }
    kinds = [reasons[k] for k in reasons if k in counter.omitted]
    return 'cut structurally: ' + ', '.join(kinds)


def _structured(value: Any, settings: FileSettings, fmt: str, dump: str = 'json') -> Extraction:
    total = count_values(value)
    counter = _Counter()
    pruned = prune(value, settings, counter)
    if dump == 'jsonl':
        lines = pruned if isinstance(pruned, list) else [pruned]
        text = '\n'.join(json.dumps(line, ensure_ascii=False, default=str) for line in lines)
    else:
        text = json.dumps(pruned, ensure_ascii=False, indent=2, default=str)
    truncations = (Truncation('items', counter.shown, total),) if counter.shown < total else ()
    return Extraction(f'```{dump}\n{text}\n```', truncations, note=_describe(counter), format=fmt)


class JsonReader(Reader):
    format = 'JSON'
    media_types = ('application/json', 'text/json')
    extensions = ('.json', '.geojson')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text = decode_text(data)
        try:
            if json_too_deep(text):
                raise RecursionError
            value = json.loads(text)
        except RecursionError:
            return as_text(data, settings, 'JSON', 'JSON nested too deeply to parse; shown as text')
        except ValueError as e:
            return as_text(data, settings, 'JSON', f'invalid JSON ({e}); shown as text')
        return _structured(value, settings, 'JSON')


class JsonLinesReader(Reader):
    format = 'JSON Lines'
    media_types = (
        'application/jsonl',
        'application/x-ndjson',
        'application/jsonlines',
        'application/x-jsonlines',
    )
    extensions = ('.jsonl', '.ndjson')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        lines = [line for line in decode_text(data).splitlines() if line.strip()]
        records: list[Any] = []
        try:
            # Only the records that can be shown are parsed; the rest are counted as lines.
            for line in lines[: settings.struct_max_items]:
                if json_too_deep(line):
                    raise RecursionError('nested too deeply to parse')
                records.append(json.loads(line))
        except (ValueError, RecursionError) as e:
            return as_text(
                data, settings, 'JSON Lines', f'invalid JSON line ({type(e).__name__}); shown as text'
            )
        extraction = _structured(records, settings, 'JSON Lines', dump='jsonl')
        if len(lines) <= len(records):
            return extraction
        # The list marker the pruner adds would be missing; report the unparsed lines instead.
        text = extraction.text.removesuffix('\n```') + f'\n"… {len(lines) - len(records):,} more lines"\n```'
        truncations = (Truncation('lines', len(records), len(lines)), *extraction.truncations)
        return Extraction(text, truncations, note=extraction.note, format='JSON Lines')


class YamlReader(Reader):
    """YAML, parsed only when PyYAML happens to be installed (it is not a dependency); otherwise text."""

    format = 'YAML'
    media_types = ('application/yaml', 'application/x-yaml', 'text/yaml', 'text/x-yaml')
    extensions = ('.yaml', '.yml')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        try:
            yaml: Any = importlib.import_module('yaml')
        except ImportError:
            text, truncations = cut_lines(decode_text(data), settings)
            return Extraction(f'```yaml\n{text}\n```', truncations)
        try:
            documents = list(yaml.safe_load_all(decode_text(data)))
        except (yaml.YAMLError, RecursionError) as e:
            return as_text(data, settings, 'YAML', f'invalid YAML ({type(e).__name__}); shown as text')
        return _structured(documents[0] if len(documents) == 1 else documents, settings, 'YAML')


# Entity declarations are how XML expands a few bytes into gigabytes ("billion laughs"); refuse them.
_ENTITY = re.compile(rb'<!ENTITY', re.I)


class XmlReader(Reader):
    """Generic XML, shown as indented XML within the depth, children and text limits.

    Parsed with defusedxml: a document declaring entities or referring to external ones (DTDs, files,
    URLs) is shown as text, unexpanded and unresolved; nothing is ever fetched.
    """

    format = 'XML'
    media_types: tuple[str, ...] = ('application/xml', 'text/xml')
    extensions: tuple[str, ...] = ('.xml', '.xsd', '.plist', '.csproj', '.xaml')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        fmt = self.format
        if _ENTITY.search(data[:65536]):
            return as_text(data, settings, fmt, f'{fmt} declares entities; shown as text, unexpanded')
        from defusedxml.ElementTree import fromstring

        try:
            root: ET.Element = fromstring(data, forbid_dtd=False, forbid_entities=True, forbid_external=True)
        except DefusedXmlException as e:
            return as_text(
                data, settings, fmt, f'{fmt} refers to entities or DTDs ({e}); shown as text, unresolved'
            )
        except (ET.ParseError, RecursionError) as e:
            return as_text(data, settings, fmt, f'invalid {fmt} ({e}); shown as text')
        total = sum(1 for _ in root.iter())
        counter = _Counter()
        lines: list[str] = []
        _render_xml(root, settings, counter, lines, 0)
        truncations = (Truncation('items', counter.shown, total),) if counter.shown < total else ()
        return Extraction(
            '```xml\n' + '\n'.join(lines) + '\n```', truncations, note=_describe(counter), format=fmt
        )


class SvgReader(XmlReader):
    """SVG is XML text: its elements, attributes and text are what a model can read of it (no image is
    rendered, no external reference is resolved)."""

    format = 'SVG'
    media_types = ('image/svg+xml',)
    extensions = ('.svg',)


def _tag(name: str) -> str:
    # '{namespace}local' from ElementTree; the namespace URI is noise for the model.
    return name.rsplit('}', 1)[-1] if isinstance(name, str) else 'node'


def _render_xml(
    element: ET.Element, settings: FileSettings, counter: _Counter, out: list[str], depth: int
) -> None:
    counter.shown += 1
    indent = '  ' * depth
    attrs = ''.join(
        f' {_tag(k)}="{_short(v, settings, counter)}"'
        for k, v in list(element.attrib.items())[: settings.struct_max_keys]
    )
    tag = _tag(element.tag)
    text = _short((element.text or '').strip(), settings, counter)
    children = list(element)
    if not children:
        out.append(f'{indent}<{tag}{attrs}>{text}</{tag}>' if text else f'{indent}<{tag}{attrs}/>')
        return
    if depth + 1 >= settings.struct_max_depth:
        counter.omitted.append('depth')
        out.append(f'{indent}<{tag}{attrs}>{text}<!-- … {len(children):,} child elements --></{tag}>')
        return
    out.append(f'{indent}<{tag}{attrs}>{text}')
    for child in children[: settings.struct_max_items]:
        _render_xml(child, settings, counter, out, depth + 1)
    if len(children) > settings.struct_max_items:
        counter.omitted.append('items')
        out.append(f'{indent}  <!-- … {len(children) - settings.struct_max_items:,} more elements -->')
    out.append(f'{indent}</{tag}>')


def _short(value: str, settings: FileSettings, counter: _Counter) -> str:
    if len(value) > settings.struct_max_string_chars:
        counter.omitted.append('chars')
    return shorten(value, settings.struct_max_string_chars)
