"""Issue 41's adherence: a request that named a tempo, a key or a length shows it beside what was measured, in
`analyze()` (by id: the song's style and prompt) and in the measures' own line."""

from __future__ import annotations

import dataclasses

import pytest

from ipymusicgen.lab.adherence import asked_of, compare, summary
from ipymusicgen.lab.analysis import Analysis


@pytest.mark.parametrize(
    ("texts", "seconds", "asked"),
    [
        (["deep house, 128 bpm, in D minor"], None, {"bpm": 128.0, "key": "D minor"}),
        (["lo-fi", "a slow one at 72BPM in Eb major"], 90, {"bpm": 72.0, "key": "D# major", "seconds": 90.0}),
        (["trap 140-bpm in f# minor, 808s"], None, {"bpm": 140.0, "key": "F# minor"}),
        (["in Bb min, 96.5 bpm"], None, {"bpm": 96.5, "key": "A# minor"}),
        (["nothing named here", None, ""], None, {}),
        (["1280 bpm is not a tempo, 5 bpm neither"], None, {}),
        (["in love with jazz", "interlude in the mix"], None, {}),  # "in" without a key is no key
        (["sad ballad in a minor key", "in a major tonality"], None, {}),  # "a" the article, not the note
        (["in a minor key, then in A minor key"], None, {"key": "A minor"}),
        (["lofi in a minor, 80 bpm"], None, {"bpm": 80.0, "key": "A minor"}),
        (["a minor-key ballad in a minor-key mood", "in a major way, in a minor role"], None, {}),
        (["strings in a minor with a pulse"], None, {"key": "A minor"}),  # a joining word: still the note
    ],
)
def test_a_request_names_its_tempo_key_and_length(texts, seconds, asked) -> None:
    assert asked_of(texts, seconds=seconds) == asked


def _measures(**changes) -> Analysis:
    base = Analysis(bpm=64.2, key="F major", lufs=-14.0, true_peak_db=-1.0, silence_start_s=0.0, silence_end_s=0.0,
                    duration_s=88.0, seconds=1.0)  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_asked_beside_measured_says_what_is_met_and_how_it_is_missed() -> None:
    found = _measures(asked={"bpm": 128.0, "key": "D minor", "seconds": 90.0})
    adherence = found.adherence
    assert adherence["bpm"] == {"asked": 128.0, "measured": 64.2, "met": False, "octave": True}
    assert adherence["key"] == {"asked": "D minor", "measured": "F major", "met": False, "relative": True}
    assert adherence["seconds"] == {"asked": 90.0, "measured": 88.0, "met": True}
    line = str(found)
    assert "asked 128 BPM, measured 64.2 BPM (its half or double) ✗" in line
    assert "asked D minor, measured F major (its relative) ✗" in line and "asked 90 s, measured 88 s ✓" in line


def test_nothing_measured_is_neither_met_nor_missed_and_nothing_asked_shows_nothing() -> None:
    assert compare({"bpm": 120.0}, {"bpm": None})["bpm"]["met"] is None
    assert "nothing" in summary(compare({"key": "C major"}, {"key": None}))
    assert _measures().adherence == {} and "asked" not in str(_measures())
