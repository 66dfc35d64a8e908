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

_MPEG1_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_MPEG2_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


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
    pos, samples, rate = _skip_id3(data), 0, 0
    while pos + 4 <= len(data):
        b0, b1, b2 = data[pos], data[pos + 1], data[pos + 2]
        if b0 != 0xFF or b1 & 0xE0 != 0xE0:
            if data[pos : pos + 3] == b"TAG":
                break
            return None
        version, layer = (b1 >> 3) & 0x3, (b1 >> 1) & 0x3
        bitrate_index, rate_index, padding = b2 >> 4, (b2 >> 2) & 0x3, (b2 >> 1) & 0x1
        if version == 1 or layer != 1 or not 0 < bitrate_index < 15 or rate_index == 3:
            return None
        rate = _RATES[version][rate_index]
        if version == 3:
            kbps, coefficient, frame_samples = _MPEG1_KBPS[bitrate_index], 144, 1152
        else:
            kbps, coefficient, frame_samples = _MPEG2_KBPS[bitrate_index], 72, 576
        pos += coefficient * kbps * 1000 // rate + padding
        samples += frame_samples
    return samples / rate if rate else None


def audio_seconds(data: bytes) -> float | None:
    """Length of a WAV or MP3 file in seconds, or None if it is neither."""
    return wav_seconds(data) or mp3_seconds(data)
