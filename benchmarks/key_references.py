"""Key accuracy against references the lab did not make: Bach's four-part chorales as music21 ships them, and the
sandbox's songs.

Issue 41 asks for key accuracy on a reference set. GiantSteps Key (audio of Beatport previews) cannot be fetched
here; what can be is music21's corpus (a PyPI package): 400-odd of Bach's chorales in MusicXML whose encoders
wrote each one's key (its signature and, in most files, its mode). Those with a mode (major or minor) are the
references; each is rendered to audio here (every note three harmonics, a quarter note 0.6 s, 16 kHz mono, seeded)
and `lab.musical_key.estimate_key` reads it (two processes at a time). The score is MIREX's weighted key score as
`mir_eval.key` gives it (1 the key, 0.5 a fifth above it in the same mode, 0.3 its relative, 0.2 its parallel,
0 else), beside the same score on the sandbox's songs (the synthesizer's own key) and on the tests' generated
benchmark (tests/key_benchmark.py).

What the references are and are not: the truth is the key the encoder wrote at the top, so a chorale that ends
elsewhere (a Picardy third, a modal melody harmonised in another key) counts against the reader; synthesized
notes are far cleaner than a recording. `python -m benchmarks.key_references` prints docs/benchmarks.md's table.
Needs the `key-references` extra (music21, mir_eval).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

RATE = 16_000
QUARTER_S = 0.6
"""A quarter note lasts 0.6 s (100 BPM), a chorale's usual pace."""
SEED = 41
CLASSES = ("correct", "fifth", "relative", "parallel", "other", "none")


def chorale_paths() -> list[str]:
    from music21 import corpus

    return sorted(str(path) for path in corpus.getComposer("bach"))


def chorale(path: str) -> tuple[str, str, Any] | None:
    """(name, key written by the encoder as "C major", parsed score), or None when the file names no mode (a bare
    signature does not say the key) or music21 cannot read it."""
    from music21 import converter, key

    try:
        score = converter.parse(path)
    except Exception:  # a file music21 cannot read is no reference
        return None
    written = next(iter(score.recurse().getElementsByClass(key.KeySignature)), None)
    if not isinstance(written, key.Key) or written.mode not in ("major", "minor"):
        return None
    return Path(path).name.split(".mxl")[0], f"{_name(written.tonic.pitchClass)} {written.mode}", score


def chorales() -> Iterator[tuple[str, str, Any]]:
    """Every chorale whose file names its mode (`chorale`)."""
    for path in chorale_paths():
        if (found := chorale(path)) is not None:
            yield found


PITCHES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")


def _name(pitch_class: int) -> str:
    return PITCHES[pitch_class % 12]


def render(score: Any, rng: np.random.Generator) -> np.ndarray:
    """Every note of every part as a tone of three harmonics (weights drawn per note), faded in and out."""
    notes = [
        (float(element.offset) * QUARTER_S, float(element.quarterLength) * QUARTER_S, pitch.midi)
        for element in score.stripTies().flatten().notes
        for pitch in element.pitches
        if element.quarterLength > 0
    ]
    end = max((start + length for start, length, _ in notes), default=0.0)
    out = np.zeros(int((end + 0.5) * RATE), dtype=np.float64)
    for start, length, midi in notes:
        t = np.arange(int(length * RATE)) / RATE
        freq = 440.0 * 2 ** ((midi - 69) / 12)
        tone = sum(
            weight * np.sin(2 * np.pi * freq * harmonic * t + rng.uniform(0, 2 * np.pi))
            for harmonic, weight in ((1, 1.0), (2, rng.uniform(0.2, 0.5)), (3, rng.uniform(0.05, 0.2)))
        )
        first = int(start * RATE)
        out[first : first + len(t)] += tone * np.minimum(1, np.minimum(t, t[::-1]) * 40)
    peak = np.abs(out).max()
    return (0.8 * out / peak).astype(np.float32) if peak else out.astype(np.float32)


def classify(reference: str, estimate: str | None) -> str:
    """MIREX's class of an estimate against the reference (mir_eval's weighted score says the same in numbers)."""
    import mir_eval

    if estimate is None:
        return "none"
    score = mir_eval.key.weighted_score(reference, estimate)
    return {1.0: "correct", 0.5: "fifth", 0.3: "relative", 0.2: "parallel"}.get(round(score, 1), "other")


def score_of(classes: Counter[str]) -> float:
    weights = {"correct": 1.0, "fifth": 0.5, "relative": 0.3, "parallel": 0.2}
    total = sum(classes.values())
    return sum(weights.get(name, 0.0) * count for name, count in classes.items()) / total if total else 0.0


def read_chorale(job: tuple[int, str]) -> tuple[str, str, str | None, float | None] | None:
    """(name, written key, key read, confidence) of one chorale file, rendered with its own seed; None: no reference."""
    from ipymusicgen.lab.musical_key import estimate_key

    index, path = job
    found = chorale(path)
    if found is None:
        return None
    name, truth, score = found
    estimate = estimate_key(render(score, np.random.default_rng(SEED + index)))
    return name, truth, estimate.key if estimate else None, estimate.confidence if estimate else None


def on_chorales(jobs: int = 2) -> dict[str, Any]:
    from multiprocessing import Pool

    started = time.time()
    work = list(enumerate(chorale_paths()))
    with Pool(jobs) as pool:
        rows = [row for row in pool.map(read_chorale, work, chunksize=8) if row is not None]
    classes = Counter(classify(truth, found) for _, truth, found, _ in rows)
    return {"rows": rows, "classes": classes, "wall_s": time.time() - started}


def on_sandbox(count: int = 48, seconds: float = 60.0) -> dict[str, Any]:
    """The sandbox's own songs (`sandbox.audio.synthesize`, with vocals), whose key is the synthesizer's choice
    (`song_params`: a tonic and major or minor, drawn from the text). Some of its progressions fit the relative key
    as well (vi-IV-I-V; i-VI-III-VII), so a reader may honestly take the relative there."""
    from ipymusicgen.lab.musical_key import estimate_key
    from ipymusicgen.sandbox.audio import song_params, synthesize

    rows = []
    for index in range(count):
        text = f"key reference {index}"
        params = song_params(text, sample_rate=RATE)
        truth = f"{_name(params.tonic)} {'minor' if params.minor else 'major'}"
        found = estimate_key(synthesize(text, seconds=seconds, vocal=True, sample_rate=RATE))
        rows.append((text, truth, found.key if found else None, found.confidence if found else None))
    return {"rows": rows, "classes": Counter(classify(truth, found) for _, truth, found, _ in rows)}


def on_generated() -> dict[str, Any]:
    """The tests' own generated benchmark (24 keys x 3 progressions x with/without drums), by the same score."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import key_benchmark

    from ipymusicgen.lab.musical_key import estimate_key

    classes: Counter[str] = Counter()
    for truth, _progression, _drums, signal in key_benchmark.cases():
        found = estimate_key(signal)
        classes[classify(truth, found.key if found else None)] += 1
    return {"classes": classes}


def table(results: dict[str, dict[str, Any]]) -> str:
    head = "| references | n | " + " | ".join(CLASSES) + " | MIREX weighted score |"
    lines = [head, "|" + "---|" * (len(CLASSES) + 3)]
    for label, found in results.items():
        classes = found["classes"]
        counts = " | ".join(str(classes.get(name, 0)) for name in CLASSES)
        lines.append(f"| {label} | {sum(classes.values())} | {counts} | {score_of(classes):.3f} |")
    return "\n".join(lines)


def main() -> None:
    chorale = on_chorales()
    results = {
        "Bach chorales (music21 corpus, the encoder's key)": chorale,
        "the sandbox's songs (its synthesizer's key)": on_sandbox(),
        "generated progressions (tests/key_benchmark.py)": on_generated(),
    }
    print(table(results))
    by_mode = Counter((truth.split()[1], truth == found) for _, truth, found, _ in chorale["rows"])
    for mode in ("major", "minor"):
        print(f"{mode}: {by_mode[(mode, True)]} of {by_mode[(mode, True)] + by_mode[(mode, False)]} exact")
    sure = [(truth == found, confidence) for _, truth, found, confidence in chorale["rows"] if confidence is not None]
    for floor in (0.0, 0.3, 0.6):
        kept = [right for right, confidence in sure if confidence >= floor]
        if kept:
            print(f"confidence >= {floor}: {sum(kept)} of {len(kept)} exact")
    print(f"chorales: {chorale['wall_s']:.0f} s")
    if "-v" in sys.argv:
        for row in chorale["rows"]:
            print(*row, sep="\t")


if __name__ == "__main__":
    main()
