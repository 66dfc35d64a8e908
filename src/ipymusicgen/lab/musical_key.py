"""The key and mode of a mono float signal at 16 kHz, with how sure the estimate is and the runner-up key.

The song's average chroma (librosa, tuned to the song) is correlated with Temperley's key profiles of all 24
keys (the minor one with its sevenths weighed alike, `MINOR_PROFILE`), with a nudge (`BASS_WEIGHT`) toward the
key whose tonic sounds lowest. On the tests' key benchmark
(tests/key_benchmark.py) Krumhansl-Kessler's profiles read 124 of 144 cases (a I-ii-V-I read as its dominant),
Temperley's 143. The runner-up is the next best key; the confidence is how far the best stands above it, as a
part of `KEY_MARGIN`.

A key and its relative (C major, A minor) share their notes, so the profiles tell them apart only by how the notes
are weighted, and a loop like vi-IV-I-V reads as sure as a cadence. The chords decide instead (`relative_share`):
each moment's triad is named, and the time spent on the key's tonic chord is weighed against the time on its
relative's (twice where the chord's own dominant leads into it: a cadence). When the two are near even, the key
reads low confidence with its relative as runner-up.
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
RELATIVE_MARGIN = 0.25
"""A key whose tonic chord has this much more than half of the time shared with its relative's (weighted, see
`relative_share`) is sure of its relative (confidence 1); at half, 0. On the key benchmark's decidable
progressions the share is 0.76 or more, on vi-IV-I-V 0.45 to 0.51."""
TRIAD_FIT = 0.5
"""The least correlation of a moment's chroma with a triad's that names the chord (drums and noise name none)."""
CHORD_FRAMES = 3
"""A chord counts when it holds this many analysis frames (3 x 128 ms): passing flickers are ignored."""
CADENCE_WEIGHT = 2.0
BASS_HZ = 300.0
"""The register whose notes count as the bass (up to about D4)."""
BASS_WEIGHT = 0.1
"""How much the lowest-sounding pitch class adds to a key's profile fit (which runs from -1 to 1)."""
PITCHES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
MAJOR_PROFILE = (5.0, 2.0, 3.5, 2.0, 4.5, 4.0, 2.0, 4.5, 2.0, 3.5, 1.5, 4.0)
MINOR_PROFILE = (5.0, 2.0, 3.5, 4.5, 2.0, 4.0, 2.0, 4.5, 3.5, 2.0, 3.0, 3.0)
"""Temperley's key profiles (Music and Probability, 2007), from C: how often each pitch class sounds in a major
or minor key; the minor one with its two sevenths weighed alike (3.0 each), as Krumhansl-Kessler's minor profile
weighs them (3.34 and 3.17), where Temperley's, drawn from classical pieces, has 1.5 for the minor seventh and 4.0
for the leading tone. Popular songs in minor, the sandbox's among them, sound the natural minor's seventh (VII, v)
as often as a leading tone: with Temperley's weights many fitted no key well enough to be named, or read as their
relative major. The sandbox's songs (48, 30 s each) read their key in 24 of 48 then, 34 now; the tests' key
benchmark reads 143 of 144 either way (tests/test_lab_key_sandbox.py, benchmarks/key_references.py)."""


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
    found = _chroma(mono)
    if found is None:
        return None
    frames, power = found
    scores = _scores(frames.mean(axis=1), power)
    if scores is None:
        return None
    ranked = sorted(scores, key=lambda item: item[1], reverse=True)
    (name, best, fit), (runner_up, second, _) = ranked[0], ranked[1]
    if fit < KEY_CONFIDENCE:
        return None
    confidence = min(1.0, max(0.0, (best - second) / KEY_MARGIN))
    share = relative_share(frames, name)
    if share is not None:
        against_relative = min(1.0, max(0.0, (share - 0.5) / RELATIVE_MARGIN))
        if against_relative < confidence:
            confidence, runner_up = against_relative, relative_of(name)
    return KeyEstimate(name, round(confidence, 2), runner_up)


def key_scores(mono: Any) -> list[tuple[str, float, float]] | None:
    """(key, score, profile fit) for all 24 keys; None when the chroma is flat (silence, noise, a drum alone)."""
    found = _chroma(mono)
    return None if found is None else _scores(found[0].mean(axis=1), found[1])


def _chroma(mono: Any) -> tuple[Any, Any] | None:
    """The chroma of each frame (12 x frames, tuned to the song) and the power spectrogram; None for no samples.
    A sample that is not a number (NaN, infinite) carries no pitch and counts as silence."""
    import librosa
    import numpy as np

    mono = np.nan_to_num(np.asarray(mono, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    if not len(mono):
        return None
    power = np.square(np.abs(librosa.stft(mono, n_fft=4096, hop_length=2048)))
    tuning = chroma_tuning(power)
    return librosa.feature.chroma_stft(S=power, sr=RATE, n_fft=4096, tuning=tuning), power


def _scores(chroma: Any, power: Any) -> list[tuple[str, float, float]] | None:
    import numpy as np

    if not np.isfinite(chroma).all() or chroma.std() == 0:
        return None
    bass = bass_chroma(power)
    scores = []
    for mode, profile in (("major", MAJOR_PROFILE), ("minor", MINOR_PROFILE)):
        for tonic in range(12):
            fit = float(np.corrcoef(chroma, np.roll(profile, tonic))[0, 1])
            scores.append((f"{PITCHES[tonic]} {mode}", fit + BASS_WEIGHT * float(bass[tonic]), fit))
    return scores


def relative_of(key: str) -> str:
    """A major key's relative minor (C major: A minor), a minor key's relative major."""
    tonic, mode = key.split()
    step = 9 if mode == "major" else 3
    return f"{PITCHES[(PITCHES.index(tonic) + step) % 12]} {'minor' if mode == 'major' else 'major'}"


def relative_share(chroma: Any, key: str) -> float | None:
    """How much of the time on the tonic chords of `key` and of its relative goes to `key`'s: 1 when only its
    own sounds, 0.5 when both sound alike (vi-IV-I-V), None when neither is heard. Each frame names the triad
    its chroma fits best (of the 24 major and minor ones, at least `TRIAD_FIT`); chords shorter than
    `CHORD_FRAMES` are dropped; a tonic chord entered from its own dominant (G to C, E to A minor) counts
    `CADENCE_WEIGHT` times."""
    import numpy as np

    if chroma.shape[1] < CHORD_FRAMES:
        return None
    smooth = (chroma[:, :-2] + chroma[:, 1:-1] + chroma[:, 2:]) / 3
    centred = smooth - smooth.mean(axis=0, keepdims=True)
    norms = np.linalg.norm(centred, axis=0)
    fits = _triads() @ (centred / np.where(norms > 0, norms, 1.0))
    named = np.where(fits.max(axis=0) >= TRIAD_FIT, fits.argmax(axis=0), -1)
    chords: list[list[int]] = []  # [triad, frames], runs of one chord, flickers dropped, neighbours merged
    starts = np.flatnonzero(np.diff(named, prepend=-2))
    for start, length in zip(starts, np.diff(np.append(starts, len(named))), strict=True):
        triad = int(named[start])
        if triad < 0 or length < CHORD_FRAMES:
            continue
        if chords and chords[-1][0] == triad:
            chords[-1][1] += int(length)
        else:
            chords.append([triad, int(length)])
    own, other = _tonic_time(chords, key), _tonic_time(chords, relative_of(key))
    return own / (own + other) if own + other > 0 else None


def _tonic_time(chords: list[list[int]], key: str) -> float:
    tonic, mode = key.split()
    root = PITCHES.index(tonic)
    triad = root + (12 if mode == "minor" else 0)
    dominant = (root + 7) % 12  # its major triad: G for C major, E (raised leading tone) for A minor
    return float(
        sum(
            frames * (CADENCE_WEIGHT if index and chords[index - 1][0] == dominant else 1.0)
            for index, (name, frames) in enumerate(chords)
            if name == triad
        )
    )


def _triads() -> Any:
    """The 24 triads' pitch-class templates (rows: the 12 major, then the 12 minor), centred, unit length."""
    import numpy as np

    rows = np.zeros((24, 12))
    for root in range(12):
        rows[root, [root, (root + 4) % 12, (root + 7) % 12]] = 1
        rows[12 + root, [root, (root + 3) % 12, (root + 7) % 12]] = 1
    rows -= rows.mean(axis=1, keepdims=True)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


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
