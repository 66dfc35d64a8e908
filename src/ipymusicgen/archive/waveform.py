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
    raise FileNotFoundError(
        f"No audio file for {str(song_or_path)[:200]!r}: give a path or an archived song (a song is archived a "
        "moment after it finishes: client.wait(ids, archived=True) waits for that)."
    )


MAX_SONG_SECONDS = 8 * 60
"""The longest song any model makes (8 minutes)."""
DECODE_MARGIN_SECONDS = 60.0
DECODE_RATE = 11_025
"""Peaks are drawn from a mono stream at this rate: plenty for 400 points, and a quarter of the work."""
BLOCK_FRAMES = 8192
PAIRS_PER_POINT = 4
"""Kept min/max pairs per drawn point (at least; at most twice that): each point then gathers four to eight
whole pairs, so a bucket's edges land within a quarter of a bucket of where the time says."""


class DecodeCapError(ValueError):
    """The file decodes to more than its cap (a crafted file, or far longer than the service said)."""


def decode_cap(reported_seconds: float | None) -> float:
    """Seconds of audio worth decoding: twice what the service reported, never more than the longest song a
    model makes plus a margin (a 100 KB crafted FLAC can claim hours)."""
    ceiling = MAX_SONG_SECONDS + DECODE_MARGIN_SECONDS
    if reported_seconds is None or not reported_seconds > 0:
        return ceiling
    return min(2 * float(reported_seconds) + 1.0, ceiling)


class _PairReducer:
    """Min/max pairs of a stream whose length is known only at its end (an MP3 without a Xing header says
    nothing): pairs start one frame wide, and whenever they outnumber the budget, neighbours merge and the
    step doubles. So the step always fits the length decoded so far, memory stays at the budget, and the
    final pairs split into buckets by frames actually decoded, never by a header's claim."""

    def __init__(self, points: int) -> None:
        import numpy as np

        self.budget = 2 * PAIRS_PER_POINT * max(1, points)
        self.step = 1
        self.lows = np.zeros(0, dtype=np.int16)
        self.highs = np.zeros(0, dtype=np.int16)
        self.carry: tuple[int, int, int] | None = None  # (low, high, frames) of a step not yet whole

    def add(self, samples: np.ndarray) -> None:
        import numpy as np

        if self.carry is not None:  # finish the partial step with the block's first frames
            low, high, frames = self.carry
            head = samples[: self.step - frames]
            low, high, frames = min(low, int(head.min())), max(high, int(head.max())), frames + len(head)
            samples = samples[len(head) :]
            self.carry = None if frames == self.step else (low, high, frames)
            if self.carry is None:
                self._append(np.array([low], dtype=np.int16), np.array([high], dtype=np.int16))
        whole = len(samples) // self.step * self.step
        if whole:
            steps = samples[:whole].reshape(-1, self.step)
            self._append(steps.min(axis=1), steps.max(axis=1))
        rest = samples[whole:]
        if len(rest):
            self.carry = (int(rest.min()), int(rest.max()), len(rest))
        while len(self.lows) > self.budget:  # only once the block is cut: the carry is then the last frames
            self._merge()

    def _append(self, lows: np.ndarray, highs: np.ndarray) -> None:
        import numpy as np

        self.lows = np.concatenate([self.lows, lows])
        self.highs = np.concatenate([self.highs, highs])

    def _merge(self) -> None:
        """Pairs of pairs become one pair of a doubled step; an odd last pair joins the carry (still whole
        frames in order: it came before the carry's, and together they are less than the new step)."""

        if len(self.lows) % 2:
            low, high = int(self.lows[-1]), int(self.highs[-1])
            if self.carry is not None:
                c_low, c_high, c_frames = self.carry
                self.carry = (min(low, c_low), max(high, c_high), self.step + c_frames)
            else:
                self.carry = (low, high, self.step)
            self.lows, self.highs = self.lows[:-1], self.highs[:-1]
        self.lows = self.lows.reshape(-1, 2).min(axis=1)
        self.highs = self.highs.reshape(-1, 2).max(axis=1)
        self.step *= 2

    def frames(self) -> int:
        return len(self.lows) * self.step + (self.carry[2] if self.carry else 0)

    def peaks(self, points: int) -> np.ndarray:
        """The pairs split into `points` buckets by frame position (a partial last step counts its frames)."""
        import numpy as np

        lows, highs = self.lows, self.highs
        ends = np.arange(1, len(lows) + 1, dtype=np.int64) * self.step
        if self.carry is not None:
            lows = np.append(lows, np.int16(self.carry[0]))
            highs = np.append(highs, np.int16(self.carry[1]))
            ends = np.append(ends, self.frames())
        return bucket_peaks(lows, highs, ends, points)


def bucket_peaks(lows: np.ndarray, highs: np.ndarray, ends: np.ndarray, points: int) -> np.ndarray:
    """Min/max per bucket as floats in [-1, 1], shape (points, 2), from int16 pairs ending at frames `ends`.

    Bucket i covers frames [i*total/points, (i+1)*total/points) and starts at the pair holding its first frame,
    so buckets follow time; fewer pairs than points stretch (a pair spans several buckets), never pad.
    """
    import numpy as np

    points = max(1, min(int(points), MAX_POINTS))
    result = np.zeros((points, 2), dtype=np.float32)
    total = int(ends[-1]) if len(ends) else 0
    if total == 0:
        return result
    first_frames = np.arange(points, dtype=np.int64) * total // points
    starts = np.searchsorted(ends, first_frames, side="right")
    result[:, 0] = np.minimum.reduceat(lows, starts) / 32768.0
    result[:, 1] = np.maximum.reduceat(highs, starts) / 32767.0
    return np.clip(result, -1.0, 1.0)


def stream_peaks(path: str | Path, points: int = DEFAULT_POINTS, *, max_seconds: float | None = None) -> np.ndarray:
    """Peaks computed while decoding, block by block: the PCM is never held, and decoding stops at the cap.

    Buckets follow the frames actually decoded (not a header's length, which an MP3 may lack), so peaks and
    time agree within a bucket for a 3-second clip and an 8-minute song alike. An MP3 whose Xing header claims
    fewer frames than the file holds (the decoder stops where the header says, a player does not) is decoded a
    second time with that header blanked. Memory stays a few blocks plus a few thousand pairs whatever the file
    claims; `DecodeCapError` when the audio runs past `max_seconds` (by default the longest song plus a margin).
    """
    import miniaudio

    from .mp3_frames import BlankTagSource, mp3_frames  # miniaudio is loaded only when something is decoded

    limit = int((decode_cap(None) if max_seconds is None else max_seconds) * DECODE_RATE)
    reducer = _decode_into(
        _PairReducer(points),
        miniaudio.stream_file(str(path), frames_to_read=BLOCK_FRAMES, **_decode_as()),
        limit,
    )
    tag, seconds = mp3_frames(path)
    if tag is not None and seconds is not None and seconds - reducer.frames() / DECODE_RATE > HEADER_SLACK_SECONDS:
        with BlankTagSource(path, tag) as source:  # the header lied: the frames themselves say how long
            stream = miniaudio.stream_any(source, miniaudio.FileFormat.MP3, frames_to_read=BLOCK_FRAMES, **_decode_as())
            reducer = _decode_into(_PairReducer(points), stream, limit)
    return reducer.peaks(points)


HEADER_SLACK_SECONDS = 0.2
"""Decoded audio may be this much shorter than the MP3's frames (encoder delay and padding are ~0.05 s)."""


def _decode_as() -> dict[str, Any]:
    import miniaudio

    return {"output_format": miniaudio.SampleFormat.SIGNED16, "nchannels": 1, "sample_rate": DECODE_RATE}


def _decode_into(reducer: _PairReducer, stream: Any, limit: int) -> _PairReducer:
    """Feed a miniaudio stream's blocks to `reducer`; `DecodeCapError` past `limit` frames. Closes the stream."""
    import numpy as np

    frames = 0
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
            reducer.add(samples)
    finally:
        stream.close()
    return reducer


def peaks_of_samples(frames: np.ndarray, points: int = DEFAULT_POINTS) -> np.ndarray:
    """Min/max per bucket of int16 frames (frames x channels) as floats in [-1, 1], shape (points, 2)."""
    import numpy as np

    low = frames.min(axis=1) if frames.ndim == 2 else frames
    high = frames.max(axis=1) if frames.ndim == 2 else frames
    return bucket_peaks(low, high, np.arange(1, len(frames) + 1, dtype=np.int64), points)


def waveform(
    song_or_path: Any, points: int = DEFAULT_POINTS, *, find: Callable[[str], Path | None] | None = None
) -> np.ndarray:
    """Peak envelope of a song: a numpy array of shape (points, 2), min and max per bucket, in [-1, 1].

    `song_or_path` is an audio file path (MP3, WAV, FLAC, Vorbis) or a song (record or task id) whose
    archived file `find(task_id)` returns (`ipymusicgen.waveform` looks in the library in use).
    """
    return stream_peaks(song_path(song_or_path, find), points)
