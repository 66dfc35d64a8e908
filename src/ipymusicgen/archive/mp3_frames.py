"""An MP3's length from its frames, not its Xing header: walk the Layer III frame headers (no decoding), and a
byte source that blanks the header's tag, for a second decode when the header lied.

A Xing/Info header's frame count tells decoders where the song ends (for gapless playback); miniaudio's MP3
decoder stops there, while a browser plays every frame. A header that claims too few frames would draw a
waveform of part of the song, stretched over all of it.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import miniaudio

MPEG1_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
MPEG2_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
RATES = MappingProxyType({3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)})
"""Sample rates by MPEG version bits (3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5)."""
HEAD_BYTES = 64 * 1024
"""Where the first frame must start (after an ID3v2 tag of at most this much plus its own size)."""


def frame_header(header: bytes) -> tuple[int, int, int] | None:
    """(frame length in bytes, samples in the frame, sample rate) of a Layer III header, or None if it is not one."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version, layer = (header[1] >> 3) & 0x3, (header[1] >> 1) & 0x3
    bitrate_index, rate_index, padding = header[2] >> 4, (header[2] >> 2) & 0x3, (header[2] >> 1) & 0x1
    if version == 1 or layer != 1 or not 0 < bitrate_index < 15 or rate_index == 3:
        return None
    rate = RATES[version][rate_index]
    if version == 3:
        return 144 * MPEG1_KBPS[bitrate_index] * 1000 // rate + padding, 1152, rate
    return 72 * MPEG2_KBPS[bitrate_index] * 1000 // rate + padding, 576, rate


def first_frame(handle: Any) -> int | None:
    """Offset of the first frame: after an ID3v2 tag (its size is 7-bit 'syncsafe'), at the first frame sync."""
    head = handle.read(10)
    start = 0
    if head[:3] == b"ID3" and len(head) == 10:
        start = 10 + ((head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]) + (10 if head[5] & 0x10 else 0)
    handle.seek(start)
    window = handle.read(HEAD_BYTES)
    for at in range(len(window) - 3):
        if window[at] == 0xFF and frame_header(window[at : at + 4]) is not None:
            return start + at
    return None


def mp3_frames(path: str | Path) -> tuple[int | None, float | None]:
    """(offset of the Xing/Info tag, seconds of audio the other frames hold), by walking the frame headers.

    (None, None) for a file that is not an MP3 with a Xing/Info header: nothing to check (no header to lie).
    The walk stops at the first thing that is not a frame (an ID3v1 or APE tag at the end, or garbage).
    """
    with open(path, "rb") as handle:
        if handle.read(3) != b"ID3" and not _sync_start(handle):  # a WAV, FLAC or OGG: no Xing header
            return None, None
        handle.seek(0)
        start = first_frame(handle)
        if start is None:
            return None, None
        handle.seek(start)
        first = handle.read(200)
        parsed = frame_header(first)
        tag = max(first.find(b"Xing", 0, 60), first.find(b"Info", 0, 60))
        if parsed is None or tag < 0:
            return None, None
        samples, rate, at = 0, parsed[2], start + parsed[0]
        while True:
            handle.seek(at)
            found = frame_header(handle.read(4))
            if found is None:
                break
            length, count, rate = found
            samples += count
            at += length
    return start + tag, samples / rate


def _sync_start(handle: Any) -> bool:
    handle.seek(0)
    head = handle.read(2)
    return len(head) == 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0


class BlankTagSource(miniaudio.StreamableSource):
    """The file's bytes in order, the 4-byte Xing/Info tag at `tag` blanked: the decoder then takes that frame for
    an ordinary (silent) one and decodes every frame that follows, as a player does. (Leaving the frame out
    instead loses the next frames' bit reservoir: the decoder drops them.)"""

    def __init__(self, path: str | Path, tag: int) -> None:
        self._handle = open(path, "rb")  # noqa: SIM115 - closed by close(), as a StreamableSource is
        self._tag = tag

    def read(self, num_bytes: int) -> bytes:
        at = self._handle.tell()
        data = self._handle.read(num_bytes)
        low, high = max(self._tag, at), min(self._tag + 4, at + len(data))
        if low >= high:
            return data
        return data[: low - at] + b"\0" * (high - low) + data[high - at :]

    def close(self) -> None:
        self._handle.close()
