"""Issue 41's lossy-source verdict on high-resolution WAVs: a 88.2 or 96 kHz file resampled from a CD master
(44.1 kHz, lossless) stops at 22 kHz, a cliff no MP3 encoder makes (LAME's highest low-pass, at 320 kbps, is
near 20.5 kHz): it is full band for its source, not "lossy source". The same file made from a 128 kbps MP3 is
still flagged at the encoder's cutoff. Signals made here, seeded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_lab_lossy import through_mp3

from ipymusicgen.lab.lossy import lossy_source

pytestmark = pytest.mark.slow  # a few seconds of 96 kHz stereo, and an MP3 encode


def upsampled(signal: np.ndarray, rate: int, path: Path) -> Path:
    import soundfile
    from scipy.signal import resample_poly

    factor = {88_200: (2, 1), 96_000: (320, 147)}[rate]
    soundfile.write(path, resample_poly(signal, *factor, axis=0).astype(np.float32), rate, subtype="PCM_24")
    return path


@pytest.mark.parametrize("rate", [88_200, 96_000])
def test_a_cd_master_resampled_to_high_resolution_is_not_called_lossy(tmp_path: Path, rate: int) -> None:
    master = np.random.default_rng(7).normal(0, 0.15, (44_100 * 6, 2))
    assert lossy_source(upsampled(master, rate, tmp_path / "hires.wav")) == ("wav", None)


def test_a_high_resolution_file_made_from_an_mp3_is_still_flagged(tmp_path: Path) -> None:
    master = np.random.default_rng(8).normal(0, 0.15, (44_100 * 6, 2))
    found = lossy_source(upsampled(through_mp3(master, 128, rate=44_100), 96_000, tmp_path / "hires.wav"))
    assert found is not None and found[1] is not None and 15_500 <= found[1] <= 17_500, found
