"""Small checks of downloaded audio for the sandbox tests: an MP3 frame walker and a WAV reader.

Independent of the sandbox's own probe, so the tests do not grade the sandbox with its own code.
"""

from __future__ import annotations

import io
import wave

MPEG1_LAYER3_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
MPEG2_LAYER3_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
SAMPLE_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def skip_id3v2(data: bytes) -> int:
    """Offset of the first audio frame (ID3v2 sizes are 7-bit 'syncsafe')."""
    if data[:3] != b"ID3":
        return 0
    size = (data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]
    return 10 + size + (10 if data[5] & 0x10 else 0)


def parse_header(header: bytes) -> tuple[int, int, int]:
    """(frame length in bytes, samples in the frame, sample rate) of a Layer III frame header."""
    b1, b2 = header[1], header[2]
    assert header[0] == 0xFF and b1 & 0xE0 == 0xE0, f"lost frame sync: {header.hex()}"
    version = (b1 >> 3) & 0x3  # 3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5
    assert version != 1, "reserved MPEG version"
    assert (b1 >> 1) & 0x3 == 1, "not Layer III"
    bitrate_index, rate_index, padding = b2 >> 4, (b2 >> 2) & 0x3, (b2 >> 1) & 0x1
    assert 0 < bitrate_index < 15 and rate_index < 3, f"bad header {header.hex()}"
    sample_rate = SAMPLE_RATES[version][rate_index]
    if version == 3:
        kbps, coefficient, samples = MPEG1_LAYER3_KBPS[bitrate_index], 144, 1152
    else:
        kbps, coefficient, samples = MPEG2_LAYER3_KBPS[bitrate_index], 72, 576
    return coefficient * kbps * 1000 // sample_rate + padding, samples, sample_rate


def mp3_duration(data: bytes) -> float:
    """Walk every frame (failing on garbage) and sum the samples they carry."""
    pos = skip_id3v2(data)
    samples = sample_rate = frames = 0
    while pos < len(data):
        if data[pos : pos + 3] == b"TAG" and len(data) - pos == 128:  # ID3v1 trailer
            break
        length, frame_samples, sample_rate = parse_header(data[pos : pos + 4])
        assert pos + length <= len(data), "truncated final frame"
        samples += frame_samples
        frames += 1
        pos += length
    assert frames, "no MP3 frames found"
    return samples / sample_rate


def wav_duration(data: bytes) -> float:
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", "not a WAV file"
    with wave.open(io.BytesIO(data), "rb") as reader:
        return reader.getnframes() / reader.getframerate()


def make_wav(seconds: float, sample_rate: int = 1000) -> bytes:
    """A quiet 8-bit mono WAV; a low rate keeps a many-minute file small enough to upload inline."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(1)
        writer.setframerate(sample_rate)
        writer.writeframes(b"\x80" * round(seconds * sample_rate))
    return buffer.getvalue()
