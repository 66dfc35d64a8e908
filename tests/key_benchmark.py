"""The key benchmark the tests generate (seeded): all 24 keys, several progressions whose key is decidable, each
with and without a drum kit, at 16 kHz (the analysis rate), and the progression vi-IV-I-V, which fits a major key
and its relative minor alike. `python tests/key_benchmark.py` prints the table docs/benchmarks.md shows."""

from __future__ import annotations

import numpy as np
from signals import drum_kit

RATE = 16_000
PITCHES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
MAJOR = {"I": (0, "major"), "ii": (2, "minor"), "IV": (5, "major"), "V": (7, "major"), "vi": (9, "minor")}
MINOR = {"i": (0, "minor"), "iv": (5, "minor"), "V": (7, "major"), "VI": (8, "major"), "III": (3, "major")}
DECIDABLE = {
    "major": [["I", "IV", "V", "I"], ["I", "ii", "V", "I"], ["I", "vi", "IV", "V", "I"]],
    "minor": [["i", "iv", "V", "i"], ["i", "VI", "iv", "V", "i"], ["i", "III", "iv", "V", "i"]],
}
AMBIGUOUS = ["vi", "IV", "I", "V"]


def chord(root: int, quality: str, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A triad over its root an octave down, each note three harmonics (weights drawn per chord), faded."""
    t = np.arange(int(seconds * RATE)) / RATE
    third = 3 if quality == "minor" else 4
    base = 48 + root % 12  # C3 .. B3
    out = np.zeros_like(t)
    for midi in (base, base + third, base + 7, base - 12):
        freq = 440.0 * 2 ** ((midi - 69) / 12)
        for harmonic, weight in ((1, 1.0), (2, rng.uniform(0.2, 0.5)), (3, rng.uniform(0.05, 0.2))):
            out += 0.1 * weight * np.sin(2 * np.pi * freq * harmonic * t + rng.uniform(0, 2 * np.pi))
    return out * np.minimum(1, np.minimum(t, t[::-1]) * 40)


def kit(seconds: float, bpm: float, rng: np.random.Generator) -> np.ndarray:
    """Kick on every beat, snare on 2 and 4, hi-hat on the eighths, at the analysis rate."""
    return drum_kit(seconds, bpm, rng, rate=RATE)


def song(tonic: int, mode: str, numerals: list[str], *, drums: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = MAJOR if mode == "major" else MINOR
    chords = [chord(tonic + table[n][0], table[n][1], 2.0, rng) for _ in range(2) for n in numerals]
    mix = np.concatenate(chords)
    if drums:
        mix = mix + 0.5 * kit(len(mix) / RATE, float(rng.uniform(80, 140)), rng)
    return (0.8 * mix / np.abs(mix).max()).astype(np.float32)


def cases() -> list[tuple[str, str, bool, np.ndarray]]:
    """(truth, progression, drums, signal) for every key, decidable progression and with/without drums."""
    found = []
    seed = 0
    for mode in ("major", "minor"):
        for tonic in range(12):
            for numerals in DECIDABLE[mode]:
                for drums in (False, True):
                    seed += 1
                    truth = f"{PITCHES[tonic]} {mode}"
                    signal = song(tonic, mode, numerals, drums=drums, seed=seed)
                    found.append((truth, "-".join(numerals), drums, signal))
    return found


def relative_minor(major: str) -> str:
    return f"{PITCHES[(PITCHES.index(major.split()[0]) + 9) % 12]} minor"


def run() -> dict[str, object]:
    """Accuracy per mode, per progression, with and without drums; the ambiguous progression's confidences."""
    from ipymusicgen.lab.musical_key import estimate_key

    rows = []
    for truth, progression, drums, signal in cases():
        found = estimate_key(signal)
        rows.append((truth, progression, drums, found.key if found else None, found.confidence if found else None))
    ambiguous = []
    for tonic in range(12):
        found = estimate_key(song(tonic, "major", AMBIGUOUS, drums=bool(tonic % 2), seed=1000 + tonic))
        ambiguous.append((f"{PITCHES[tonic]} major", found))
    return {"rows": rows, "ambiguous": ambiguous}


if __name__ == "__main__":
    import collections

    result = run()
    rows = result["rows"]
    groups: dict[str, list[bool]] = collections.defaultdict(list)
    for truth, progression, drums, key, _confidence in rows:
        groups[f"{truth.split()[1]} {progression} {'drums' if drums else 'no drums'}"].append(key == truth)
        groups["all"].append(key == truth)
    for name, hits in groups.items():
        print(f"{name}: {sum(hits)}/{len(hits)}")
    print("wrong:", [(t, p, d, k, c) for t, p, d, k, c in rows if k != t])
    print("confidences right:", sorted(c for t, p, d, k, c in rows if k == t)[:10])
    for truth, found in result["ambiguous"]:
        print("ambiguous", truth, found)
