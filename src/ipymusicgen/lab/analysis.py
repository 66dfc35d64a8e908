"""What a song measures: tempo (BPM), key and mode, integrated loudness (LUFS), true peak, silence at the ends.

Tempo and key come from `librosa` (beat tracking; a chroma profile matched against the Krumhansl-Kessler
key profiles), loudness from `pyloudnorm`'s K-weighting (ITU-R BS.1770-4, gated). Both are the optional
extra `ipymusicgen[analysis]`. The file is recognised by its content (`decoding`), and decoded as streams
of blocks that stop at the archive's cap: loudness and true peak (4x oversampled) are measured on the
full-band float samples at the file's own rate, a few blocks at a time (`levels`); tempo, key and silence
on a 16 kHz mono float copy. Memory is bounded by the longest song whatever a file claims or its rate.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .decoding import blocks, low_rate_mono, open_audio
from .levels import measure_levels
from .tempo import tempo

ANALYSIS_RATE = 16_000
"""Hz of the mono copy tempo, key and silence are measured on (at most 35 MB for the longest song)."""
SILENCE_DBFS = -60.0
"""A 10 ms window quieter than this (RMS) counts as silence at the start or end."""
KEY_CONFIDENCE = 0.7
"""The least correlation with a key profile that names a key: a click track or a lone sine has none."""
BASS_HZ = 300.0
"""The register whose notes count as the bass (up to about D4)."""
BASS_WEIGHT = 0.1
"""How much the lowest-sounding pitch class adds to a key's profile fit (which runs from -1 to 1)."""
PITCHES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
MAJOR_PROFILE = (6.35, 2.23, 3.48, 2.33, 4.38, 4.09, 2.52, 5.19, 2.39, 3.66, 2.29, 2.88)
MINOR_PROFILE = (6.33, 2.68, 3.52, 5.38, 2.60, 3.53, 2.54, 4.75, 3.98, 2.69, 3.34, 3.17)
"""Krumhansl-Kessler probe-tone profiles, from C: how well each pitch class fits a major or minor key."""


class AnalysisUnavailableError(ImportError):
    """The optional extra is not installed."""


@dataclass(frozen=True)
class Analysis:
    """A song's measures. None where a measure means nothing (silence has no tempo or loudness)."""

    bpm: float | None
    key: str | None
    """Tonic and mode, e.g. "A minor"."""
    lufs: float | None
    true_peak_db: float | None
    """dBTP: the highest peak of the 4x oversampled signal, relative to full scale."""
    silence_start_s: float
    silence_end_s: float
    duration_s: float
    seconds: float
    """How long the analysis took (CPU wall time)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        parts = [
            f"{self.bpm:.1f} BPM" if self.bpm else "no tempo",
            self.key or "no key",
            f"{self.lufs:.1f} LUFS" if self.lufs is not None else "no loudness",
            f"peak {self.true_peak_db:.1f} dBTP" if self.true_peak_db is not None else "silent",
            f"silence {self.silence_start_s:.2f} s / {self.silence_end_s:.2f} s",
        ]
        return ", ".join(parts)


def available() -> bool:
    """Whether the extra (`pip install ipymusicgen[analysis]`) is installed; cheap, imports nothing."""
    return all(importlib.util.find_spec(name) is not None for name in ("librosa", "pyloudnorm", "filelock"))


def analyze_file(path: str | Path, *, max_seconds: float | None = None) -> Analysis:
    """Measure one audio file (MP3, WAV, FLAC, OGG, recognised by content); `decoding.AudioFileError` names a
    file that is not audio, `DecodeCapError` one that runs past the cap."""
    if not available():
        raise AnalysisUnavailableError(
            "audio analysis needs the extra: pip install 'ipymusicgen[analysis]' (librosa and pyloudnorm)"
        )
    started = time.perf_counter()
    audio = open_audio(path)
    levels = measure_levels(blocks(audio, max_seconds=max_seconds), audio.sample_rate, audio.channels)
    mono = low_rate_mono(audio, ANALYSIS_RATE, max_seconds=max_seconds)
    duration = len(mono) / ANALYSIS_RATE
    lead, trail = silence_at_ends(mono)
    audible = duration - lead - trail > 1.0
    return Analysis(
        bpm=tempo(mono) if audible else None,
        key=musical_key(mono) if audible else None,
        lufs=levels.lufs,
        true_peak_db=levels.true_peak_db,
        silence_start_s=round(lead, 3),
        silence_end_s=round(trail, 3),
        duration_s=round(duration, 3),
        seconds=round(time.perf_counter() - started, 3),
    )


def warm_up() -> None:
    """Import librosa and run tempo and key once on 3 s of made-up audio: every compiled function they use is
    compiled (or loaded from numba's cache) here, where the analysis worker holds its compile lock."""
    import numpy as np

    t = np.arange(3 * ANALYSIS_RATE) / ANALYSIS_RATE
    mono = (0.3 * np.sin(2 * np.pi * 220 * t) * (t % 0.5 < 0.1)).astype(np.float32)
    tempo(mono)
    musical_key(mono)


def silence_at_ends(mono: Any) -> tuple[float, float]:
    """Seconds of silence (10 ms windows under `SILENCE_DBFS`) before the first and after the last sound."""
    import numpy as np

    window = ANALYSIS_RATE // 100
    count = len(mono) // window
    if count == 0:
        return 0.0, 0.0
    power = np.square(mono[: count * window].reshape(count, window)).mean(axis=1)
    loud = np.flatnonzero(power > 10 ** (SILENCE_DBFS / 10))
    if not len(loud):
        return float(len(mono) / ANALYSIS_RATE), 0.0
    return float(loud[0] * window / ANALYSIS_RATE), float((len(mono) - (loud[-1] + 1) * window) / ANALYSIS_RATE)


def musical_key(mono: Any) -> str | None:
    """The key whose Krumhansl-Kessler profile best matches the song's average chroma, e.g. "A minor", with a
    nudge (`BASS_WEIGHT`) toward the key whose tonic sounds lowest: a held C-major chord's overtones (G's and E's
    fifths, D and B) fit E minor's profile as well as C major's, but its lowest note is C."""
    import librosa
    import numpy as np

    power = np.square(np.abs(librosa.stft(mono, n_fft=4096, hop_length=2048)))
    tuning = chroma_tuning(power)
    chroma = librosa.feature.chroma_stft(S=power, sr=ANALYSIS_RATE, n_fft=4096, tuning=tuning).mean(axis=1)
    if not np.isfinite(chroma).all() or chroma.std() == 0:
        return None
    bass = bass_chroma(power)
    best, name, confidence = -2.0, None, -2.0
    for mode, profile in (("major", MAJOR_PROFILE), ("minor", MINOR_PROFILE)):
        for tonic in range(12):
            fit = float(np.corrcoef(chroma, np.roll(profile, tonic))[0, 1])
            score = fit + BASS_WEIGHT * float(bass[tonic])
            if score > best:
                best, name, confidence = score, f"{PITCHES[tonic]} {mode}", fit
    return name if confidence >= KEY_CONFIDENCE else None


def chroma_tuning(power: Any) -> float:
    """The tuning `chroma_stft` would estimate for itself (librosa's `estimate_tuning`, same steps and defaults),
    but 0.0 without its "empty frequency set" warning when nothing in the song is pitched (silence, noise, a
    lone drum): librosa answers 0.0 there too, and the warning was all a newcomer's test run printed."""
    import librosa
    import numpy as np

    pitch, magnitude = librosa.piptrack(S=power, sr=ANALYSIS_RATE, n_fft=2048)
    pitched = pitch > 0
    if not pitched.any():
        return 0.0
    frequencies = pitch[(magnitude >= np.median(magnitude[pitched])) & pitched]
    return float(librosa.pitch_tuning(frequencies, bins_per_octave=12)) if frequencies.size else 0.0


def bass_chroma(power: Any) -> Any:
    """How much of the energy under `BASS_HZ` each pitch class has (the largest 1; all 0 with no bass)."""
    import librosa
    import numpy as np

    freqs = librosa.fft_frequencies(sr=ANALYSIS_RATE, n_fft=4096)
    low = (freqs >= 25) & (freqs < BASS_HZ)
    energy = power[low].sum(axis=1)
    classes = np.rint(librosa.hz_to_midi(freqs[low])).astype(int) % 12
    bass = np.bincount(classes, weights=energy, minlength=12)
    return bass / bass.max() if bass.max() > 0 else bass
