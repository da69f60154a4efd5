"""Audio: WAVs are described and cut as valid WAVs; other formats pass under the byte cap."""

from __future__ import annotations

import io
import math
import struct
import wave

from pydantic_ai_history.files import FileSettings, FittedAudio, UnreadableFile, read_file


def _wav(seconds: float, rate: int = 8_000, channels: int = 1) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, 'wb') as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        frames = int(seconds * rate)
        tone = [int(8_000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(rate)]
        samples = b''.join(struct.pack('<h', tone[i % rate]) * channels for i in range(frames))
        writer.writeframes(samples)
    return buffer.getvalue()


def test_long_wav_is_cut_to_a_valid_wav() -> None:
    data = _wav(60)
    result = read_file(data, name='call.wav')
    assert isinstance(result, FittedAudio)
    assert result.truncated
    assert result.duration_seconds == 30.0
    assert (result.sample_rate, result.channels) == (8_000, 1)
    assert result.original_size_bytes == len(data)
    with wave.open(io.BytesIO(result.data), 'rb') as reader:
        assert reader.getnframes() == 30 * 8_000
        assert reader.getframerate() == 8_000
        assert reader.readframes(10) == data[44 : 44 + 20]
    assert '60.0 s' in result.manifest
    assert 'cut to the first 30.0 s' in result.manifest


def test_short_wav_is_unchanged() -> None:
    data = _wav(2, channels=2)
    result = read_file(data, media_type='audio/x-wav')
    assert isinstance(result, FittedAudio)
    assert not result.truncated
    assert result.data == data
    assert result.duration_seconds == 2.0
    assert result.channels == 2


def test_wav_cut_by_bytes() -> None:
    result = read_file(_wav(10), name='a.wav', settings=FileSettings(audio_max_bytes=40_044))
    assert isinstance(result, FittedAudio)
    assert result.truncated
    assert len(result.data) <= 40_044
    assert result.duration_seconds == 20_000 / 8_000


def test_other_audio_kept_or_refused_by_size() -> None:
    mp3 = b'ID3\x04\x00\x00\x00\x00\x00\x00' + bytes(5_000)
    kept = read_file(mp3, name='song.mp3')
    assert isinstance(kept, FittedAudio)
    assert kept.media_type == 'audio/mpeg'
    assert kept.duration_seconds is None
    assert not kept.truncated
    refused = read_file(mp3, name='song.mp3', settings=FileSettings(audio_max_bytes=1_000))
    assert isinstance(refused, UnreadableFile)
    assert refused.reason.startswith('audio too large:')
