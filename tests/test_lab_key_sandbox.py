"""Issue 41's key on the sandbox's own songs, whose key is known: the synthesizer draws a tonic and major or minor
from the text (`sandbox.audio.song_params`). Half of them are in the natural minor, sounding its minor seventh
(VII, v) as often as a leading tone; Temperley's classical minor profile (minor seventh 1.5, leading tone 4.0) fitted
no key to many of those or read their relative major: 24 of these 48 read right with it. Some of the synthesizer's
progressions fit the relative as well (vi-IV-I-V, i-VI-III-VII), so not every song can be read."""

from __future__ import annotations

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
