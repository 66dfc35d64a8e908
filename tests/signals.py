"""Test signals with known answers: click tracks at a tempo, chord progressions in a key, sines at a level.

Written as 16-bit WAV (the standard library's `wave`) or MP3 (lameenc, as the sandbox encodes), at 44.1 kHz.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

RATE = 44_100
NOTE = {"C": 0, "C#": 1, "D": 2, "D#": 3, "E": 4, "F": 5, "F#": 6, "G": 7, "G#": 8, "A": 9, "A#": 10, "B": 11}


def write_wav(path: Path, signal: np.ndarray, *, rate: int = RATE) -> Path:
    """`signal` (samples, or samples x channels) in [-1, 1] as a 16-bit WAV."""
    frames = np.atleast_2d(signal.T).T if signal.ndim == 1 else signal
    pcm = (np.clip(frames, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(pcm.shape[1])
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


def write_mp3(path: Path, signal: np.ndarray, *, rate: int = RATE) -> Path:
    import lameenc

    frames = np.atleast_2d(signal.T).T if signal.ndim == 1 else signal
    encoder = lameenc.Encoder()
    encoder.set_bit_rate(128)
    encoder.set_in_sample_rate(rate)
    encoder.set_channels(frames.shape[1])
    encoder.set_quality(5)
    pcm = (np.clip(frames, -1, 1) * 32767).astype("<i2")
    path.write_bytes(encoder.encode(pcm.tobytes()) + encoder.flush())
    return path


def click_track(bpm: float, seconds: float, *, lead: float = 0.0, tail: float = 0.0) -> np.ndarray:
    """A click (a 20 ms decaying 1 kHz burst) on every beat, with silence before and after."""
    t = np.arange(int(0.02 * RATE)) / RATE
    click = 0.8 * np.sin(2 * np.pi * 1000 * t) * np.exp(-t * 200)
    body = np.zeros(int(seconds * RATE))
    step = 60.0 / bpm
    for beat in np.arange(0, seconds - 0.02, step):
        start = int(beat * RATE)
        body[start : start + len(click)] += click
    return np.concatenate([np.zeros(int(lead * RATE)), body, np.zeros(int(tail * RATE))])


def chord(root: str, quality: str, seconds: float, octave: int = 4) -> np.ndarray:
    """A triad (root, third, fifth) of sine partials with a few harmonics, 0.2 amplitude each note."""
    base = 12 * (octave + 1) + NOTE[root]
    third = 3 if quality == "minor" else 4
    t = np.arange(int(seconds * RATE)) / RATE
    out = np.zeros_like(t)
    for midi in (base, base + third, base + 7, base - 12):
        freq = 440.0 * 2 ** ((midi - 69) / 12)
        for harmonic, weight in ((1, 1.0), (2, 0.3), (3, 0.1)):
            out += 0.12 * weight * np.sin(2 * np.pi * freq * harmonic * t)
    return out * np.minimum(1, np.minimum(t, t[::-1]) * 50)  # no clicks at the edges


def progression(chords: list[tuple[str, str]], seconds_each: float = 1.0, repeats: int = 4) -> np.ndarray:
    return np.concatenate([chord(root, quality, seconds_each) for _ in range(repeats) for root, quality in chords])


def sine(freq: float, seconds: float, dbfs: float, *, channels: int = 1) -> np.ndarray:
    """A sine whose peak is `dbfs` relative to full scale."""
    t = np.arange(int(seconds * RATE)) / RATE
    tone = 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * t)
    return tone if channels == 1 else np.stack([tone] * channels, axis=1)


def drum_kit(
    seconds: float, bpm: float, rng: np.random.Generator, *, hats: float = 0.3, rate: int = RATE
) -> np.ndarray:
    """Kick on every beat, snare on 2 and 4, hi-hat on the eighths (the tempo and key benchmarks' kit)."""
    beat = 60 / bpm
    t = np.arange(int(0.25 * rate)) / rate
    kick = np.sin(2 * np.pi * (45 + 120 * np.exp(-t * 40)) * t) * np.exp(-t * 18)
    snare = rng.normal(0, 0.6, len(t)) * np.exp(-t * 30) + 0.4 * np.sin(2 * np.pi * 200 * t) * np.exp(-t * 20)
    short = np.arange(int(0.04 * rate)) / rate
    hat = np.diff(rng.normal(0, 1, len(short)) * np.exp(-short * 120), prepend=0)
    out = np.zeros(int((seconds + 1) * rate))
    for number in range(int(seconds / beat)):
        start = int(number * beat * rate)
        out[start : start + len(kick)] += 0.9 * kick
        if number % 2:
            out[start : start + len(snare)] += 0.8 * snare
        for half in (0.0, 0.5):
            at = int((number + half) * beat * rate)
            out[at : at + len(hat)] += hats * hat
    return out[: int(seconds * rate)]
