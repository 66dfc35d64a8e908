"""Loudness as EBU R128 measures it, and true peak (4x oversampled), on full-band float samples at the file's
own rate, block by block, so memory stays a few blocks whatever the rate and length.

- Integrated loudness: ITU-R BS.1770-4 (gated), as `pyloudnorm.Meter.integrated_loudness` reads the whole signal.
- Momentary (400 ms) and short-term (3 s) loudness, their maxima: EBU Tech 3341, on a 100 ms step.
- Loudness range (LRA): EBU Tech 3342, the 10th to 95th percentile of the short-term loudness, gated at
  -70 LUFS and 20 LU under the short-term blocks' own level.

The K-weighting filters are `pyloudnorm`'s own (its Meter's two biquads), run with their state carried from
block to block; every window is a sum of the energies of 100 ms steps (pyloudnorm has no LRA, momentary or
short-term meter; pyebur128, which has, ships no wheel for every Python the project supports).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

OVERSAMPLE = 4
"""BS.1770-4's true-peak meter: the signal upsampled 4x, the largest magnitude of the result."""
CONTEXT = 64
"""Input samples of context kept on each side of a block for the oversampling filter (it needs about 10)."""
STEP_S = 0.1
GATE_BLOCK_STEPS = 4
"""A 400 ms gating block is four 100 ms steps (75% overlap)."""
ABSOLUTE_GATE = -70.0
RELATIVE_GATE = -10.0
SHORT_TERM_STEPS = 30
"""A 3 s short-term window is thirty 100 ms steps (Tech 3341)."""
LRA_RELATIVE_GATE = -20.0
LRA_PERCENTILES = (10.0, 95.0)
CHANNEL_WEIGHTS = (1.0, 1.0, 1.0, 1.41, 1.41)
"""BS.1770-4's weights for up to five channels (L, R, C, Ls, Rs)."""
SURROUND_WEIGHTS = MappingProxyType(
    {
        6: (1.0, 1.0, 1.0, 0.0, 1.41, 1.41),  # 5.1 in WAVE order: L R C LFE Ls Rs (the LFE left out)
        8: (1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.41, 1.41),  # 7.1: L R C LFE, back pair, side pair
    }
)


def channel_weights(channels: int) -> tuple[float, ...]:
    """Each channel's weight: BS.1770-4's for mono to 5.0, 5.1 and 7.1 (WAVE order); 1.0 for any other channel."""
    weights = SURROUND_WEIGHTS.get(channels, CHANNEL_WEIGHTS)
    return tuple(weights[index] if index < len(weights) else 1.0 for index in range(channels))


@dataclass(frozen=True)
class Levels:
    lufs: float | None
    """Integrated loudness; None for silence or under 0.4 s."""
    max_momentary_lufs: float | None
    """The loudest 400 ms (LUFS); None for silence or under 0.4 s."""
    max_short_term_lufs: float | None
    """The loudest 3 s (LUFS); None for silence or under 3 s."""
    loudness_range_lu: float | None
    """LRA (LU); None for silence or under 3 s."""
    true_peak_db: float | None
    """dBTP; None for digital silence."""
    sample_peak_db: float | None


def measure_levels(blocks: Iterable[Any], rate: int, channels: int, spectrum: Any = None) -> Levels:
    """Loudness and true peak of float blocks (frames x channels) at `rate`, in one pass (also feeding
    `spectrum`, a `lossy.LongTermSpectrum`, when given)."""
    loudness = LoudnessMeter(rate, channels)
    peak = TruePeakMeter(channels)
    for block in blocks:
        loudness.add(block)
        peak.add(block)
        if spectrum is not None:
            spectrum.add(block)
    true_peak, sample_peak = peak.result()
    momentary, short_term, lra = loudness.ranges()
    return Levels(loudness.result(), momentary, short_term, lra, _db(true_peak), _db(sample_peak))


def _db(value: float) -> float | None:
    return round(20 * math.log10(value), 2) if value > 0 else None


class LoudnessMeter:
    """BS.1770-4 integrated loudness, fed block by block."""

    def __init__(self, rate: int, channels: int) -> None:
        import numpy as np
        import pyloudnorm
        from scipy.signal import lfilter_zi

        self.rate = rate
        self.channels = channels
        self.stages = [
            (np.asarray(f.b, dtype=float), np.asarray(f.a, dtype=float), float(f.passband_gain))
            for f in pyloudnorm.Meter(rate)._filters.values()  # K-weighting: pyloudnorm's coefficients
        ]
        self.states = [np.zeros((len(lfilter_zi(b, a)), channels)) for b, a, _ in self.stages]
        self.step = round(STEP_S * rate)
        self.pending = np.zeros((0, channels))
        self.energies: list[Any] = []  # per 100 ms step: the sum of squares of each channel's weighted signal
        self.frames = 0

    def add(self, block: Any) -> None:
        import numpy as np
        from scipy.signal import lfilter

        weighted = np.asarray(block, dtype=float)
        for number, (b, a, gain) in enumerate(self.stages):
            weighted, self.states[number] = lfilter(b, a, weighted, axis=0, zi=self.states[number])
            weighted = weighted * gain
        self.frames += len(weighted)
        pending = np.concatenate([self.pending, weighted]) if len(self.pending) else weighted
        whole = len(pending) // self.step * self.step
        if whole:
            squares = np.square(pending[:whole]).reshape(-1, self.step, self.channels).sum(axis=1)
            self.energies.extend(squares)
        self.pending = pending[whole:]

    def _steps(self) -> Any:
        import numpy as np

        steps = list(self.energies)
        if len(self.pending):
            steps.append(np.square(self.pending).sum(axis=0))
        return np.asarray(steps).reshape(-1, self.channels)

    def _windows(self, steps: int) -> Any:
        """The loudness (LUFS, -inf for silence) of every window of `steps` 100 ms steps, one step apart."""
        import numpy as np

        energy = self._steps()
        if len(energy) < steps:
            return np.zeros(0)
        window = np.lib.stride_tricks.sliding_window_view(energy, steps, axis=0).sum(axis=-1) / (steps * self.step)
        with np.errstate(divide="ignore"):
            return -0.691 + 10 * np.log10(window @ np.asarray(channel_weights(self.channels)))

    def ranges(self) -> tuple[float | None, float | None, float | None]:
        """(max momentary, max short-term, loudness range): Tech 3341 windows, Tech 3342 gating."""
        import numpy as np

        def loudest(values: Any) -> float | None:
            top = float(values.max()) if len(values) else -math.inf
            return round(top, 2) if top >= ABSOLUTE_GATE else None

        momentary = self._windows(GATE_BLOCK_STEPS) if self.frames >= GATE_BLOCK_STEPS * self.step else np.zeros(0)
        short = self._windows(SHORT_TERM_STEPS) if self.frames >= SHORT_TERM_STEPS * self.step else np.zeros(0)
        lra = None
        heard = short[short >= ABSOLUTE_GATE]
        if len(heard):
            level = 10 * np.log10(np.mean(np.power(10, heard / 10)))
            kept = heard[heard >= level + LRA_RELATIVE_GATE]
            low, high = np.percentile(kept, LRA_PERCENTILES)
            lra = round(float(high - low), 2)
        return loudest(momentary), loudest(short), lra

    def result(self) -> float | None:
        import numpy as np

        block = GATE_BLOCK_STEPS * self.step
        if self.frames < block + 1:
            return None
        energy = self._steps()
        count = len(energy) - GATE_BLOCK_STEPS + 1
        if count < 1:
            return None
        window = np.lib.stride_tricks.sliding_window_view(energy, GATE_BLOCK_STEPS, axis=0)
        z = window.sum(axis=-1)[:count] / block  # mean square of each 400 ms block, per channel
        weights = np.asarray(channel_weights(self.channels))
        with np.errstate(divide="ignore"):
            block_loudness = -0.691 + 10 * np.log10(z @ weights)
        above = block_loudness >= ABSOLUTE_GATE
        if not above.any():
            return None
        relative = -0.691 + 10 * math.log10(float(z[above].mean(axis=0) @ weights)) + RELATIVE_GATE
        gated = above & (block_loudness > relative)
        if not gated.any():
            return None
        value = -0.691 + 10 * math.log10(float(z[gated].mean(axis=0) @ weights))
        return round(value, 2) if math.isfinite(value) else None


class TruePeakMeter:
    """The largest magnitude of the 4x oversampled signal (scipy's polyphase resampler), fed block by block:
    each block is upsampled with `CONTEXT` real samples on both sides, so no block edge makes or hides a peak."""

    def __init__(self, channels: int) -> None:
        import numpy as np

        self.carry = np.zeros((CONTEXT, channels))  # the signal starts after silence, as a whole-signal pass sees it
        self.fresh = 0
        """How many samples at the end of `carry` are not measured yet (`carry` keeps CONTEXT more before them)."""
        self.true_peak = 0.0
        self.sample_peak = 0.0

    def add(self, block: Any) -> None:
        import numpy as np

        if not len(block):
            return
        self.sample_peak = max(self.sample_peak, float(np.abs(block).max()))
        piece = np.concatenate([self.carry, np.asarray(block, dtype=float)])
        start = len(self.carry) - self.fresh
        end = max(start, len(piece) - CONTEXT)  # the last CONTEXT samples wait for what follows them
        self._measure(piece, start, end)
        self.fresh = len(piece) - end
        self.carry = piece[-(self.fresh + CONTEXT) :]

    def result(self) -> tuple[float, float]:
        """(true peak, sample peak) as magnitudes; the last samples are measured as followed by silence."""
        import numpy as np

        if self.fresh:
            end = len(self.carry)
            self._measure(np.concatenate([self.carry, np.zeros((CONTEXT, self.carry.shape[1]))]), end - self.fresh, end)
            self.fresh = 0
        return max(self.true_peak, self.sample_peak), self.sample_peak  # a sample is a point of the true signal

    def _measure(self, piece: Any, start: int, end: int) -> None:
        import numpy as np
        from scipy.signal import resample_poly

        if end <= start:
            return
        upsampled = resample_poly(piece, OVERSAMPLE, 1, axis=0)
        span = upsampled[start * OVERSAMPLE : end * OVERSAMPLE]
        if len(span):
            self.true_peak = max(self.true_peak, float(np.abs(span).max()))
