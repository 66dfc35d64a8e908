"""An audio file opened for analysis: what it is from its first bytes (never its name), and its samples as
capped streams of float blocks, either at the file's own rate and channels (loudness, true peak) or as a
low-rate mono copy (tempo, key, silence).

Every error names the file and says what it is: an HTML page saved as a song, an empty file, a format
miniaudio cannot decode, or audio that runs past the cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..archive.sniff import audio_suffix, head_of
from ..archive.waveform import DecodeCapError, decode_cap

BLOCK_FRAMES = 65_536
"""Frames decoded at a time: about 1.5 s at 44.1 kHz, half a megabyte of stereo float32."""
MAX_CHANNELS = 2
"""Songs are stereo at most: more channels are mixed down to two by miniaudio."""


class AudioFileError(ValueError):
    """The file cannot be analysed: the message names it and says what it is."""


@dataclass(frozen=True)
class AudioFile:
    path: Path
    format: str
    """What the bytes are, whatever the name says: "mp3", "wav", "flac" or "ogg"."""
    sample_rate: int
    channels: int
    """Channels decoded (at most `MAX_CHANNELS`)."""


def open_audio(path: str | Path) -> AudioFile:
    """The file's format (sniffed from its first bytes), rate and channels; `AudioFileError` names the file."""
    import miniaudio

    path = Path(path)
    try:
        size = path.stat().st_size
        head = head_of(path)
    except OSError as exc:
        raise AudioFileError(f"cannot analyse {path}: {exc.strerror or exc}") from exc
    if size == 0:
        raise AudioFileError(f"cannot analyse {path}: the file is empty (0 bytes), not audio")
    suffix = audio_suffix(head)
    if suffix is None:
        what = "an HTML page" if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<") else "not audio"
        raise AudioFileError(f"cannot analyse {path}: it is {what} ({size} bytes), not an audio file")
    kind = suffix[1:]
    info_of = {
        "mp3": miniaudio.mp3_get_file_info,
        "wav": miniaudio.wav_get_file_info,
        "flac": miniaudio.flac_get_file_info,
        "ogg": miniaudio.vorbis_get_file_info,
    }.get(kind)
    if info_of is None:
        raise AudioFileError(f"cannot analyse {path}: it is {kind.upper()} audio, which miniaudio cannot decode")
    try:
        info = info_of(str(path))
    except miniaudio.DecodeError as exc:
        raise AudioFileError(f"cannot analyse {path}: its {kind.upper()} header cannot be read ({exc})") from exc
    if not info.sample_rate or not info.nchannels:
        raise AudioFileError(f"cannot analyse {path}: its {kind.upper()} header has no sample rate or channels")
    return AudioFile(path, kind, int(info.sample_rate), max(1, min(MAX_CHANNELS, int(info.nchannels))))


def blocks(
    audio: AudioFile, *, rate: int | None = None, mono: bool = False, max_seconds: float | None = None
) -> Iterator[Any]:
    """The samples as float32 blocks (frames x channels), at the file's own rate unless `rate` is given, mixed
    to one channel if `mono`; `DecodeCapError` once they run past the cap (by default the longest song)."""
    import miniaudio
    import numpy as np

    rate = rate or audio.sample_rate
    channels = 1 if mono else audio.channels
    seconds = decode_cap(None) if max_seconds is None else max_seconds
    limit = int(seconds * rate)
    decoded = 0
    try:
        stream = miniaudio.stream_file(
            str(audio.path),
            output_format=miniaudio.SampleFormat.FLOAT32,
            nchannels=channels,
            sample_rate=rate,
            frames_to_read=BLOCK_FRAMES,
        )
    except miniaudio.DecodeError as exc:
        raise AudioFileError(f"cannot analyse {audio.path}: its {audio.format.upper()} data cannot be decoded") from exc
    try:
        for block in stream:
            frames = np.frombuffer(block, dtype=np.float32).reshape(-1, channels)
            if not np.isfinite(frames).all():  # a float file's NaN or infinite samples carry no sound: silence
                frames = np.nan_to_num(frames, nan=0.0, posinf=0.0, neginf=0.0)
            decoded += len(frames)
            if decoded > limit:
                raise DecodeCapError(f"{audio.path} not analysed: the audio runs past {seconds:.0f} s")
            yield frames
    except miniaudio.DecodeError as exc:
        raise AudioFileError(f"cannot analyse {audio.path}: its {audio.format.upper()} data cannot be decoded") from exc
    finally:
        stream.close()


def low_rate_mono(audio: AudioFile, rate: int, *, max_seconds: float | None = None) -> Any:
    """The whole file as one float32 mono array at `rate` (miniaudio's resampler): tempo, key and silence."""
    import numpy as np

    parts = [block[:, 0].copy() for block in blocks(audio, rate=rate, mono=True, max_seconds=max_seconds)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
