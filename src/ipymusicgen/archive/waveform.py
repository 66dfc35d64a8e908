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


def _path_of(song_or_path: Any, find: Callable[[str], Path | None] | None = None) -> Path:
    """A file path from a path, or from a record/task id that `find` knows the archived file of."""
    looks_like_path = isinstance(song_or_path, str) and ("/" in song_or_path or "." in song_or_path)
    if isinstance(song_or_path, Path) or looks_like_path:
        if Path(song_or_path).is_file():
            return Path(song_or_path)
        raise FileNotFoundError(f"No audio file at {str(song_or_path)[:200]!r}")
    task_id = song_or_path if isinstance(song_or_path, str) else getattr(song_or_path, "id", None)
    if task_id and find is not None:
        found = find(task_id)
        if found is not None:
            return found
    raise FileNotFoundError(f"No audio file for {str(song_or_path)[:200]!r}: give a path or an archived song.")


def decode_frames(path: str | Path) -> tuple[np.ndarray, int]:
    """The file's samples as int16, as frames x channels, and its sample rate."""
    import miniaudio
    import numpy as np

    info = miniaudio.get_file_info(str(path))
    channels = max(1, info.nchannels)
    decoded = miniaudio.decode_file(
        str(path), output_format=miniaudio.SampleFormat.SIGNED16, nchannels=channels, sample_rate=info.sample_rate
    )
    samples = np.frombuffer(decoded.samples, dtype=np.int16)
    return samples[: len(samples) - len(samples) % channels].reshape(-1, channels), info.sample_rate


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
    frames, _ = decode_frames(_path_of(song_or_path, find))
    return peaks_of_samples(frames, points)
