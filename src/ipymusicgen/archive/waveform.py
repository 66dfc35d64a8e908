"""Waveform peaks of a song: min/max per bucket, in [-1, 1], decoded with miniaudio (no ffmpeg).

Computed once when a song is archived and stored with it (`library_store`), so a library of thousands
of songs draws its waveforms without decoding anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

DEFAULT_POINTS = 400
MAX_POINTS = 10_000


def task_id_of(song_or_path: Any) -> str | None:
    """The task id meant (a record's, or a bare id), or None when a file path is meant (a Path, or text with a
    `/` or a `.` in it: task ids have neither)."""
    if isinstance(song_or_path, Path) or (
        isinstance(song_or_path, str) and ("/" in song_or_path or "." in song_or_path)
    ):
        return None
    found = song_or_path if isinstance(song_or_path, str) else getattr(song_or_path, "id", None)
    return str(found) if found else None


def song_path(song_or_path: Any, find: Callable[[str], Path | None] | None = None) -> Path:
    """A file path from a path, or from a record/task id that `find` knows the archived file of."""
    task_id = task_id_of(song_or_path)
    if task_id is None and isinstance(song_or_path, str | Path):
        if Path(song_or_path).is_file():
            return Path(song_or_path)
        raise FileNotFoundError(f"No audio file at {str(song_or_path)[:200]!r}")
    if task_id and find is not None:
        found = find(task_id)
        if found is not None:
            return found
    raise FileNotFoundError(f"No audio file for {str(song_or_path)[:200]!r}: give a path or an archived song.")


MAX_SONG_SECONDS = 8 * 60
"""The longest song any model makes (8 minutes)."""
DECODE_MARGIN_SECONDS = 60.0
DECODE_RATE = 11_025
"""Peaks are drawn from a mono stream at this rate: plenty for 400 points, and a quarter of the work."""
BLOCK_FRAMES = 8192
STEP_FRAMES = 256
"""Frames per kept min/max pair: 8 minutes keep about 21,000 pairs (84 KB), enough for any drawing."""


class DecodeCapError(ValueError):
    """The file decodes to more than its cap (a crafted file, or far longer than the service said)."""


def decode_cap(reported_seconds: float | None) -> float:
    """Seconds of audio worth decoding: twice what the service reported, never more than the longest song a
    model makes plus a margin (a 100 KB crafted FLAC can claim hours)."""
    ceiling = MAX_SONG_SECONDS + DECODE_MARGIN_SECONDS
    if reported_seconds is None or not reported_seconds > 0:
        return ceiling
    return min(2 * float(reported_seconds) + 1.0, ceiling)


def stream_peaks(path: str | Path, points: int = DEFAULT_POINTS, *, max_seconds: float | None = None) -> np.ndarray:
    """Peaks computed while decoding, block by block: the PCM is never held, and decoding stops at the cap.

    Memory stays a few blocks plus two numbers per block whatever the file claims; `DecodeCapError` when the
    audio runs past `max_seconds` (by default the longest song plus a margin).
    """
    import miniaudio
    import numpy as np

    limit = int((decode_cap(None) if max_seconds is None else max_seconds) * DECODE_RATE)
    lows: list[int] = []
    highs: list[int] = []
    frames = 0
    stream = miniaudio.stream_file(
        str(path),
        output_format=miniaudio.SampleFormat.SIGNED16,
        nchannels=1,
        sample_rate=DECODE_RATE,
        frames_to_read=BLOCK_FRAMES,
    )
    try:
        for block in stream:
            samples = np.frombuffer(block, dtype=np.int16)
            if not len(samples):
                continue
            frames += len(samples)
            if frames > limit:
                raise DecodeCapError(
                    f"no waveform: the audio runs past {limit / DECODE_RATE:.0f} s, more than the song's length allows"
                )
            for start in range(0, len(samples), STEP_FRAMES):  # a min/max pair per step: 23 ms of sound
                step = samples[start : start + STEP_FRAMES]
                lows.append(int(step.min()))
                highs.append(int(step.max()))
    finally:
        stream.close()
    return peaks_of_samples(np.array([lows, highs], dtype=np.int16).T.reshape(-1, 2), points)


def peaks_of_samples(frames: np.ndarray, points: int = DEFAULT_POINTS) -> np.ndarray:
    """Min/max per bucket of int16 frames (frames x channels) as floats in [-1, 1], shape (points, 2)."""
    import numpy as np

    points = max(1, min(int(points), MAX_POINTS))
    result = np.zeros((points, 2), dtype=np.float32)
    count = len(frames)
    if count == 0:
        return result
    low = frames.min(axis=1) if frames.ndim == 2 else frames
    high = frames.max(axis=1) if frames.ndim == 2 else frames
    used = min(points, count)
    starts = (np.arange(used, dtype=np.int64) * count) // used
    result[:used, 0] = np.minimum.reduceat(low, starts) / 32768.0
    result[:used, 1] = np.maximum.reduceat(high, starts) / 32767.0
    if used < points:  # a file shorter than the points asked: repeat the last bucket rather than invent silence
        result[used:] = result[used - 1]
    return np.clip(result, -1.0, 1.0)


def waveform(
    song_or_path: Any, points: int = DEFAULT_POINTS, *, find: Callable[[str], Path | None] | None = None
) -> np.ndarray:
    """Peak envelope of a song: a numpy array of shape (points, 2), min and max per bucket, in [-1, 1].

    `song_or_path` is an audio file path (MP3, WAV, FLAC, Vorbis) or a song (record or task id) whose
    archived file `find(task_id)` returns (`ipymusicgen.waveform` looks in the library in use).
    """
    return stream_peaks(song_path(song_or_path, find), points)
