"""Loudness to EBU R128's own test signals, made here: EBU Tech 3341 (momentary, short-term, integrated, true
peak) and Tech 3342 (loudness range), each within the tolerance the specification gives a meter.

A stereo 1 kHz sine whose peak is at X dBFS in both channels reads X LUFS (K-weighting adds 0.691 dB at 1 kHz,
which the -0.691 of BS.1770 takes back, and two channels add 3.01 dB to a sine's -3.01 dB mean square).
"""

from __future__ import annotations

import numpy as np
import pytest

from ipymusicgen.lab.levels import measure_levels

pytestmark = pytest.mark.slow  # a minute or two of 48 kHz stereo per case, true peak oversampled 4x


def stereo_sine(parts: list[tuple[float, float]], rate: int, freq: float = 1000.0) -> np.ndarray:
    """Consecutive stretches of (seconds, dBFS; None for digital silence) of one continuous stereo sine."""
    pieces, start = [], 0
    for seconds, dbfs in parts:
        count = round(seconds * rate)
        t = (start + np.arange(count)) / rate
        level = 0.0 if dbfs is None else 10 ** (dbfs / 20)
        pieces.append(level * np.sin(2 * np.pi * freq * t))
        start += count
    tone = np.concatenate(pieces)
    return np.stack([tone, tone], axis=1).astype(np.float32)


def measured(frames: np.ndarray, rate: int, block: int = 65_536):
    return measure_levels((frames[i : i + block] for i in range(0, len(frames), block)), rate, 2)


RATES = [48_000, 44_100]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("dbfs", [-23.0, -33.0, -14.5])
def test_tech_3341_cases_1_and_2_a_steady_sine_reads_its_level_momentary_short_term_and_integrated(
    rate: int, dbfs: float
) -> None:
    found = measured(stereo_sine([(20.0, dbfs)], rate), rate)
    assert found.lufs == pytest.approx(dbfs, abs=0.1)
    assert found.max_momentary_lufs == pytest.approx(dbfs, abs=0.1)
    assert found.max_short_term_lufs == pytest.approx(dbfs, abs=0.1)
    assert found.loudness_range_lu == pytest.approx(0.0, abs=0.1)  # nothing changes: no range


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize(
    "parts",
    [
        [(10, -36.0), (60, -23.0), (10, -36.0)],  # Tech 3341 case 3: the relative gate
        [(10, -72.0), (10, -36.0), (60, -23.0), (10, -36.0), (10, -72.0)],  # case 4: the absolute gate too
        [(20, -26.0), (20.1, -20.0), (20, -26.0)],  # case 5
    ],
)
def test_tech_3341_cases_3_to_5_gated_integrated_loudness(rate: int, parts: list[tuple[float, float]]) -> None:
    assert measured(stereo_sine(parts, rate), rate).lufs == pytest.approx(-23.0, abs=0.1)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize(
    ("parts", "lra"),
    [
        ([(20, -20.0), (20, -30.0)], 10.0),  # Tech 3342 case 1
        ([(20, -20.0), (20, -15.0)], 5.0),  # case 2
        ([(20, -40.0), (20, -20.0)], 20.0),  # case 3
        ([(20, -50.0), (20, -35.0), (20, -20.0), (20, -35.0), (20, -50.0)], 15.0),  # case 4
        ([(30, -25.0), (30, -31.0)], 6.0),  # not in the specification: the same rule, other levels
    ],
)
def test_tech_3342_loudness_range(rate: int, parts: list[tuple[float, float]], lra: float) -> None:
    assert measured(stereo_sine(parts, rate), rate).loudness_range_lu == pytest.approx(lra, abs=1.0)


@pytest.mark.parametrize("rate", RATES)
def test_the_loudest_400_ms_and_3_s_of_a_burst_in_silence(rate: int) -> None:
    """A 1 s burst at -20 dBFS between silences: its loudest 400 ms is all burst (-20); its loudest 3 s holds one
    second of it (-20 + 10 log10(1/3) = -24.77). The integrated loudness gates the silence away but keeps the
    six 400 ms blocks that hold 3/4, 1/2 and 1/4 of the burst on either side of its seven full ones: the mean
    energy of 13 blocks holding 10 blocks' worth, -20 + 10 log10(10/13) = -21.14."""
    found = measured(stereo_sine([(4.0, None), (1.0, -20.0), (4.0, None)], rate), rate)
    assert found.max_momentary_lufs == pytest.approx(-20.0, abs=0.1)
    assert found.max_short_term_lufs == pytest.approx(-20.0 + 10 * np.log10(1 / 3), abs=0.1)
    assert found.lufs == pytest.approx(-20.0 + 10 * np.log10(10 / 13), abs=0.1)


@pytest.mark.parametrize("rate", RATES)
def test_silence_and_too_short_have_no_loudness_but_a_short_sound_has_its_momentary(rate: int) -> None:
    silent = measured(np.zeros((rate * 5, 2), dtype=np.float32), rate)
    assert (silent.lufs, silent.max_momentary_lufs, silent.max_short_term_lufs, silent.loudness_range_lu) == (
        None,
        None,
        None,
        None,
    )
    short = measured(stereo_sine([(1.0, -18.0)], rate), rate)  # under 3 s: no short-term window, no range
    assert short.max_momentary_lufs == pytest.approx(-18.0, abs=0.1)
    assert short.max_short_term_lufs is None and short.loudness_range_lu is None


@pytest.mark.parametrize("rate", RATES)
def test_tech_3341_true_peak_of_a_sine_between_its_samples(rate: int) -> None:
    """A quarter-rate sine at 45 degrees has every sample at 0.707 of its peak: true peak reads the peak
    (Tech 3341 cases 15-19 tolerate +0.2 / -0.4 dB), not the samples' -3 dB."""
    t = np.arange(rate * 3) / rate
    tone = 10 ** (-6.0 / 20) * np.sin(2 * np.pi * (rate / 4) * t + np.pi / 4)
    found = measured(np.stack([tone, tone], axis=1).astype(np.float32), rate)
    assert -6.4 <= (found.true_peak_db or -99) <= -5.8
    assert found.sample_peak_db == pytest.approx(-9.01, abs=0.05)
