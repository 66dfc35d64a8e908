"""Crafted audio for the archive's memory figure and its tests: a FLAC "bomb" of a few kilobytes that claims
and decodes to hours of sound (each frame is two CONSTANT subframes: 65,535 samples in 17 bytes)."""

from __future__ import annotations

BLOCK = 65_535
SAMPLE_RATE = 44_100


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _utf8_number(value: int) -> bytes:
    """FLAC's UTF-8-like coding of the frame number."""
    if value < 0x80:
        return bytes([value])
    if value < 0x800:
        return bytes([0xC0 | (value >> 6), 0x80 | (value & 0x3F)])
    return bytes([0xE0 | (value >> 12), 0x80 | ((value >> 6) & 0x3F), 0x80 | (value & 0x3F)])


def _frame(number: int, level: int) -> bytes:
    header = bytes([0xFF, 0xF8, (0b0111 << 4) | 0b1001, (0b0001 << 4) | (0b100 << 1)])
    header += _utf8_number(number) + (BLOCK - 1).to_bytes(2, "big")
    header += bytes([_crc8(header)])
    value = level.to_bytes(2, "big", signed=True)
    body = header + b"\x00" + value + b"\x00" + value  # two CONSTANT subframes (type 000000, no wasted bits)
    return body + _crc16(body).to_bytes(2, "big")


def flac_bomb(frames: int = 6000, level: int = 12_000) -> bytes:
    """A valid FLAC stream of `frames` x 65,535 stereo samples (6,000 frames: about 2.5 hours, 1.6 GB of PCM
    decoded) in about 100 KB. Its STREAMINFO tells the truth about the length, so only a cap stops a decoder."""
    total = frames * BLOCK
    info = BLOCK.to_bytes(2, "big") * 2 + (0).to_bytes(3, "big") * 2
    packed = (SAMPLE_RATE << 44) | ((2 - 1) << 41) | ((16 - 1) << 36) | total
    info += packed.to_bytes(8, "big") + bytes(16)
    block_header = bytes([0x80]) + len(info).to_bytes(3, "big")  # last metadata block, STREAMINFO
    return b"fLaC" + block_header + info + b"".join(_frame(n, level) for n in range(frames))
