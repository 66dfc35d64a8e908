"""Tempo (BPM) of a mono float signal at 16 kHz, with two checks librosa's estimate alone does not make.

- The beat check: a tempo needs attacks, frames where the spectrum's magnitude rises by a good part of
  itself at once (a drum hit, a note starting after a gap). A held tone of any timbre (sine, square,
  sawtooth, a chord) only ripples: its partials beat slowly against each other, which librosa's
  log-spectral onset strength turns into a periodic pulse, but the linear magnitude barely moves.
- The octave check: librosa's autocorrelation tempo (with its prior around 120 BPM) often reads a slow
  song at twice its tempo (the eighth notes) or a fast one at half. The beat grid decides: when the points
  halfway between beats are as strong as the beats, the beat is twice as fast; when every other beat is
  much weaker than the rest, the beat is half as fast.

The period is then refined on the onset strength's autocorrelation at several multiples of the beat, so
the answer is well inside 2% from 40 to 240 BPM (one 8 ms frame is 2.4% of a beat at 180 BPM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

RATE = 16_000
HOP = 128
"""8 ms frames."""
WINDOW = 2048
CHUNK_S = 10
"""The spectrogram is computed this many seconds at a time (at 8 ms hops it would take a gigabyte)."""
SEGMENT_S = 20
TEMPO_WINDOW_S = 8.0
TEMPO_SEGMENTS = 5
"""At most this many `SEGMENT_S` segments (spread over the song, first and last included) give librosa's
estimate: its tempogram took 3.5 of 5.4 CPU seconds for a 3-minute song's nine (benchmark figure 14)."""
SLOWEST, FASTEST = 40.0, 240.0
VOTING_STRENGTH = 0.25
"""Segments whose mean onset strength is under this part of the strongest one's (an ambient intro) do not count
in the agreement."""
OCTAVE_AGREEMENT = 0.04
"""How near a segment's own estimate (or its half or double) must be to the tempo read to count as agreeing."""
ONSET_FLOOR = 0.1
"""The least onset strength (librosa's spectral flux) at its peak for anything to count as a note starting."""
PULSE_CONFIDENCE = 0.3
"""The least (normalised) autocorrelation of the onset strength at a tempo that counts as a beat."""
ATTACK = 0.2
"""A frame is an attack when the spectrum's magnitude rises by this part of itself (a held tone: under 0.1)."""
MIN_ATTACKS = 4
"""Attacks (at least 100 ms apart) a signal needs to have a tempo: a held tone has one, where it starts."""
DOUBLE_EVENNESS = 0.8
"""Halves of the beats this alike to the beats (by one accent curve) double the tempo: a sandbox song's eighths
(hi-hats between the beats) are at most 0.72 alike by flux and 0.56 by energy; a click track's are 1."""
HALVE_EVENNESS = 0.66
"""Beats less alike than this in pairs (by every accent curve) halve the tempo: a sandbox song's quarter notes
are 0.73 to 0.93 alike by flux; its eighths at most 0.58 by flux and 0.33 by energy."""
DOUBTFUL_EVENNESS = 0.8
PREFERRED_FASTEST = 150.0
"""Over this tempo, beats less alike than `DOUBTFUL_EVENNESS` by every accent curve halve it: a sandbox song at
82 BPM read at 164 has eighths 0.69 to 0.75 alike by flux and 0.31 to 0.48 by energy; a drum kit at 165 has
its beats 0.85 alike by energy, a click track 1."""
LOW_BAND_HZ = 1500.0
"""The band whose energy rises decide the octave first: kicks, snares' bodies, bass notes and clicks, but little
of a hi-hat's (drum kits at 60 to 180 BPM: beats 0.8 to 1.0 alike there, eighths at most 0.01)."""
LOW_DOUBLE = 0.65
"""Halfway points this strong against the beats (and beats this alike) in the low band double the tempo; a
sandbox song's eighths are at most 0.5 as strong."""
LOW_EMPTY = 0.1
"""Every other beat this weak against the rest in the low band halves the tempo (kits read at their eighths:
0.01); the low band keeps the tempo when its beats are alike and nothing hits halfway between them."""
MULTIPLES = 6
COMB_FRAMES = int(4.0 * RATE / HOP)
"""Lags up to 4 s take part in `comb`."""
FAMILY_MARGIN = 1.15
"""How much higher another period's `comb` must be to replace librosa's."""
"""Autocorrelation peaks at 1..MULTIPLES beats refine the period."""


def onsets(mono: Any) -> tuple[Any, Any, Any, Any, Any]:
    """Five curves on 8 ms frames from one spectrogram, computed `CHUNK_S` at a time with a window of context
    on both sides of each chunk (so every frame is computed as in one pass):

    - librosa's onset strength (log-mel spectral flux): the tempo estimate's input;
    - each frame's rise of linear magnitude over the frame a window earlier, as a part of the frame (0 for a
      steady spectrum, 1 from silence): the beat check's attacks;
    - the rise of linear magnitude over the previous frame: loud hits weigh more than quiet ones (a hi-hat's
      log-spectral flux is as large as a kick's), for the octave check;
    - the rise of the frame's energy over two frames before: the loudest hits weigh most (octave check);
    - the same under `LOW_BAND_HZ`: kicks, snares and bass without the hi-hats (the octave's first check)."""
    import librosa
    import numpy as np

    chunk = CHUNK_S * RATE // HOP * HOP
    pad = WINDOW // HOP * HOP
    strengths, rises, fluxes, energies, lows = [], [], [], [], []
    mel_basis = librosa.filters.mel(sr=RATE, n_fft=WINDOW)
    low_bins = int(np.count_nonzero(librosa.fft_frequencies(sr=RATE, n_fft=WINDOW) < LOW_BAND_HZ))
    for start in range(0, len(mono), chunk):
        lead = min(start, pad)
        piece = mono[start - lead : start + chunk + pad]
        magnitude = np.abs(librosa.stft(piece, n_fft=WINDOW, hop_length=HOP))
        power = np.square(magnitude)
        mel = librosa.power_to_db(mel_basis @ power, ref=np.max)
        strength = librosa.onset.onset_strength(S=mel, sr=RATE, hop_length=HOP)
        flux = np.maximum(0.0, np.diff(magnitude, axis=1, prepend=magnitude[:, :1])).sum(axis=0)
        energy, low = _energy_rise(power.sum(axis=0)), _energy_rise(power[:low_bins].sum(axis=0))
        frames = -(-min(chunk, len(mono) - start) // HOP)
        first = lead // HOP
        strengths.append(strength[first : first + frames])
        rises.append(linear_rise(magnitude)[first : first + frames])
        fluxes.append(flux[first : first + frames])
        energies.append(energy[first : first + frames])
        lows.append(low[first : first + frames])
    if not strengths:
        empty = np.zeros(0, dtype=np.float32)
        return empty, empty, empty, empty, empty
    rise = np.concatenate(rises)
    rise[max(0, len(rise) - WINDOW // HOP) :] = 0.0  # the last window: the signal's end, not an attack
    return np.concatenate(strengths), rise, np.concatenate(fluxes), np.concatenate(energies), np.concatenate(lows)


def _energy_rise(energy: Any) -> Any:
    """Each frame's energy rise over two frames before (0 where it falls)."""
    import numpy as np

    return np.maximum(0.0, energy - np.concatenate([energy[:1], energy[:1], energy[:-2]]))


def linear_rise(magnitude: Any) -> Any:
    """Each frame's rise of linear magnitude over the frame a window earlier (no overlap), as a part of it."""
    import numpy as np

    lag = WINDOW // HOP
    rise = np.empty_like(magnitude)  # the first `lag` frames rise over the first frame (in place: a third the CPU)
    np.subtract(magnitude[:, lag:], magnitude[:, :-lag], out=rise[:, lag:])
    np.subtract(magnitude[:, :lag], magnitude[:, :1], out=rise[:, :lag])
    np.maximum(rise, 0.0, out=rise)
    return rise.sum(axis=0) / np.maximum(magnitude.sum(axis=0), 1e-9)


def attacks(rise: Any) -> int:
    """How many attacks (peaks of the rise of at least `ATTACK`, at least 100 ms apart) the signal has. Peaks, not
    runs of frames over the bar: in a dense beat (a kit at 172 BPM) the rise never falls back between hits."""
    import numpy as np

    gap = int(0.1 * RATE / HOP)
    if not len(rise):
        return 0
    padded = np.pad(rise, gap, constant_values=0.0)
    window = np.lib.stride_tricks.sliding_window_view(padded, 2 * gap + 1).max(axis=1)
    count, last = 0, -gap
    for frame in np.flatnonzero((rise >= ATTACK) & (rise >= window)):
        if frame - last >= gap:
            count, last = count + 1, int(frame)
    return count


@dataclass(frozen=True)
class Tempo:
    """A tempo with how sure it is and its octave neighbours (a listener may count either)."""

    bpm: float
    confidence: float
    """0 to 1: the onset strength's mean autocorrelation at 1, 2, 3... beats of this tempo (steady clicks: ~0.8)."""
    half: float
    double: float


def tempo(mono: Any) -> float | None:
    """Beats per minute, or None when nothing repeats (a held tone, noise)."""
    found = measure_tempo(mono)
    return found.bpm if found else None


def measure_tempo(mono: Any) -> Tempo | None:
    """The tempo with its confidence and its half and double, or None when nothing repeats."""
    envelope, rise, flux, energy, low = onsets(mono)
    if not len(envelope) or float(envelope.max()) < ONSET_FLOOR or attacks(rise) < MIN_ATTACKS:
        return None  # nothing starts: a held tone's envelope is a ripple, whatever its autocorrelation
    correlation = _autocorrelation(envelope)
    frames_per_minute = 60 * RATE / HOP
    fastest, slowest = int(frames_per_minute / FASTEST), int(frames_per_minute / SLOWEST)
    window = correlation[fastest : slowest + 1]
    if not len(window) or float(window.max()) < PULSE_CONFIDENCE * float(correlation[0]):
        return None
    segments = _segment_tempi(envelope)
    first = _median_tempo([estimate for estimate, _ in segments])
    if first is None:
        return None
    period = refine(correlation, family(correlation, frames_per_minute / first))
    decided = low_band_octave(low, period, correlation)
    period = decided if decided is not None else octave((flux, energy), period, correlation)
    value = frames_per_minute / period
    if not (math.isfinite(value) and SLOWEST * 0.98 <= value <= FASTEST * 1.02):
        return None
    loudest = max(strength for _, strength in segments)
    voting = [estimate for estimate, strength in segments if strength >= VOTING_STRENGTH * loudest]
    confidence = min(1.0, max(0.0, comb(correlation, period))) * agreement(voting, value)
    return Tempo(round(value, 1), round(confidence, 2), round(value / 2, 1), round(value * 2, 1))


def low_band_octave(low: Any, period: float, correlation: Any) -> float | None:
    """The octave the low band (under `LOW_BAND_HZ`: kick, snare body, bass; hi-hats have little energy there)
    decides, or None when it does not: the beat is twice as fast when the points halfway between beats hit as
    hard as the beats (`LOW_DOUBLE`), half as fast when every other beat is nearly empty (`LOW_EMPTY`) and the
    beats of the slower grid are alike."""
    frames_per_minute = 60 * RATE / HOP
    faster, slower = period / 2, period * 2
    if frames_per_minute / faster <= FASTEST:
        midpoints, beats = halfway(low, period), evenness(low, faster)
        if midpoints is not None and beats is not None and midpoints >= LOW_DOUBLE and beats >= LOW_DOUBLE:
            return refine(correlation, faster)
    if frames_per_minute / slower >= SLOWEST:
        here, there = evenness(low, period), evenness(low, slower)
        if here is not None and there is not None and here <= LOW_EMPTY and there >= LOW_DOUBLE:
            return refine(correlation, slower)
    here = evenness(low, period)
    return period if here is not None and here >= LOW_DOUBLE and (halfway(low, period) or 0.0) <= LOW_EMPTY else None


def halfway(accent: Any, period: float) -> float | None:
    """The accent halfway between the beats of a grid of `period` frames against the accent on them (median
    over segments): near 0 when only the beats hit, near 1 when the beat is really twice as fast."""
    import numpy as np

    ratios = [float(mid.mean()) / max(float(on.mean()), 1e-12) for on, mid in grid(accent, period)]
    return float(np.median(ratios)) if ratios else None


def _autocorrelation(envelope: Any) -> Any:
    import librosa

    centred = envelope - envelope.mean()
    limit = max(COMB_FRAMES + 64, int(60 * RATE / HOP / SLOWEST * (2 * MULTIPLES + 2)))
    return librosa.autocorrelate(centred, max_size=min(len(centred), limit))


def agreement(estimates: list[float], value: float) -> float:
    """The part of the segments with a beat whose own estimate is this tempo, its half or its double (within 4%):
    1 for a steady song, 0 when the tempo read is none of its parts' (a song at 90 BPM, then at 140, read as 60)."""
    if not estimates:
        return 1.0
    return sum(
        any(abs(estimate * factor - value) <= OCTAVE_AGREEMENT * value for factor in (0.5, 1.0, 2.0))
        for estimate in estimates
    ) / len(estimates)


def _librosa_tempo(envelope: Any) -> float | None:
    """librosa's estimate (autocorrelation tempogram with its prior around 120 BPM), the median over segments."""
    return _median_tempo([estimate for estimate, _ in _segment_tempi(envelope)])


def _median_tempo(estimates: list[float]) -> float | None:
    import numpy as np

    value = float(np.median(estimates)) if estimates else math.nan
    return value if math.isfinite(value) and value > 0 else None


def _segment_tempi(envelope: Any) -> list[tuple[float, float]]:
    """librosa's estimate (autocorrelation tempogram with its prior around 120 BPM) of each segment, with its mean
    onset strength (`VOTING_STRENGTH`); its tempogram holds (window x frames) numbers, a gigabyte for a few
    minutes at 8 ms hops."""
    import librosa
    import numpy as np

    segment = int(SEGMENT_S * RATE / HOP)
    starts = list(range(0, max(1, len(envelope) - segment // 2), segment))
    if len(starts) > TEMPO_SEGMENTS:  # a long song: segments spread over it (the tempogram is most of the time)
        starts = [starts[round(i * (len(starts) - 1) / (TEMPO_SEGMENTS - 1))] for i in range(TEMPO_SEGMENTS)]
    window = int(librosa.time_to_frames(TEMPO_WINDOW_S, sr=RATE, hop_length=HOP).item())
    return [
        (float(np.atleast_1d(librosa.feature.tempo(
            tg=mean_tempogram(envelope[start : start + segment], window), sr=RATE, hop_length=HOP, aggregate=None,
        ))[0]), float(envelope[start : start + segment].mean()))
        for start in starts
    ]  # fmt: skip


def mean_tempogram(envelope: Any, window: int) -> Any:
    """librosa's tempogram averaged over its frames (what `librosa.feature.tempo` takes by default), as a column
    (window x 1), a third of the CPU: each frame's autocorrelation divided by its zero lag (librosa's max-norm: a
    real signal's autocorrelation peaks there) and averaged is one inverse FFT of the frames' power spectra, each
    weighted by one over its frame's energy, instead of one inverse FFT per frame; the frames are laid out along
    memory's fast axis. Equal to librosa's to about 1e-15 (tests/test_lab_speed.py)."""
    import numpy as np
    import scipy.fft
    import scipy.signal

    count = len(envelope)
    half = window // 2
    padded = np.pad(envelope, (half, half), mode="linear_ramp", end_values=(0, 0))
    taper = scipy.signal.get_window("hann", window, fftbins=True)
    frames = np.lib.stride_tricks.sliding_window_view(padded, window)[:count] * taper
    size = scipy.fft.next_fast_len(2 * window - 1)
    power = np.square(np.abs(scipy.fft.rfft(frames, n=size, axis=-1)))
    energy = np.square(frames).sum(axis=-1)
    silent = energy < np.finfo(power.dtype).tiny  # librosa leaves an all-zero frame's autocorrelation at 0
    weights = np.where(silent, 0.0, 1.0 / np.where(silent, 1.0, energy))
    return (scipy.fft.irfft(weights @ power, n=size)[:window] / max(count, 1))[:, None]


def comb(correlation: Any, period: float) -> float:
    """The mean autocorrelation (as a part of its zero lag) at the peaks nearest 1, 2, 3... times `period`,
    each found within 2%: a beat's period finds a peak at every multiple, a wrong one (2/3 or 5/6 of the beat,
    say) falls between them at some."""
    import numpy as np

    values = []
    for k in range(1, 64):
        low, high = math.floor(k * period * 0.98), math.ceil(k * period * 1.02)
        if high >= len(correlation) or k * period > COMB_FRAMES:
            break
        values.append(float(correlation[low : high + 1].max()))
    return float(np.mean(values)) / float(correlation[0]) if values and correlation[0] > 0 else 0.0


def family(correlation: Any, period: float) -> float:
    """librosa's period, or a 3:2, 4:3 or 6:5 relative of it when that one's `comb` is clearly higher."""
    frames_per_minute = 60 * RATE / HOP
    best, chosen = comb(correlation, period) * FAMILY_MARGIN, period
    for ratio in (3 / 2, 2 / 3, 4 / 3, 3 / 4, 6 / 5, 5 / 6):
        candidate = period * ratio
        if SLOWEST <= frames_per_minute / candidate <= FASTEST:
            score = comb(correlation, candidate)
            if score > best:
                best, chosen = score, candidate
    return chosen


def refine(correlation: Any, period: float) -> float:
    """The period (frames) that best fits the autocorrelation's peaks near 1..`MULTIPLES` times `period`, each
    found within 4% and placed between frames by a parabola: a least-squares line through the origin."""
    import numpy as np

    lags, multiples = [], []
    for k in range(1, MULTIPLES + 1):
        low, high = math.floor(k * period * 0.96), math.ceil(k * period * 1.04)
        if high + 1 >= len(correlation) or low < 1:
            break
        peak = low + int(np.argmax(correlation[low : high + 1]))
        if peak in (low, high):
            continue  # no peak inside the window: this multiple says nothing
        before, at, after = correlation[peak - 1], correlation[peak], correlation[peak + 1]
        curve = before - 2 * at + after
        offset = 0.5 * (before - after) / curve if curve < 0 else 0.0
        lags.append(peak + offset)
        multiples.append(k)
    if not lags:
        return period
    k = np.asarray(multiples, dtype=float)
    return float(np.dot(k, lags) / np.dot(k, k))


def grid(envelope: Any, period: float) -> list[tuple[Any, Any]]:
    """For each `SEGMENT_S` (aligned afresh: a small period error drifts over a long song), the onset strength
    at each beat of the best-aligned grid of `period` frames, and halfway between beats."""
    import numpy as np

    segment = max(int(SEGMENT_S * RATE / HOP), int(8 * period))
    peaks = np.maximum.reduce([np.roll(envelope, shift) for shift in (-1, 0, 1)])  # a frame either side
    found = []
    for start in range(0, len(envelope), segment):
        piece = peaks[start : start + segment]
        count = int((len(piece) - 1 - period / 2) / period)
        if count < 4:
            continue
        positions = np.arange(count) * period
        shifts = np.arange(0.0, period, 1.0)  # every phase at once: the grid's mean at each, the first best
        means = piece[np.rint(positions[None, :] + shifts[:, None]).astype(int)].mean(axis=1)
        phase = shifts[int(np.argmax(means))]
        on = np.rint(positions + phase).astype(int)
        mid = np.rint(positions + phase + period / 2).astype(int).clip(0, len(piece) - 1)
        found.append((piece[on], piece[mid]))
    return found


def evenness(flux: Any, period: float) -> float | None:
    """How alike the beats of a grid of `period` frames are, taken in pairs: the weaker of the even and odd
    beats' mean flux against the stronger (1 for a click on every beat, near 0 when every other one is a quiet
    hi-hat between the real beats); the median over segments. None when the signal holds too few beats."""
    import numpy as np

    ratios = []
    for beats, _ in grid(flux, period):
        even, odd = float(beats[0::2].mean()), float(beats[1::2].mean())
        ratios.append(min(even, odd) / max(even, odd, 1e-12))
    return float(np.median(ratios)) if ratios else None


def octave(accents: tuple[Any, ...], period: float, correlation: Any) -> float:
    """Twice the tempo when the points halfway between beats are as strong as the beats by any of the accent
    curves (linear flux, energy); half when every other beat is weak by all of them (see `evenness`), or over
    `PREFERRED_FASTEST` merely unlike."""
    frames_per_minute = 60 * RATE / HOP
    doubled = False
    while frames_per_minute / (period / 2) <= FASTEST:
        alike = [evenness(accent, period / 2) for accent in accents]
        if not any(even is not None and even >= DOUBLE_EVENNESS for even in alike):
            break
        period, doubled = refine(correlation, period / 2), True
    while not doubled and frames_per_minute / (period * 2) >= SLOWEST:
        alike = [evenness(accent, period) for accent in accents]
        if any(even is None for even in alike):
            break
        fast = frames_per_minute / period > PREFERRED_FASTEST  # over 150 BPM, a doubt is settled by halving
        if any(even >= (DOUBTFUL_EVENNESS if fast else HALVE_EVENNESS) for even in alike):
            break
        period = refine(correlation, period * 2)
    return period
