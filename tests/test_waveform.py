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
