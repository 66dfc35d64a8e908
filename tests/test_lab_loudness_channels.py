"""Loudness of files with more channels than stereo (issue 41, a mastering engineer's check): a 5.1 or 7.1 WAV
(stems, a surround mix) is measured with BS.1770-4's channel weights in the WAVE order (L R C LFE Ls Rs ...):
the LFE is left out, the surrounds weigh 1.41. Before, any file of 6 channels or more failed its analysis (the
weights stopped at 5). Signals made here."""

from __future__ import annotations

import numpy as np
import pytest

from ipymusicgen.lab.levels import measure_levels

pytestmark = pytest.mark.slow  # 10 s of 48 kHz in 6 to 8 channels, true peak oversampled 4x

RATE = 48_000


def channels(count: int, levels: dict[int, float], seconds: float = 10.0) -> np.ndarray:
    """`count` channels, a 1 kHz sine at the given dBFS (peak) in the channels named, silence in the others."""
    t = np.arange(int(seconds * RATE)) / RATE
    frames = np.zeros((len(t), count), dtype=np.float32)
    for index, dbfs in levels.items():
        frames[:, index] = 10 ** (dbfs / 20) * np.sin(2 * np.pi * 1000 * t)
    return frames


def measured(frames: np.ndarray):
    return measure_levels((frames[i : i + 65_536] for i in range(0, len(frames), 65_536)), RATE, frames.shape[1])


@pytest.mark.parametrize("count", [6, 8])
def test_a_surround_file_reads_its_front_pair_as_stereo_and_leaves_the_lfe_out(count: int) -> None:
    front = measured(channels(count, {0: -23.0, 1: -23.0}))
    assert front.lufs == pytest.approx(-23.0, abs=0.1) and front.max_momentary_lufs == pytest.approx(-23.0, abs=0.1)
    assert front.loudness_range_lu == pytest.approx(0.0, abs=0.1)
    lfe = measured(channels(count, {3: -10.0}))  # the LFE alone: no loudness (BS.1770-4 leaves it out)
    assert lfe.lufs is None and lfe.max_momentary_lufs is None and lfe.true_peak_db == pytest.approx(-10.0, abs=0.1)


def test_the_surrounds_of_a_5_1_file_weigh_1_41() -> None:
    """Ls and Rs at -24.5 dBFS alone: 10 log10(2 x 1.41 x 10^-2.45 / 2) = -23.0 LUFS."""
    found = measured(channels(6, {4: -24.5, 5: -24.5}))
    assert found.lufs == pytest.approx(-24.5 + 10 * np.log10(1.41), abs=0.1)
