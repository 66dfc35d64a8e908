"""How long an uploaded audio file is: `data:` URLs decoded, WAV and MP3 measured, stdlib only.

The `upload` actions need a duration (and `upload_extend` refuses more than 8 minutes), but the
sandbox must never fetch from the internet, so uploads come inline as `data:` URLs.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from urllib.parse import unquote_to_bytes

MAX_DATA_BYTES = 64 * 1024 * 1024


def decode_data_url(url: str) -> bytes:
    """The bytes of a `data:[type][;base64],payload` URL; ValueError if it is not one."""
    if not url.startswith("data:") or "," not in url:
        raise ValueError("not a data: URL")
    header, payload = url[5:].split(",", 1)
    if len(payload) > MAX_DATA_BYTES * 4 // 3 + 4:
        raise ValueError(f"data: URL larger than {MAX_DATA_BYTES // (1024 * 1024)} MB")
    if header.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"bad base64 in data: URL ({exc})") from None
    return unquote_to_bytes(payload)


def wav_seconds(data: bytes) -> float | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            rate = reader.getframerate()
            return reader.getnframes() / rate if rate else None
    except (wave.Error, EOFError):
        return None


def _skip_id3(data: bytes) -> int:
    if data[:3] != b"ID3" or len(data) < 10:
        return 0
    size = (data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]
    return 10 + size + (10 if data[5] & 0x10 else 0)


def mp3_seconds(data: bytes) -> float | None:
    """Sum the samples of every Layer III frame; None if the data is not a clean frame sequence."""
    # In here, not at the top: mp3_frames loads miniaudio, which the sandbox needs only when an MP3 is probed.
    from ..archive.mp3_frames import frame_header

    pos, samples, rate = _skip_id3(data), 0, 0
    while pos + 4 <= len(data):
        frame = frame_header(data[pos : pos + 4])
        if frame is None:
            if data[pos : pos + 3] == b"TAG":
                break
            return None
        length, frame_samples, rate = frame
        pos += length
        samples += frame_samples
    return samples / rate if rate else None


def audio_seconds(data: bytes) -> float | None:
    """Length of a WAV or MP3 file in seconds, or None if it is neither."""
    return wav_seconds(data) or mp3_seconds(data)
