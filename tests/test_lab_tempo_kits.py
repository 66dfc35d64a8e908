"""Issue 41's tempo: drum kits (kick on every beat, snare on 2 and 4, eighth-note hi-hats) and songs (a kit, a
bass line and chords) from 60 to 180 BPM read their tempo within 2%, never its half or double; every tempo comes
with a confidence from 0 to 1 and its half and double; noise has none. Seeded signals, other timbres than
test_lab_tempo's drums (a pitched kick, a bright hat, a louder snare)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from signals import RATE, drum_kit, write_wav

from ipymusicgen.lab.analysis import analyze_file

pytestmark = pytest.mark.slow  # librosa per song


def kit(bpm: float, seconds: float = 24, *, hats: float = 0.35, seed: int = 1) -> np.ndarray:
    out = drum_kit(seconds, bpm, np.random.default_rng(seed), hats=hats)
    return 0.9 * out / np.abs(out).max()


def song(bpm: float, seconds: float = 24, seed: int = 2) -> np.ndarray:
    """A kit, an eighth-note-free bass on the beats (root of each bar's chord) and held chords, one a bar."""
    beat = 60 / bpm
    t = np.arange(int(seconds * RATE)) / RATE
    roots = (57, 53, 48, 55)  # A, F, C, G
    bar = (t // (4 * beat)).astype(int) % 4
    root = np.take(roots, bar)
    pulse = np.exp(-(t % beat) * 8)
    bass = 0.3 * np.sin(2 * np.pi * 440 * 2 ** ((root - 12 - 69) / 12) * t) * pulse
    pad = sum(0.06 * np.sin(2 * np.pi * 440 * 2 ** ((root + step - 69) / 12) * t) for step in (12, 16, 19))
    mix = kit(bpm, seconds, seed=seed) + bass + pad
    return 0.9 * mix / np.abs(mix).max()


@pytest.mark.parametrize("bpm", [63, 78, 84, 97, 113, 128, 146, 158, 172, 177])
@pytest.mark.parametrize("hats", [0.35, 0.8])
def test_a_drum_kit_reads_its_tempo_not_its_half_or_double(tmp_path: Path, bpm: int, hats: float) -> None:
    found = analyze_file(write_wav(tmp_path / "kit.wav", kit(bpm, hats=hats)))
    assert found.bpm == pytest.approx(bpm, rel=0.02), f"kit at {bpm} BPM read {found.bpm}"
    assert 0.0 <= (found.bpm_confidence or -1) <= 1.0
    assert found.bpm_half == pytest.approx(found.bpm / 2, abs=0.06)
    assert found.bpm_double == pytest.approx(found.bpm * 2, abs=0.11)


@pytest.mark.parametrize("bpm", [60, 88, 124, 152, 180])
def test_a_song_with_bass_and_chords_reads_its_tempo(tmp_path: Path, bpm: int) -> None:
    found = analyze_file(write_wav(tmp_path / "song.wav", song(bpm)))
    assert found.bpm == pytest.approx(bpm, rel=0.02), f"song at {bpm} BPM read {found.bpm}"
    assert found.bpm_confidence is not None and 0.0 < found.bpm_confidence <= 1.0


def test_noise_has_no_tempo_and_no_confidence(tmp_path: Path) -> None:
    noise = np.random.default_rng(7).normal(0, 0.2, RATE * 12)
    found = analyze_file(write_wav(tmp_path / "noise.wav", noise))
    assert (found.bpm, found.bpm_confidence, found.bpm_half, found.bpm_double) == (None, None, None, None)


def test_a_click_track_is_sure_of_its_tempo(tmp_path: Path) -> None:
    from signals import click_track

    found = analyze_file(write_wav(tmp_path / "click.wav", click_track(107, 20)))
    assert found.bpm == pytest.approx(107, rel=0.02) and (found.bpm_confidence or 0) >= 0.8


def test_a_long_song_reads_its_tempo_from_segments_spread_over_it(tmp_path: Path) -> None:
    """150 s: eight 20 s segments, of which five (first and last included) give librosa's estimate."""
    found = analyze_file(write_wav(tmp_path / "long.wav", song(118, seconds=150)))
    assert found.bpm == pytest.approx(118, rel=0.02)
