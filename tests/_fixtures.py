"""Where the tests find real material: `../shared/fixtures` beside the checkout when it is there (CI),
else the small set shipped in `tests/fixtures` (a fresh clone).

The shipped set is a subset of the shared one, laid out the same way (see tests/fixtures/README.md). For a
clone, `local_fixtures` assembles it in a temporary folder with the five conversations the package ships for
`eval`, and generates in place of the files too large to ship an equivalent under the same name (same format,
size in pixels, pages, EXIF orientation or frame count: what the tests check). What is neither shipped nor
generated is skipped with `need`.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import struct
from pathlib import Path

import pytest

from pydantic_ai_history.evaluation._probe_files import is_probe_file

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared' / 'fixtures'
LOCAL = ROOT / 'tests' / 'fixtures'
SESSIONS = ROOT / 'src' / 'pydantic_ai_history' / 'evaluation' / 'sessions'
HAS_SHARED = SHARED.is_dir()


def need(path: Path) -> Path:
    """`path`, or a skip when it is one of the shared fixtures a clone does not ship."""
    if not path.exists():
        name = '/'.join(path.parts[-2:])
        pytest.skip(f'{name} is not in tests/fixtures, only in ../shared/fixtures (there in CI)')
    return path


def conversation_names() -> list[str]:
    """The fixture conversations' file names, known at collection time (for parametrize)."""
    if HAS_SHARED:
        return sorted(p.name for p in (SHARED / 'conversations').glob('*.json'))
    folders = (LOCAL / 'conversations', SESSIONS)
    return sorted({p.name for folder in folders for p in folder.glob('*.json') if not is_probe_file(p)})


def local_fixtures(dest: Path) -> Path:
    """tests/fixtures, the package's sessions and the generated stand-ins, assembled in `dest`."""
    shutil.copytree(LOCAL, dest, dirs_exist_ok=True)
    for path in SESSIONS.iterdir():
        if (path.suffix == '.json' and not is_probe_file(path)) or path.name.startswith('LICENSE'):
            shutil.copyfile(path, dest / 'conversations' / path.name)
    for relative, make in STAND_INS.items():
        target = dest / relative
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            make(dest, target)
    return dest


def tiktoken_cache(dest: Path) -> Path:
    """A `TIKTOKEN_CACHE_DIR` for code that calls tiktoken itself (the benchmarks): ../shared's, else the
    package's own copies of the official encodings under the names tiktoken's cache gives them."""
    if HAS_SHARED:
        return SHARED.parent / 'tiktoken-cache'
    encodings = ROOT / 'src' / 'pydantic_ai_history' / 'tokens' / '_encodings'
    for path in encodings.glob('*.tiktoken'):
        url = f'https://openaipublic.blob.core.windows.net/encodings/{path.name}'
        shutil.copyfile(path, dest / hashlib.sha1(url.encode()).hexdigest())
    return dest


# ---- the generated stand-ins ---------------------------------------------------------------------------


def _photo(size: tuple[int, int], seed: int, grain: int):
    """A photo-like RGB image: smooth shapes (a Mandelbrot render per channel) under sensor-like noise of up
    to `grain` levels, which compresses about as badly as a real photo does."""
    from PIL import Image, ImageChops

    width, height = size
    rng = random.Random(seed)
    channels = []
    for i in range(3):
        extent = (-2.0 + 0.1 * i, -1.2, 0.8, 1.2 + 0.05 * seed)
        base = Image.effect_mandelbrot((256, 256), extent, 100).resize(size, Image.Resampling.BILINEAR)
        noise = Image.frombytes('L', size, rng.randbytes(width * height)).point(lambda v: v * grain // 256)
        channels.append(ImageChops.add(base, noise))
    return Image.merge('RGB', channels)


def _meadow_cube(_: Path, target: Path) -> None:
    """A 2048x12288 JPEG of about 3 MB: a tall image past every provider's side limit."""
    from PIL import Image

    part = _photo((2048, 1536), 1, 16)
    tall = Image.new('RGB', (2048, 12288))
    for k in range(8):
        tall.paste(part if k % 2 == 0 else part.transpose(Image.Transpose.FLIP_TOP_BOTTOM), (0, 1536 * k))
    tall.save(target, 'JPEG', quality=85)


def _astronaut(_: Path, target: Path) -> None:
    """A 512x512 RGB PNG far above 100 KB (the real one is 770 KB)."""
    _photo((512, 512), 2, 96).save(target, 'PNG')


def _hdr_png(_: Path, target: Path) -> None:
    """A 1632x1224 RGB PNG of about 3 MB."""
    _photo((1632, 1224), 3, 8).save(target, 'PNG', compress_level=1)


def _hdr_webp(_: Path, target: Path) -> None:
    """A 1632x1224 lossless WebP of about 3 MB."""
    _photo((1632, 1224), 4, 8).save(target, 'WEBP', lossless=True, quality=0, method=0)


def _portrait_8(_: Path, target: Path) -> None:
    """A 600x450 JPEG whose EXIF orientation (8) says it shows a portrait turned on its side."""
    from PIL import Image

    image = _photo((600, 450), 5, 16)
    exif = Image.Exif()
    exif[0x0112] = 8  # Orientation: stored turned a quarter, to be rotated upright when shown
    image.save(target, 'JPEG', quality=90, exif=exif)


def _heic(_: Path, target: Path) -> None:
    """An ISO media file with the HEIC brand (what a phone camera writes), which Pillow cannot decode without
    the pillow-heif plugin: an `ftyp` box, then 2 MB of coded data in an `mdat` box."""
    ftyp = b'heic' + struct.pack('>I', 0) + b'mif1heicmiaf'
    data = random.Random(13).randbytes(2 * 1024 * 1024)
    target.write_bytes(
        struct.pack('>I', 8 + len(ftyp)) + b'ftyp' + ftyp + struct.pack('>I', 8 + len(data)) + b'mdat' + data
    )


def _hopper_as(fmt: str):
    def make(root: Path, target: Path) -> None:
        from PIL import Image

        with Image.open(root / 'images' / 'pillow' / 'hopper.png') as hopper:
            hopper.convert('RGB').save(target, fmt)

    return make


def _animated_gif(root: Path, target: Path) -> None:
    """A 245x245 GIF of 42 frames: hopper turning."""
    from PIL import Image

    with Image.open(root / 'images' / 'pillow' / 'hopper.png') as hopper:
        still = hopper.convert('RGB').resize((245, 245)).quantize(256)
    frames = [still.rotate(i * 360 / 42) for i in range(42)]
    frames[0].save(target, 'GIF', save_all=True, append_images=frames[1:], duration=40, loop=0)


def _truncated_png(root: Path, target: Path) -> None:
    """hopper.png cut off inside its image data: the header reads, the pixels do not."""
    target.write_bytes((root / 'images' / 'pillow' / 'hopper.png').read_bytes()[:20_000])


def _scanned_pdf(root: Path, target: Path) -> None:
    """Three scanned pages (page.png) in a PDF: images only, no text layer."""
    from PIL import Image

    with Image.open(root / 'images' / 'large' / 'page.png') as page:
        scan = page.convert('L')
    scan.save(target, 'PDF', save_all=True, append_images=[scan, scan], resolution=72.0)


STAND_INS = {
    'images/pillow/hopper.bmp': _hopper_as('BMP'),
    'images/pillow/hopper.tif': _hopper_as('TIFF'),
    'images/pillow/iss634.gif': _animated_gif,
    'images/pillow/truncated_image.png': _truncated_png,
    'images/large/astronaut.png': _astronaut,
    'images/large/iphone_hdr_half.png': _hdr_png,
    'images/large/iphone_hdr_half_lossless.webp': _hdr_webp,
    'images/large/meadow_cube.jpg': _meadow_cube,
    'images/large/portrait_8.jpg': _portrait_8,
    'images/large/iphone_13_pro_max.HEIC': _heic,
    'documents/MEDRPT-2024-PAT-3847_medical_report_scan.pdf': _scanned_pdf,
}
"""What `local_fixtures` generates, by the shared fixture each stands in for."""

__all__ = [
    'HAS_SHARED',
    'LOCAL',
    'SESSIONS',
    'SHARED',
    'conversation_names',
    'local_fixtures',
    'need',
    'tiktoken_cache',
]
