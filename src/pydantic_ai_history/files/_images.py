"""Images stay images: upright, in a format providers accept, within the byte and dimension limits."""

from __future__ import annotations

import io
import math
from dataclasses import replace

from PIL import Image, ImageOps, UnidentifiedImageError

from ._manifest import human_size, label, unreadable
from ._results import FittedImage, UnreadableFile
from ._settings import FileSettings

OUTPUT_TYPES = {'PNG': 'image/png', 'JPEG': 'image/jpeg', 'WEBP': 'image/webp', 'GIF': 'image/gif'}
_ORIENTATION = 0x0112
_MAX_ATTEMPTS = 24
_START_QUALITY = 85
_MIN_QUALITY = 55


class _Unreadable(Exception):
    pass


def fit_image(
    data: bytes, media_type: str, name: str | None, settings: FileSettings
) -> FittedImage | UnreadableFile:
    """Fit an image to the limits, or say why it could not be read; never raises for bad input."""
    try:
        return _fit(data, media_type, name, settings)
    except _Unreadable as e:
        reason = str(e)
    except Image.DecompressionBombError as e:
        reason = f'decompression bomb ({e})'
    except UnidentifiedImageError:
        reason = f'unsupported or unrecognized format ({media_type})'
        if media_type in ('image/heic', 'image/heif'):
            reason += '; Pillow needs the pillow-heif plugin for HEIC/HEIF'
    except Exception as e:  # Pillow raises OSError, ValueError, SyntaxError, EOFError... for broken files
        reason = f'{type(e).__name__}: {e}'
    return unreadable(name, media_type, len(data), f'image could not be read: {reason}')


def _fit(data: bytes, media_type: str, name: str | None, settings: FileSettings) -> FittedImage:
    max_bytes, max_dimension = settings.image_limits
    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
        # Checked from the header, before anything is decoded: this is the decompression-bomb guard.
        if width * height > settings.image_max_pixels:
            raise _Unreadable(
                f'decompression bomb ({width}x{height} = {width * height:,} pixels > '
                f'{settings.image_max_pixels:,} limit)'
            )
        source_format = img.format or media_type.rsplit('/', 1)[-1].upper()
        frames: int = getattr(img, 'n_frames', 1)
        orientation = img.getexif().get(_ORIENTATION, 1)
        upright = orientation in (1, None, 0)
        if (
            source_format in OUTPUT_TYPES
            and frames == 1
            and upright
            and img.mode != 'CMYK'
            and len(data) <= max_bytes
            and max(width, height) <= max_dimension
        ):
            img.load()  # a truncated file fails here rather than at the provider
            out_type = OUTPUT_TYPES[source_format]
            unchanged = FittedImage(
                'image', name, media_type, out_type, data, width, height, width, height, len(data), (), ''
            )
            return _described(unchanged, source_format)

        changes: list[str] = []
        if frames > 1:
            img.seek(0)
            changes.append(f'first frame of {frames}')
        if source_format == 'JPEG' and max(width, height) > max_dimension:
            # Let libjpeg decode at 1/2, 1/4 or 1/8 scale: far less memory for a large photo.
            scale = max_dimension / max(width, height)
            img.draft(img.mode, (math.ceil(width * scale), math.ceil(height * scale)))
        img.load()
        work = img if upright else ImageOps.exif_transpose(img)
        if not upright:
            changes.append('EXIF orientation applied')
        work, out_format, photo = _prepare(work, source_format, changes)
        out, work_size, quality, out_format = _encode_until_fits(
            work, out_format, photo, max_bytes, max_dimension
        )

    if out_format != source_format:
        changes.insert(0, f'converted {source_format} to {out_format}')
    shown_size = (height, width) if orientation in (5, 6, 7, 8) else (width, height)
    if work_size != shown_size:
        changes.append(f'resized {shown_size[0]}x{shown_size[1]} -> {work_size[0]}x{work_size[1]}')
    changes.append(f're-encoded {out_format}' + (f' q={quality}' if out_format in ('JPEG', 'WEBP') else ''))
    out_type = OUTPUT_TYPES[out_format]
    fitted = FittedImage(
        'image', name, media_type, out_type, out, *work_size, width, height, len(data), tuple(changes), ''
    )
    return _described(fitted, source_format)


def _prepare(img: Image.Image, source_format: str, changes: list[str]) -> tuple[Image.Image, str, bool]:
    """Pick the output mode and format: PNG for alpha, palette, line art; else JPEG (or WEBP)."""
    has_alpha = img.mode in ('RGBA', 'LA', 'PA', 'RGBa', 'La') or (
        img.mode == 'P' and 'transparency' in img.info
    )
    if img.mode == 'CMYK':
        changes.append('converted CMYK to RGB')
    if has_alpha:
        return img.convert('RGBA'), 'WEBP' if source_format == 'WEBP' else 'PNG', False
    if img.mode in ('I', 'I;16', 'I;16B', 'I;16L', 'I;16N'):
        # 16-bit grayscale: scale to 8 bits instead of letting convert() clip everything above 255.
        return img.convert('I').point(lambda v: v / 256).convert('L'), 'PNG', False
    if img.mode in ('1', 'L', 'P'):
        return img.convert('L' if img.mode in ('1', 'L') else 'RGB'), 'PNG', False
    rgb = img.convert('RGB') if img.mode != 'RGB' else img
    return rgb, source_format if source_format in ('JPEG', 'WEBP', 'PNG') else 'JPEG', True


def _encode_until_fits(
    img: Image.Image, out_format: str, photo: bool, max_bytes: int, max_dimension: int
) -> tuple[bytes, tuple[int, int], int, str]:
    """Encode, check, and shrink (lower quality first, then scale) until the result fits."""
    longest = max(img.size)
    scale = min(1.0, max_dimension / longest)
    quality = _START_QUALITY
    for _ in range(_MAX_ATTEMPTS):
        size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
        if max(size) > max_dimension:  # rounding up must not cross the limit
            size = (min(size[0], max_dimension), min(size[1], max_dimension))
        resized = img if size == img.size else img.resize(size, Image.Resampling.LANCZOS)
        encoded = _save(resized, out_format, quality)
        if len(encoded) <= max_bytes:
            with Image.open(io.BytesIO(encoded)) as check:
                if max(check.size) <= max_dimension:
                    return encoded, check.size, quality, out_format
        if out_format == 'PNG' and photo:
            out_format = 'JPEG'  # a photo that PNG cannot fit is a JPEG's job
            continue
        if out_format in ('JPEG', 'WEBP') and quality > _MIN_QUALITY:
            quality -= 10
            continue
        # Bytes scale roughly with pixel count: aim for the limit, with a margin and bounded steps.
        scale *= min(0.9, max(0.3, math.sqrt(max_bytes / len(encoded)) * 0.95))
    raise _Unreadable(f'could not fit within {human_size(max_bytes)} after {_MAX_ATTEMPTS} attempts')


def _save(img: Image.Image, out_format: str, quality: int) -> bytes:
    buffer = io.BytesIO()
    if out_format == 'JPEG':
        img.save(buffer, 'JPEG', quality=quality, optimize=True)
    elif out_format == 'WEBP':
        img.save(buffer, 'WEBP', quality=quality, method=4)
    else:
        img.save(buffer, 'PNG', optimize=False)
    return buffer.getvalue()


def _described(image: FittedImage, source_format: str) -> FittedImage:
    """`image` with its manifest line: what the image was and, when changed, what it is shown as."""
    size = f'{human_size(image.original_size_bytes)}, {source_format}'
    line = f'{label(image.name)} ({size}, {image.original_width}x{image.original_height}) -- image'
    if not image.changes:
        return replace(image, manifest=f'{line}, unchanged')
    shown = f'{image.media_type} {image.width}x{image.height} ({human_size(len(image.data))})'
    return replace(image, manifest=' '.join(f'{line} shown as {shown}: {"; ".join(image.changes)}'.split()))
