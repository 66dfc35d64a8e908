"""What a song measures: tempo (BPM), key and mode, integrated loudness (LUFS), true peak, silence at the ends.

Tempo and key come from `librosa` (`tempo`: beat tracking with octave checks; `musical_key`: a chroma profile
matched against key profiles), loudness from `pyloudnorm`'s K-weighting (ITU-R BS.1770-4, gated). Both are the optional
extra `ipymusicgen[analysis]`. The file is recognised by its content (`decoding`), and decoded as streams
of blocks that stop at the archive's cap: loudness and true peak (4x oversampled) are measured on the
full-band float samples at the file's own rate, a few blocks at a time (`levels`); tempo, key and silence
on a 16 kHz mono float copy. Memory is bounded by the longest song whatever a file claims or its rate.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .decoding import blocks, low_rate_mono, open_audio
from .levels import measure_levels
from .lossy import LOSSLESS, LongTermSpectrum, disguised
from .musical_key import PITCHES, estimate_key, musical_key  # noqa: F401 (musical_key: the older name, kept)
from .tempo import measure_tempo

LOSSY_DATA = frozenset({"mp3", "ogg"})
"""What a file named as lossless may really hold (`lossy.disguised`): lossy_checked says so, and it is lossy."""
MEASURES_VERSION = 7
"""Raised whenever a measure changes its meaning or its value for the same file: measures kept in the library by
an older version are then taken again (`song_analysis`). 2: key confidence against the relative key (issue 41);
3: no lossy verdict from a file that cannot tell, NaN samples as silence; 4: a .wav or .flac holding MP3 or OGG
data reads lossy; 5: a cliff above 21 kHz (a CD master resampled to 96 kHz) is no MP3's; 6: tempo confidence counts the
segments that agree; 7: the minor key profile weighs both sevenths alike (songs in the natural minor)."""
ANALYSIS_RATE = 16_000
"""Hz of the mono copy tempo, key and silence are measured on (at most 35 MB for the longest song)."""
SILENCE_DBFS = -60.0
"""A 10 ms window quieter than this (RMS) counts as silence at the start or end."""


class AnalysisUnavailableError(ImportError):
    """The optional extra is not installed."""


@dataclass(frozen=True)
class Analysis:
    """A song's measures. None where a measure means nothing (silence has no tempo or loudness)."""

    bpm: float | None
    key: str | None
    """Tonic and mode, e.g. "A minor"."""
    lufs: float | None
    """Integrated loudness (BS.1770-4, gated)."""
    true_peak_db: float | None
    """dBTP: the highest peak of the 4x oversampled signal, relative to full scale."""
    silence_start_s: float
    silence_end_s: float
    duration_s: float
    seconds: float
    """How long the analysis took (CPU wall time)."""
    bpm_confidence: float | None = None
    """0 to 1: how regularly the onsets repeat at this tempo (a steady click track: about 0.8)."""
    bpm_half: float | None = None
    bpm_double: float | None = None
    key_confidence: float | None = None
    """0 to 1: how far the key's fit stands above the runner-up's (near 0 when a progression fits both)."""
    key_runner_up: str | None = None
    max_momentary_lufs: float | None = None
    """The loudest 400 ms (EBU Tech 3341)."""
    max_short_term_lufs: float | None = None
    """The loudest 3 s (EBU Tech 3341)."""
    loudness_range_lu: float | None = None
    """LRA (EBU Tech 3342)."""
    lossy_cutoff_hz: float | None = None
    """Where the spectrum of a WAV or FLAC stops as an MP3 encoder's low-pass stops it; None when full-band."""
    lossy_checked: str | None = None
    """The lossless file the lossy-source verdict was made on ("wav", "flac": the file analysed, or a library
    song's paid WAV); "mp3" or "ogg" when that file, named .wav or .flac, holds lossy data (lossy-sourced); None
    when there was none (an MP3 alone says nothing either way)."""
    asked: dict[str, Any] | None = None
    """What the request named (bpm, key, seconds), beside what was measured: see `adherence`."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def adherence(self) -> dict[str, dict[str, Any]]:
        """Each value the request asked for beside the measured one and whether it is met (`adherence.compare`)."""
        from .adherence import compare

        return compare(self.asked or {}, self.as_dict())

    @property
    def lossy_sourced(self) -> bool:
        return self.lossy_cutoff_hz is not None or self.lossy_checked in LOSSY_DATA

    @property
    def lossy_verdict(self) -> str:
        """One line for a card or a repr: "lossy source (the WAV cut at 16.0 kHz)", "the WAV is full band", or ""
        when no lossless file was looked at."""
        if self.lossy_checked in LOSSY_DATA:
            return f"lossy source ({self.lossy_checked.upper()} data in a file named as lossless)"
        what = f"the {self.lossy_checked.upper()}" if self.lossy_checked else "the file"
        if self.lossy_cutoff_hz:
            return f"lossy source ({what} cut at {self.lossy_cutoff_hz / 1000:.1f} kHz, as an MP3 encoder cuts)"
        return f"{what} is full band (not from an MP3)" if self.lossy_checked else ""

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Analysis | None:
        """Measures as kept (JSON), with what this version does not know left out and what it lacks at default;
        None when a measure is missing or of the wrong kind (a damaged row: then the song is measured again)."""
        from dataclasses import MISSING, fields

        found: dict[str, Any] = {}
        for field in fields(cls):
            value = values.get(field.name, MISSING)
            if value is MISSING:
                if field.default is MISSING:
                    return None
                continue
            kind = str(field.type)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is None:
                if "None" not in kind:
                    return None
            elif (
                (kind.startswith("float") and not number)
                or (kind.startswith("str") and not isinstance(value, str))
                or (kind.startswith("dict") and not isinstance(value, dict))
            ):
                return None
            if value is not None and not _plausible(field.name, value):
                return None
            found[field.name] = float(value) if number and kind.startswith("float") else value
        return cls(**found)

    def __str__(self) -> str:
        parts = [
            f"{self.bpm:.1f} BPM" if self.bpm else "no tempo",
            self.key or "no key",
            f"{self.lufs:.1f} LUFS" if self.lufs is not None else "no loudness",
            f"LRA {self.loudness_range_lu:.1f} LU" if self.loudness_range_lu is not None else None,
            f"peak {self.true_peak_db:.1f} dBTP" if self.true_peak_db is not None else "silent",
            f"silence {self.silence_start_s:.2f} s / {self.silence_end_s:.2f} s",
            self.lossy_verdict or None,
        ]
        if self.asked:
            from .adherence import summary

            parts.append(summary(self.adherence))
        return ", ".join(part for part in parts if part)


KEY_NAMES = frozenset(f"{tonic} {mode}" for tonic in PITCHES for mode in ("major", "minor"))
RANGES: Mapping[str, tuple[float, float]] = MappingProxyType({
    "bpm": (1.0, 1000.0), "bpm_half": (0.5, 1000.0), "bpm_double": (1.0, 2000.0),
    "bpm_confidence": (0.0, 1.0), "key_confidence": (0.0, 1.0),
    "lufs": (-200.0, 200.0), "max_momentary_lufs": (-200.0, 200.0), "max_short_term_lufs": (-200.0, 200.0),
    "true_peak_db": (-400.0, 400.0), "loudness_range_lu": (0.0, 200.0),
    "silence_start_s": (0.0, 1e6), "silence_end_s": (0.0, 1e6), "duration_s": (0.0, 1e6), "seconds": (0.0, 1e6),
    "lossy_cutoff_hz": (1.0, 1e6),
})  # fmt: skip
"""Where each kept number can lie at all (a row outside is forged or damaged, and measured again)."""


def _plausible(name: str, value: Any) -> bool:
    """Whether a kept value can be this measure: a finite number in its range, a key of the 24, a lossless format."""
    if name in ("key", "key_runner_up"):
        return value in KEY_NAMES
    if name == "lossy_checked":
        return value in LOSSLESS or value in LOSSY_DATA
    if name in RANGES:
        low, high = RANGES[name]
        return math.isfinite(value) and low <= value <= high
    return True


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
    spectrum = LongTermSpectrum(audio.sample_rate) if audio.format in LOSSLESS else None
    levels = measure_levels(blocks(audio, max_seconds=max_seconds), audio.sample_rate, audio.channels, spectrum)
    mono = low_rate_mono(audio, ANALYSIS_RATE, max_seconds=max_seconds)
    duration = len(mono) / ANALYSIS_RATE
    lead, trail = silence_at_ends(mono)
    audible = duration - lead - trail > 1.0
    beat = measure_tempo(mono) if audible else None
    key = estimate_key(mono) if audible else None
    return Analysis(
        bpm=beat.bpm if beat else None,
        key=key.key if key else None,
        lufs=levels.lufs,
        true_peak_db=levels.true_peak_db,
        silence_start_s=round(lead, 3),
        silence_end_s=round(trail, 3),
        duration_s=round(duration, 3),
        seconds=round(time.perf_counter() - started, 3),
        bpm_confidence=beat.confidence if beat else None,
        bpm_half=beat.half if beat else None,
        bpm_double=beat.double if beat else None,
        key_confidence=key.confidence if key else None,
        key_runner_up=key.runner_up if key else None,
        max_momentary_lufs=levels.max_momentary_lufs,
        max_short_term_lufs=levels.max_short_term_lufs,
        loudness_range_lu=levels.loudness_range_lu,
        lossy_cutoff_hz=spectrum.lossy_cutoff() if spectrum is not None else None,
        lossy_checked=audio.format if disguised(path, audio.format) or (spectrum and spectrum.decided()) else None,
    )


def warm_up() -> None:
    """Import librosa and run tempo and key once on 3 s of made-up audio: every compiled function they use is
    compiled (or loaded from numba's cache) here, where the analysis worker holds its compile lock."""
    import numpy as np

    t = np.arange(3 * ANALYSIS_RATE) / ANALYSIS_RATE
    mono = (0.3 * np.sin(2 * np.pi * 220 * t) * (t % 0.5 < 0.1)).astype(np.float32)
    measure_tempo(mono)
    estimate_key(mono)


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
