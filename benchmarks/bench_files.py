"""Time and peak memory of file conversion over the shared fixtures, plus a second pass from a cache.

Run: `python benchmarks/bench_files.py` from the repo root (needs ../shared/fixtures).
Figures are per file: wall time (untraced), time per MB of input, and tracemalloc's peak of Python allocations
(native buffers in Pillow or libjpeg are not traced, so image peaks are a lower bound).
"""

from __future__ import annotations

import asyncio
import sys
import time
import tracemalloc
from pathlib import Path

from pydantic_ai_history.cache import MemoryCache, SummaryCache, cache_key
from pydantic_ai_history.files import ConvertedDocument, FileSettings, read_file

FIXTURES = Path(__file__).resolve().parents[1].parent / 'shared' / 'fixtures'


def _files() -> list[Path]:
    documents = sorted(p for p in (FIXTURES / 'documents').iterdir() if p.is_file())
    images = sorted(p for p in (FIXTURES / 'images' / 'large').iterdir() if p.suffix.lower() != '.rst')
    return documents + images


def _convert(data: bytes, name: str, settings: FileSettings) -> tuple[str, float, int, str]:
    """Time one conversion, then repeat it under tracemalloc (which slows it several-fold) for the peak."""
    start = time.perf_counter()
    result = read_file(data, name=name, settings=settings)
    elapsed = time.perf_counter() - start
    tracemalloc.start()
    read_file(data, name=name, settings=settings)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result.kind, elapsed, peak, result.to_json() if isinstance(result, ConvertedDocument) else ''


async def main() -> None:
    if not FIXTURES.is_dir():
        sys.exit(f'fixtures not found at {FIXTURES}')
    settings = FileSettings()
    # Warm up: the first markitdown/pdfminer imports take seconds and would be charged to one file.
    read_file((FIXTURES / 'documents' / 'dummy.pdf').read_bytes(), name='dummy.pdf')

    cache: SummaryCache = MemoryCache()
    print(f'{"file":<48} {"kind":<10} {"KB":>8} {"ms":>8} {"ms/MB":>8} {"peak MB":>8}')
    total_bytes = 0
    total_time = 0.0
    for path in _files():
        data = path.read_bytes()
        kind, elapsed, peak, cached = _convert(data, path.name, settings)
        if cached:
            await cache.set(cache_key('files', settings.fingerprint(), data), cached)
        total_bytes += len(data)
        total_time += elapsed
        mb = len(data) / 1024 / 1024
        print(
            f'{path.name[:48]:<48} {kind:<10} {len(data) / 1024:>8.0f} {elapsed * 1000:>8.1f} '
            f'{elapsed * 1000 / mb:>8.0f} {peak / 1024 / 1024:>8.1f}'
        )
    print(
        f'\nfirst pass: {total_bytes / 1024 / 1024:.1f} MB in {total_time:.2f} s '
        f'({total_time * 1000 / (total_bytes / 1024 / 1024):.0f} ms/MB)'
    )

    start = time.perf_counter()
    served = 0
    for path in _files():
        data = path.read_bytes()
        hit = await cache.get(cache_key('files', settings.fingerprint(), data))
        if hit is not None:
            ConvertedDocument.from_json(hit)
            served += 1
        else:
            read_file(data, name=path.name, settings=settings)  # images are not cached as JSON
    second = time.perf_counter() - start
    print(
        f'second pass: {second:.2f} s, {served} documents served from the cache '
        f'(hits {cache.stats.hits}, misses {cache.stats.misses})'
    )


if __name__ == '__main__':
    asyncio.run(main())
