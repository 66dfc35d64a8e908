"""The key and mode of a mono float signal at 16 kHz, with how sure the estimate is and the runner-up key.

The song's average chroma (librosa, tuned to the song) is correlated with Temperley's key profiles of all 24
keys, with a nudge (`BASS_WEIGHT`) toward the key whose tonic sounds lowest. On the tests' key benchmark
(tests/key_benchmark.py) Krumhansl-Kessler's profiles read 124 of 144 cases (a I-ii-V-I read as its dominant),
Temperley's 143. The runner-up is the next best key; the confidence is how far the best stands above it, as a
part of `KEY_MARGIN`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RATE = 16_000
KEY_CONFIDENCE = 0.7
"""The least correlation with a key profile that names a key: a click track or a lone sine has none."""
KEY_MARGIN = 0.3
"""A best key this far (in correlation) above the runner-up is sure (confidence 1); half as far, 0.5. In the key
benchmark the lead is 0.12 or more in nine cases of ten, 0.28 in half."""
BASS_HZ = 300.0
"""The register whose notes count as the bass (up to about D4)."""
BASS_WEIGHT = 0.1
"""How much the lowest-sounding pitch class adds to a key's profile fit (which runs from -1 to 1)."""
PITCHES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
MAJOR_PROFILE = (5.0, 2.0, 3.5, 2.0, 4.5, 4.0, 2.0, 4.5, 2.0, 3.5, 1.5, 4.0)
MINOR_PROFILE = (5.0, 2.0, 3.5, 4.5, 2.0, 4.0, 2.0, 4.5, 3.5, 2.0, 1.5, 4.0)
"""Temperley's key profiles (Music and Probability, 2007), from C: how often each pitch class sounds in a major
or minor key."""


@dataclass(frozen=True)
class KeyEstimate:
    key: str
    confidence: float
    """0 to 1: the best key's lead over the runner-up, as a part of `KEY_MARGIN`."""
    runner_up: str


def musical_key(mono: Any) -> str | None:
    """The key, e.g. "A minor", or None when nothing pitched fits a key (`estimate_key` says how sure)."""
    found = estimate_key(mono)
    return found.key if found else None


def estimate_key(mono: Any) -> KeyEstimate | None:
    """The key whose profile best matches the song's average chroma, with its confidence and the runner-up: a held
    C-major chord's overtones (G's and E's fifths, D and B) fit E minor's profile as well as C major's, but its
    lowest note is C."""
    scores = key_scores(mono)
    if scores is None:
        return None
    ranked = sorted(scores, key=lambda item: item[1], reverse=True)
    (name, best, fit), (runner_up, second, _) = ranked[0], ranked[1]
    if fit < KEY_CONFIDENCE:
        return None
    return KeyEstimate(name, round(min(1.0, max(0.0, (best - second) / KEY_MARGIN)), 2), runner_up)


def key_scores(mono: Any) -> list[tuple[str, float, float]] | None:
    """(key, score, profile fit) for all 24 keys; None when the chroma is flat (silence, noise, a drum alone)."""
    import librosa
    import numpy as np

    power = np.square(np.abs(librosa.stft(mono, n_fft=4096, hop_length=2048)))
    tuning = chroma_tuning(power)
    chroma = librosa.feature.chroma_stft(S=power, sr=RATE, n_fft=4096, tuning=tuning).mean(axis=1)
    if not np.isfinite(chroma).all() or chroma.std() == 0:
        return None
    bass = bass_chroma(power)
    scores = []
    for mode, profile in (("major", MAJOR_PROFILE), ("minor", MINOR_PROFILE)):
        for tonic in range(12):
            fit = float(np.corrcoef(chroma, np.roll(profile, tonic))[0, 1])
            scores.append((f"{PITCHES[tonic]} {mode}", fit + BASS_WEIGHT * float(bass[tonic]), fit))
    return scores


def chroma_tuning(power: Any) -> float:
    """The tuning `chroma_stft` would estimate for itself (librosa's `estimate_tuning`, same steps and defaults),
    but 0.0 without its "empty frequency set" warning when nothing in the song is pitched (silence, noise, a
    lone drum): librosa answers 0.0 there too, and the warning was all a newcomer's test run printed."""
    import librosa
    import numpy as np

    pitch, magnitude = librosa.piptrack(S=power, sr=RATE, n_fft=2048)
    pitched = pitch > 0
    if not pitched.any():
        return 0.0
    frequencies = pitch[(magnitude >= np.median(magnitude[pitched])) & pitched]
    return float(librosa.pitch_tuning(frequencies, bins_per_octave=12)) if frequencies.size else 0.0


def bass_chroma(power: Any) -> Any:
    """How much of the energy under `BASS_HZ` each pitch class has (the largest 1; all 0 with no bass)."""
    import librosa
    import numpy as np

    freqs = librosa.fft_frequencies(sr=RATE, n_fft=4096)
    low = (freqs >= 25) & (freqs < BASS_HZ)
    energy = power[low].sum(axis=1)
    classes = np.rint(librosa.hz_to_midi(freqs[low])).astype(int) % 12
    bass = np.bincount(classes, weights=energy, minlength=12)
    return bass / bass.max() if bass.max() > 0 else bass
