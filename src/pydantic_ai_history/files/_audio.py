"""Audio: WAV described and cut to the duration and size limits; other formats kept when small enough."""

from __future__ import annotations

import io
import wave

from ._manifest import human_size, label, unreadable
from ._results import FittedAudio, UnreadableFile
from ._settings import FileSettings

MIN_RATE = 1_000
MAX_RATE = 768_000
"""Sample rates outside this range are header lies, not audio."""


def fit_audio(
    data: bytes, media_type: str, name: str | None, settings: FileSettings
) -> FittedAudio | UnreadableFile:
    """Cut a WAV to `audio_max_seconds` and `audio_max_bytes` as a valid WAV; keep other audio if small."""
    if media_type == 'audio/wav':
        try:
            return _fit_wav(data, name, settings)
        except (wave.Error, EOFError, ValueError) as e:
            # e.g. WAVE_FORMAT_EXTENSIBLE or float samples, which `wave` cannot parse before Python 3.12.
            if len(data) > settings.audio_max_bytes:
                return _too_large(data, media_type, name, settings, f'WAV not parseable ({e})')
    if len(data) > settings.audio_max_bytes:
        return _too_large(data, media_type, name, settings, 'only WAV can be cut')
    manifest = f'{label(name)} ({human_size(len(data))}, {media_type}) -- audio, duration unknown'
    return FittedAudio('audio', name, media_type, data, None, None, None, len(data), False, manifest)


def _fit_wav(data: bytes, name: str | None, settings: FileSettings) -> FittedAudio:
    with wave.open(io.BytesIO(data), 'rb') as reader:
        params = reader.getparams()
        rate, channels = params.framerate, params.nchannels
        if not MIN_RATE <= rate <= MAX_RATE:
            # Durations follow from the rate: a header claiming 1 Hz turns 16 KB into hours.
            raise ValueError(f'implausible sample rate in the header ({rate:,} Hz)')
        frame_bytes = params.sampwidth * channels
        # The header's frame count can lie; the data actually present is the bound.
        frames = min(params.nframes, max(len(data) - 44, 0) // max(frame_bytes, 1))
        duration = frames / rate if rate else None
        max_frames = min(
            int(settings.audio_max_seconds * rate),
            max(settings.audio_max_bytes - 44, 0) // max(frame_bytes, 1),
        )
        described = f'{label(name)} ({human_size(len(data))}, WAV, {_describe(duration, rate, channels)})'
        if frames <= max_frames:
            return FittedAudio(
                'audio', name, 'audio/wav', data, duration, rate, channels, len(data), False, described
            )
        samples = reader.readframes(max_frames)
    out = io.BytesIO()
    with wave.open(out, 'wb') as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(params.sampwidth)
        writer.setframerate(rate)
        writer.writeframes(samples)
    cut = out.getvalue()
    kept = max_frames / rate
    manifest = f'{described} -- cut to the first {kept:.1f} s ({human_size(len(cut))})'
    return FittedAudio('audio', name, 'audio/wav', cut, kept, rate, channels, len(data), True, manifest)


def _describe(duration: float | None, rate: int, channels: int) -> str:
    length = 'unknown duration' if duration is None else f'{duration:.1f} s'
    return f'{length}, {rate:,} Hz, {"mono" if channels == 1 else f"{channels} channels"}'


def _too_large(
    data: bytes, media_type: str, name: str | None, settings: FileSettings, why: str
) -> UnreadableFile:
    reason = (
        f'audio too large: {human_size(len(data))} > {human_size(settings.audio_max_bytes)} limit ({why})'
    )
    return unreadable(name, media_type, len(data), reason)
