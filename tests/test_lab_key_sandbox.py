"""Issue 41's key on the sandbox's own songs, whose key is known: the synthesizer draws a tonic and major or minor
from the text (`sandbox.audio.song_params`). Half of them are in the natural minor, sounding its minor seventh
(VII, v) as often as a leading tone; Temperley's classical minor profile (minor seventh 1.5, leading tone 4.0) fitted
no key to many of those or read their relative major: 24 of these 48 read right with it. Some of the synthesizer's
progressions fit the relative as well (vi-IV-I-V, i-VI-III-VII), so not every song can be read."""

from __future__ import annotations

import numpy as np
import pytest

from ipymusicgen.lab.musical_key import PITCHES, estimate_key
from ipymusicgen.sandbox.audio import song_params, synthesize

pytestmark = pytest.mark.slow  # 48 songs of 30 s synthesized and through librosa's chroma

RATE = 16_000


def test_the_sandboxs_songs_read_the_key_they_were_synthesized_in() -> None:
    read, missed = 0, []
    for index in range(48):
        text = f"key reference {index}"
        params = song_params(text, sample_rate=RATE)
        truth = f"{PITCHES[params.tonic]} {'minor' if params.minor else 'major'}"
        found = estimate_key(synthesize(text, seconds=30, vocal=True, sample_rate=RATE))
        if found is not None and found.key == truth:
            read += 1
        else:
            missed.append((truth, found))
        assert found is None or (0.0 <= found.confidence <= 1.0 and found.runner_up != found.key)
    assert read >= 32, missed  # two thirds (34 measured)


AEOLIAN = {"i": (0, "minor"), "VI": (8, "major"), "VII": (10, "major")}


@pytest.mark.xfail(strict=True, reason="a known hole (issue 41): the vamp i-VII-VI-VII reads VII major")
def test_the_aeolian_vamp_reads_its_minor_key() -> None:
    """i-VII-VI-VII ("All Along the Watchtower"), where VII sounds twice as long as i, reads its minor key in 5 of 12
    tonics and VII major (at confidence 0.02 to 0.24) in 7 (measured at a51cdba). Left for later: the chords name
    the minor tonic, but only the relative key is weighed against it (`relative_share`). Passes once 10 read right."""
    from key_benchmark import chord, kit

    read = 0
    for tonic in range(12):
        rng = np.random.default_rng(4200 + tonic)
        chords = [AEOLIAN[n] for _ in range(2) for n in ("i", "VII", "VI", "VII")]
        mix = np.concatenate([chord(tonic + step, quality, 2.0, rng) for step, quality in chords])
        if tonic % 2:
            mix = mix + 0.5 * kit(len(mix) / RATE, float(rng.uniform(80, 140)), rng)
        found = estimate_key((0.8 * mix / np.abs(mix).max()).astype(np.float32))
        read += found is not None and found.key == f"{PITCHES[tonic]} minor"
    assert read >= 10, read
