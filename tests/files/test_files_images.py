"""Images: real fixtures end up upright, within limits, still decodable, or unreadable with a reason."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image, ImageChops, ImageStat

from pydantic_ai_history.files import FileSettings, FittedImage, UnreadableFile, read_file, read_path

HOSTILE = {
    'decompression_bomb.gif': 'decompression bomb',
    'truncated_image.png': 'truncated',
    'truncated_jpeg.jpg': 'truncated',
    'iphone_13_pro_max.HEIC': 'pillow-heif',
}


def _all_images(images: Path) -> list[Path]:
    return sorted(
        p for p in images.glob('*/*') if p.suffix.lower() not in ('.rst', '') and 'LICENSE' not in p.name
    )


@pytest.mark.slow
def test_every_image_fits_or_is_unreadable_with_reason(images: Path) -> None:
    max_bytes, max_dimension = FileSettings().image_limits  # no provider named: the conservative limits
    assert (max_bytes, max_dimension) == (2 * 1024 * 1024, 8_000)
    seen = 0
    for path in _all_images(images):
        result = read_path(path)
        if path.name in HOSTILE:
            assert isinstance(result, UnreadableFile), path.name
            assert result.reason.startswith('image could not be read: ')
            assert HOSTILE[path.name] in result.reason
            continue
        assert isinstance(result, FittedImage), (path.name, result)
        assert len(result.data) <= max_bytes
        assert max(result.width, result.height) <= max_dimension
        assert result.media_type in ('image/png', 'image/jpeg', 'image/webp', 'image/gif')
        with Image.open(io.BytesIO(result.data)) as img:
            img.load()
            assert img.size == (result.width, result.height)
            assert Image.MIME[img.format] == result.media_type
        seen += 1
    assert seen >= 20


def test_unchanged_images_keep_their_bytes(images: Path) -> None:
    for name in (
        'pillow/hopper.png',
        'pillow/hopper.jpg',
        'pillow/hopper.webp',
        'pillow/hopper.gif',
        'large/page.png',
    ):
        data = (images / name).read_bytes()
        result = read_file(data, name=name)
        assert isinstance(result, FittedImage)
        assert result.data is data or result.data == data
        assert result.changes == ()
        assert result.manifest.endswith('image, unchanged')


def test_decompression_bomb_under_pillow_limit_uses_settings(images: Path) -> None:
    """A local pixel limit from settings applies before decoding, even below Pillow's global one."""
    result = read_path(
        images / 'large' / 'meadow_cube.jpg', settings=FileSettings(image_max_pixels=1_000_000)
    )
    assert isinstance(result, UnreadableFile)
    assert 'decompression bomb (2048x12288 = 25,165,824 pixels > 1,000,000 limit)' in result.reason


def test_exif_orientation_is_applied(images: Path) -> None:
    portrait = read_path(images / 'large' / 'portrait_8.jpg')
    assert isinstance(portrait, FittedImage)
    assert (portrait.original_width, portrait.original_height) == (600, 450)
    assert (portrait.width, portrait.height) == (450, 600)
    assert 'EXIF orientation applied' in portrait.changes

    # hopper_orientation_N.jpg store hopper rotated; applied orientation gives hopper back.
    with Image.open(images / 'pillow' / 'hopper.jpg') as reference:
        upright = reference.convert('RGB')
    for name in ('hopper_orientation_6.jpg', 'hopper_orientation_8.jpg'):
        fitted = read_path(images / 'pillow' / name)
        assert isinstance(fitted, FittedImage)
        with Image.open(io.BytesIO(fitted.data)) as out, Image.open(images / 'pillow' / name) as stored:
            diff_fitted = sum(ImageStat.Stat(ImageChops.difference(out.convert('RGB'), upright)).mean)
            diff_stored = sum(ImageStat.Stat(ImageChops.difference(stored.convert('RGB'), upright)).mean)
        assert diff_fitted < 20 < diff_stored, (name, diff_fitted, diff_stored)


def test_tall_image_keeps_aspect_ratio(images: Path) -> None:
    result = read_path(images / 'large' / 'meadow_cube.jpg')
    assert isinstance(result, FittedImage)
    assert result.height == 8_000
    assert result.height / result.width == pytest.approx(12288 / 2048, rel=0.01)
    assert 'resized 2048x12288 -> 1333x8000' in result.changes


@pytest.mark.parametrize(
    'name',
    [
        'large/meadow_cube.jpg',
        'large/iphone_hdr_half.png',
        'large/astronaut.png',
        'large/iphone_hdr_half_lossless.webp',
        'pillow/transparent.png',
    ],
)
def test_small_limits_force_the_iteration(images: Path, name: str) -> None:
    settings = FileSettings(image_max_bytes=100_000, image_max_dimension=512)
    result = read_path(images / name, settings=settings)
    assert isinstance(result, FittedImage)
    assert len(result.data) <= 100_000
    assert max(result.width, result.height) <= 512
    ratio = result.original_width / result.original_height
    assert result.width / result.height == pytest.approx(ratio, rel=0.02)
    with Image.open(io.BytesIO(result.data)) as img:
        assert img.size == (result.width, result.height)


def test_tiny_byte_limit_iterates_down(images: Path) -> None:
    result = read_path(images / 'large' / 'astronaut.png', settings=FileSettings(image_max_bytes=10_000))
    assert isinstance(result, FittedImage)
    assert len(result.data) <= 10_000
    assert any(c.startswith('resized 512x512 -> ') for c in result.changes)


def test_alpha_stays_png(images: Path) -> None:
    result = read_path(images / 'pillow' / 'transparent.png', settings=FileSettings(image_max_dimension=100))
    assert isinstance(result, FittedImage)
    assert result.media_type == 'image/png'
    with Image.open(io.BytesIO(result.data)) as img:
        assert img.mode == 'RGBA'


@pytest.mark.parametrize(('name', 'frames'), [('apng_delay.png', 5), ('iss634.gif', 42)])
def test_animation_becomes_first_frame(images: Path, name: str, frames: int) -> None:
    result = read_path(images / 'pillow' / name)
    assert isinstance(result, FittedImage)
    assert f'first frame of {frames}' in result.changes
    with Image.open(io.BytesIO(result.data)) as img:
        assert getattr(img, 'n_frames', 1) == 1


def test_cmyk_and_unsupported_formats_are_converted(images: Path) -> None:
    cmyk = read_path(images / 'pillow' / 'pil_sample_cmyk.jpg')
    assert isinstance(cmyk, FittedImage)
    assert 'converted CMYK to RGB' in cmyk.changes
    with Image.open(io.BytesIO(cmyk.data)) as img:
        assert img.mode == 'RGB'
    for name, source in (('hopper.bmp', 'BMP'), ('hopper.tif', 'TIFF'), ('avif_hopper.avif', 'AVIF')):
        result = read_path(images / 'pillow' / name)
        # Pillow 13 reads AVIF natively; if a build lacks it, the file must come back unreadable instead.
        if isinstance(result, UnreadableFile):
            assert source == 'AVIF'
            assert 'image could not be read' in result.reason
            continue
        assert isinstance(result, FittedImage)
        assert result.media_type == 'image/jpeg'
        assert f'converted {source} to JPEG' in result.changes


def test_image_named_wrongly_is_sniffed(images: Path) -> None:
    result = read_file((images / 'pillow' / 'hopper.png').read_bytes(), media_type='image/jpeg', name='x.jpg')
    assert isinstance(result, FittedImage)
    assert result.media_type == 'image/png'
