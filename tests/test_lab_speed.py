"""Issue 41's speed (benchmark figure 14): the analysis was made faster without changing a result. Each faster
step is checked against the slower code it replaced (librosa's own tempogram and tempo, the loop and copy it
used), on seeded signals, empty and all-zero ones included."""

from __future__ import annotations

import functools

import librosa
import numpy as np
import pytest
from signals import drum_kit

from ipymusicgen.lab import tempo as lab_tempo

pytestmark = pytest.mark.slow  # librosa's onset strength and tempogram on seconds of audio

WINDOW = int(librosa.time_to_frames(lab_tempo.TEMPO_WINDOW_S, sr=lab_tempo.RATE, hop_length=lab_tempo.HOP).item())


@functools.cache
def envelopes() -> tuple[np.ndarray, ...]:
    """Onset strengths of drum kits at several tempi, of noise, a short one, an all-zero one, one with a gap."""
    rng = np.random.default_rng(41)
    found = []
    for bpm, seconds in ((63, 20), (128, 20), (177, 12), (92, 3)):
        mono = drum_kit(seconds, bpm, rng, rate=lab_tempo.RATE).astype(np.float32)
        found.append(lab_tempo.onsets(mono)[0])
    found.append(np.abs(rng.normal(size=2500)).astype(np.float32))
    found.append(np.zeros(2500, dtype=np.float32))
    gap = np.abs(rng.normal(size=2500)).astype(np.float32)
    gap[600:1900] = 0.0  # whole frames of silence inside
    found.append(gap)
    return tuple(found)


@pytest.mark.parametrize("number", range(7))
def test_the_mean_tempogram_is_librosas_and_so_is_the_tempo(number: int) -> None:
    envelope = envelopes()[number]
    theirs = librosa.feature.tempogram(
        onset_envelope=envelope, sr=lab_tempo.RATE, hop_length=lab_tempo.HOP, win_length=WINDOW
    ).mean(axis=-1, keepdims=True)
    ours = lab_tempo.mean_tempogram(envelope, WINDOW)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
    before = librosa.feature.tempo(
        onset_envelope=envelope, sr=lab_tempo.RATE, hop_length=lab_tempo.HOP, ac_size=lab_tempo.TEMPO_WINDOW_S
    )
    after = librosa.feature.tempo(tg=ours, sr=lab_tempo.RATE, hop_length=lab_tempo.HOP, aggregate=None)
    assert np.array_equal(before, after)


@pytest.mark.parametrize("frames", [1300, 40, 16, 17, 5])
def test_the_linear_rise_is_the_same_as_with_the_copied_frames(frames: int) -> None:
    magnitude = np.abs(np.random.default_rng(frames).normal(size=(1025, frames))).astype(np.float32)
    lag = lab_tempo.WINDOW // lab_tempo.HOP
    earlier = np.concatenate([np.repeat(magnitude[:, :1], lag, axis=1), magnitude[:, :-lag]], axis=1)[:, :frames]
    before = np.maximum(0.0, magnitude - earlier).sum(axis=0) / np.maximum(magnitude.sum(axis=0), 1e-9)
    assert np.array_equal(lab_tempo.linear_rise(magnitude), before)


def _grid_by_loop(envelope: np.ndarray, period: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """The beat grid as it was found before: one phase at a time."""
    segment = max(int(lab_tempo.SEGMENT_S * lab_tempo.RATE / lab_tempo.HOP), int(8 * period))
    peaks = np.maximum.reduce([np.roll(envelope, shift) for shift in (-1, 0, 1)])
    found = []
    for start in range(0, len(envelope), segment):
        piece = peaks[start : start + segment]
        count = int((len(piece) - 1 - period / 2) / period)
        if count < 4:
            continue
        positions = np.arange(count) * period
        best, phase = -1.0, 0.0
        for shift in np.arange(0.0, period, 1.0):
            value = float(piece[np.rint(positions + shift).astype(int)].mean())
            if value > best:
                best, phase = value, shift
        on = np.rint(positions + phase).astype(int)
        mid = np.rint(positions + phase + period / 2).astype(int).clip(0, len(piece) - 1)
        found.append((piece[on], piece[mid]))
    return found


def test_the_beat_grid_finds_the_same_phase_as_one_at_a_time() -> None:
    rng = np.random.default_rng(7)
    for trial in range(120):
        envelope = np.abs(rng.normal(size=int(rng.integers(50, 12000)))).astype((np.float32, np.float64)[trial % 2])
        if trial % 3 == 0:
            envelope = np.round(envelope, 1)  # ties between phases: the first best wins, as before
        period = float(rng.uniform(20, 190))
        ours, before = lab_tempo.grid(envelope, period), _grid_by_loop(envelope, period)
        assert len(ours) == len(before)
        for (on, mid), (on_before, mid_before) in zip(ours, before, strict=True):
            assert np.array_equal(on, on_before) and np.array_equal(mid, mid_before)
