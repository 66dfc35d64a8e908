"""Whether a lossless file (WAV, FLAC) was decoded from a lossy one: MP3 encoders low-pass the audio (LAME at
128 kbps near 17 kHz, at 320 kbps near 20 kHz), so the long-term spectrum of a file made from an MP3 falls off
a cliff there, while a file mixed or rendered at full band has content up to near the Nyquist frequency.

The spectrum is averaged over the whole file (power, mono mix, 4096-point Hann frames) as the levels are
measured, block by block, so it costs no second decode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LOSSLESS = frozenset({"wav", "flac"})
"""Formats whose verdict means something (an MP3 or OGG is lossy by its own name)."""
FRAME = 4096
LOWEST_CUTOFF_HZ = 10_000.0
"""Encoders low-pass no lower than this at the bit rates music is sold at (LAME at 64 kbps: about 14 kHz)."""
NYQUIST_MARGIN_HZ = 1_000.0
"""Content within this of the Nyquist frequency is full band (anti-alias filters start about here)."""
HIGHEST_CUTOFF_HZ = 21_000.0
"""Encoders low-pass no higher than this (LAME at 320 kbps: about 20.5 kHz): a cliff above it is the Nyquist of a
44.1 or 48 kHz source a high-resolution file was resampled from (a CD master at 96 kHz), full band for its
source. The kilohertz under it (or under `NYQUIST_MARGIN_HZ` below Nyquist, if lower) decides "full band"."""
CLIFF_DB = 25.0
"""How far the spectrum must fall in the kilohertz just above the cutoff, against the kilohertz just below it
(LAME at 96 kbps: 28 dB, at 128 to 320 kbps: more), and stay `REST_DB` down above that (some encoders leave
a little noise over the low-pass: LAME at 96 kbps has a hump 15 dB down at 17 kHz)."""
REST_DB = 12.0
CLIFF_WIDTH_HZ = 300.0
"""Within how many hertz it must fall: an encoder's low-pass is steep, a song's natural roll-off is not."""
PRESENT_DB = 50.0
"""The kilohertz below the cutoff must be within this of the loudest band: content up to the cliff."""
BAND_HZ = 100.0


def lossy_source(path: str | Path, *, max_seconds: float | None = None) -> tuple[str, float | None] | None:
    """A lossless file's verdict on its own: (its format, the cutoff in Hz or None when full band), or None when
    the file is lossy by its own format (an MP3 or OGG says nothing this way). Used on a song's paid WAV, beside
    the MP3 the song itself is measured on; a file named .wav or .flac whose bytes are an MP3 or OGG reads
    (its real format, None): lossy-sourced by what it is. None too when the file cannot tell
    (`LongTermSpectrum.decided`: silence, a tone, nothing near the top of the band); `decoding.AudioFileError`
    names a file that is not audio."""
    from .decoding import blocks, open_audio

    audio = open_audio(path)
    if audio.format not in LOSSLESS:  # an MP3's bytes under a lossless name: the MP3 in disguise, lossy as it is
        return (audio.format, None) if disguised(path, audio.format) else None
    spectrum = LongTermSpectrum(audio.sample_rate)
    for block in blocks(audio, max_seconds=max_seconds):
        spectrum.add(block)
    return (audio.format, spectrum.lossy_cutoff()) if spectrum.decided() else None


def disguised(path: str | Path, content: str) -> bool:
    """Whether a file named as lossless (.wav, .flac) holds a lossy format's data (`content`: what its bytes are)."""
    return content not in LOSSLESS and Path(path).suffix.lower().lstrip(".") in LOSSLESS


class LongTermSpectrum:
    """The file's average power spectrum, fed the same float blocks as the levels."""

    def __init__(self, rate: int) -> None:
        import numpy as np

        self.rate = rate
        self.window = np.hanning(FRAME)
        self.power = np.zeros(FRAME // 2 + 1)
        self.frames = 0
        self.pending = np.zeros(0)

    def add(self, block: Any) -> None:
        import numpy as np

        mono = np.asarray(block, dtype=float).mean(axis=1) if np.ndim(block) == 2 else np.asarray(block, dtype=float)
        samples = np.concatenate([self.pending, mono]) if len(self.pending) else mono
        whole = len(samples) // FRAME * FRAME
        if whole:
            frames = samples[:whole].reshape(-1, FRAME) * self.window
            self.power += np.square(np.abs(np.fft.rfft(frames, axis=1))).sum(axis=0)
            self.frames += len(frames)
        self.pending = samples[whole:]

    def decided(self) -> bool:
        """Whether the spectrum says anything: a cliff (`lossy_cutoff`), or content in the kilohertz under
        `NYQUIST_MARGIN_HZ` below Nyquist within `PRESENT_DB` of the loudest band (full band). Silence, an empty
        file, a tone or a recording with nothing up there cannot be told from an MP3's either way."""
        import numpy as np

        nyquist = self.rate / 2
        if not self.frames or nyquist - NYQUIST_MARGIN_HZ <= LOWEST_CUTOFF_HZ or not self.power.any():
            return False
        if not np.isfinite(self.power).all():
            return False
        if self.lossy_cutoff() is not None:
            return True
        level, centre = self._bands()
        highest = min(nyquist - NYQUIST_MARGIN_HZ, HIGHEST_CUTOFF_HZ)
        top = level[(centre >= highest - 1000.0) & (centre < highest)]
        return bool(len(top)) and float(top.mean()) >= float(level.max()) - PRESENT_DB

    def _bands(self) -> tuple[Any, Any]:
        """The spectrum in `BAND_HZ` bands: level (dB) and centre frequency (Hz) of each."""
        import numpy as np

        per_band = max(1, round(BAND_HZ / (self.rate / FRAME)))
        count = len(self.power) // per_band
        bands = self.power[: count * per_band].reshape(count, per_band).mean(axis=1)
        return 10 * np.log10(np.maximum(bands, 1e-30)), (np.arange(count) + 0.5) * per_band * self.rate / FRAME

    def lossy_cutoff(self) -> float | None:
        """The frequency (Hz) where the spectrum stops as a lossy encoder stops it, or None (full band, silence,
        too short, or nothing above `LOWEST_CUTOFF_HZ` to tell)."""
        import numpy as np

        nyquist = self.rate / 2
        if not self.frames or nyquist - NYQUIST_MARGIN_HZ <= LOWEST_CUTOFF_HZ or not self.power.any():
            return None
        bin_hz = self.rate / FRAME
        per_band = max(1, round(BAND_HZ / bin_hz))
        count = len(self.power) // per_band
        bands = self.power[: count * per_band].reshape(count, per_band).mean(axis=1)
        level = 10 * np.log10(np.maximum(bands, 1e-30))
        centre = (np.arange(count) + 0.5) * per_band * bin_hz
        loudest = float(level.max())
        below_bands = max(1, round(1000.0 / (per_band * bin_hz)))
        cliff_bands = max(1, round(CLIFF_WIDTH_HZ / (per_band * bin_hz)))
        highest = min(nyquist - NYQUIST_MARGIN_HZ, HIGHEST_CUTOFF_HZ)
        for edge in np.flatnonzero((centre >= LOWEST_CUTOFF_HZ) & (centre <= highest)):
            below = float(level[max(0, edge - below_bands) : edge].mean())
            above = level[edge + cliff_bands :]
            if len(above) < below_bands or below < loudest - PRESENT_DB:
                continue
            if float(above[:below_bands].mean()) <= below - CLIFF_DB and float(above.max()) <= below - REST_DB:
                return round(float(edge * per_band * bin_hz), -1)
        return None
