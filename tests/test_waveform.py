"""Waveform peaks: min/max per bucket in [-1, 1], from MP3 and WAV files, decoded with miniaudio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ipymusicgen.archive.waveform import peaks_of_samples, waveform
from ipymusicgen.sandbox.audio import SAMPLE_RATE, encode_mp3, encode_wav, render_song


@pytest.fixture(scope="module")
def song(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wave") / "song.mp3"
    path.write_bytes(render_song("waveform test", seconds=6, vocal=True)[0])
    return path


def test_shape_range_and_points(song: Path) -> None:
    peaks = waveform(song)
    assert peaks.shape == (400, 2) and peaks.dtype == np.float32
    assert (peaks >= -1).all() and (peaks <= 1).all()
    assert (peaks[:, 0] <= peaks[:, 1]).all()
    assert peaks[:, 1].max() > 0.3 and peaks[:, 0].min() < -0.3  # a song, not silence
    assert waveform(song, points=64).shape == (64, 2)
    assert waveform(str(song), points=1).shape == (1, 2)


def test_a_loud_half_and_a_quiet_half_show_as_such(tmp_path: Path) -> None:
    seconds = 2
    t = np.arange(seconds * SAMPLE_RATE) / SAMPLE_RATE
    tone = np.sin(2 * np.pi * 440 * t)
    tone[: len(t) // 2] *= 0.1
    for name, data in (("tone.wav", encode_wav(tone, SAMPLE_RATE)), ("tone.mp3", encode_mp3(tone, SAMPLE_RATE))):
        path = tmp_path / name
        path.write_bytes(data)
        peaks = waveform(path, points=10)
        assert peaks[1:4, 1].max() < 0.2, name
        assert peaks[6:9, 1].min() > 0.7 and peaks[6:9, 0].max() < -0.7, name


def test_short_and_empty_inputs() -> None:
    assert peaks_of_samples(np.zeros((0, 1), dtype=np.int16)).shape == (400, 2)
    few = np.array([[32767], [-32768], [0]], dtype=np.int16)
    peaks = peaks_of_samples(few, points=8)
    assert peaks.shape == (8, 2) and peaks.max() == 1.0 and peaks.min() == -1.0


def test_unknown_song_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        waveform(tmp_path / "missing.mp3")


# --- peaks and time agree: 4 s of silence then 4 s of tone, in every format the archive keeps -----------------

TONE_RATE = 44_100
TONE_POINTS = 400
LOUD = 0.4


def silence_then_tone(seconds: float = 8.0, rate: int = TONE_RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return np.where(t >= seconds / 2, 0.8 * np.sin(2 * np.pi * 440 * t), 0.0)


def soundfile_bytes(samples: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    import io

    soundfile = pytest.importorskip("soundfile")
    if fmt not in soundfile.available_formats():
        pytest.skip(f"this libsndfile has no {fmt} encoder")
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def written(kind: str, samples: np.ndarray, rate: int = TONE_RATE) -> bytes:
    if kind == "mp3":  # lameenc writes no Xing/Info header: the length is known only by decoding it all
        data = encode_mp3(samples, rate)
        assert b"Xing" not in data[:4096] and b"Info" not in data[:4096]
        return data
    if kind == "mp3-xing":  # libsndfile's LAME writes a Xing header with the frame count
        data = soundfile_bytes(samples, rate, "MP3")
        assert b"Xing" in data[:4096] or b"Info" in data[:4096]
        return data
    if kind == "mp3-xing-lies":  # a Xing header that claims half the frames: the decoder would stop there
        data = bytearray(written("mp3-xing", samples, rate))
        at = data.find(b"Xing")
        assert int.from_bytes(data[at + 4 : at + 8], "big") & 1  # the frame-count field is there
        frames = int.from_bytes(data[at + 8 : at + 12], "big")
        data[at + 8 : at + 12] = (frames // 2).to_bytes(4, "big")
        return bytes(data)
    if kind == "wav":
        return encode_wav(samples, rate)
    if kind == "flac":
        return soundfile_bytes(samples, rate, "FLAC")
    return soundfile_bytes(samples, rate, "OGG", "VORBIS")


def loud_buckets(peaks: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.maximum(peaks[:, 1], -peaks[:, 0]) > LOUD)


@pytest.mark.parametrize("kind", ["mp3", "mp3-xing", "mp3-xing-lies", "wav", "flac", "ogg"])
def test_the_tone_starts_half_way_and_the_tail_is_drawn(tmp_path: Path, kind: str) -> None:
    """The decoder's steps fit the song's length: no bucket is a repeat of the last one, nothing is squeezed."""
    path = tmp_path / f"tone.{kind.split('-')[0]}"
    path.write_bytes(written(kind, silence_then_tone()))
    peaks = waveform(path, points=TONE_POINTS)
    loud = loud_buckets(peaks)
    assert len(loud), kind
    # An MP3 without gapless info decodes ~1,100 frames of encoder and decoder delay first (25 ms here): one bucket
    # is 20 ms, so the onset lands in bucket 200 or 201, never 172 as when the steps ran out at 43 %.
    assert abs(int(loud[0]) - TONE_POINTS // 2) <= 1, (kind, int(loud[0]))
    assert np.array_equal(loud, np.arange(loud[0], loud[-1] + 1)), kind  # the tone is one run, no holes
    assert loud[-1] >= TONE_POINTS - 2, (kind, int(loud[-1]))  # no blank tail beyond the encoder's padding


@pytest.mark.parametrize("seconds", [0.5, 3.0, 31.0, 300.0])
def test_onset_agrees_with_time_for_short_and_long_songs(tmp_path: Path, seconds: float) -> None:
    """Wherever the tone starts (here at 5/8 of the song), the peaks put it there, within one bucket."""
    rate = 11_025
    t = np.arange(int(seconds * rate)) / rate
    samples = np.where(t >= seconds * 5 / 8, 0.8 * np.sin(2 * np.pi * 440 * t), 0.0)
    path = tmp_path / "tone.wav"
    path.write_bytes(encode_wav(samples, rate))
    for points in (64, 400, 1000):
        loud = loud_buckets(waveform(path, points=points))
        assert abs(int(loud[0]) - points * 5 // 8) <= 1, (seconds, points, int(loud[0]))
        assert loud[-1] == points - 1, (seconds, points)


MEASURE_IN_A_PROCESS_OF_ITS_OWN = """
import json, sys, tracemalloc
from ipymusicgen.archive.waveform import waveform
waveform(sys.argv[1], points=8)  # what the first decode imports is loaded before the measure, as in a kernel
tracemalloc.start()
peaks = waveform(sys.argv[2], points=int(sys.argv[3]))
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "peaks": peaks.tolist()}))
"""


def test_a_five_minute_song_is_streamed_within_the_memory_bound(tmp_path: Path) -> None:
    """Decoding a long file holds a few blocks and a few thousand min/max pairs, never the PCM (5 min of 44.1 kHz
    mono is 26 MB as int16 at the decode rate's 4x; the bound here is well under that). Measured in a process of its
    own: tracemalloc counts every thread's allocations, and a test worker's background threads (another test's
    archiver finishing) once pushed the peak to 2.1 MB."""
    import json
    import subprocess
    import sys

    rate = 22_050
    seconds = 300
    path, short = tmp_path / "long.wav", tmp_path / "short.wav"
    t = np.arange(seconds * rate) / rate
    path.write_bytes(encode_wav(np.where(t >= seconds / 2, 0.5 * np.sin(2 * np.pi * 220 * t), 0.0), rate))
    short.write_bytes(encode_wav(0.5 * np.sin(2 * np.pi * 220 * t[:rate]), rate))
    del t
    done = subprocess.run(
        [sys.executable, "-c", MEASURE_IN_A_PROCESS_OF_ITS_OWN, str(short), str(path), str(TONE_POINTS)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    peak_bytes, peaks = measured["peak"], np.asarray(measured["peaks"])
    decoded_pcm_bytes = seconds * 11_025 * 2
    assert peak_bytes < decoded_pcm_bytes / 8, peak_bytes
    assert abs(int(loud_buckets(peaks)[0]) - TONE_POINTS // 2) <= 1


@pytest.mark.parametrize("block", [1, 7, 255, 256, 1000, 8192, 100_000])
def test_the_pairs_do_not_depend_on_how_the_decoder_cuts_its_blocks(block: int) -> None:
    """A step left partial at a block's end, or an odd pair left over by a merge, joins the next frames in order."""
    from ipymusicgen.archive.waveform import _PairReducer

    rng = np.random.default_rng(7)
    samples = (rng.standard_normal(54_321) * 3000).astype(np.int16)
    samples[40_000:40_010] = 32767  # one click at 73.6 % of the length
    whole = _PairReducer(50)
    whole.add(samples)
    cut = _PairReducer(50)
    for start in range(0, len(samples), block):
        cut.add(samples[start : start + block])
    assert cut.frames() == whole.frames() == len(samples)
    peaks = cut.peaks(50)
    assert np.array_equal(peaks, whole.peaks(50))
    assert int(np.argmax(peaks[:, 1])) == 40_000 * 50 // len(samples)
