"""Audio analysis with answers known in advance: click tracks at a tempo, chord progressions in a key, sines at
a level, silence at the ends; then the measures in the library (filters) and measured after archiving."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from helpers import wait_until
from signals import click_track, progression, sine, write_mp3, write_wav

from ipymusicgen import analyze
from ipymusicgen.archive.waveform import DecodeCapError
from ipymusicgen.lab import analysis, analyst
from ipymusicgen.lab.analysis import AnalysisUnavailableError, analyze_file
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library, LibrarySong
from ipymusicgen.storage.journal import Journal

pytestmark = pytest.mark.slow  # librosa's first tempo estimate compiles and imports for seconds


@pytest.mark.parametrize("bpm", [90, 120, 140])
def test_a_click_track_has_its_tempo_no_key_and_its_silences(tmp_path: Path, bpm: int) -> None:
    path = write_wav(tmp_path / f"click-{bpm}.wav", click_track(bpm, 20, lead=1.5, tail=2.0))
    found = analyze_file(path)
    assert found.bpm == pytest.approx(bpm, rel=0.02)
    assert found.key is None  # clicks have no key
    assert found.silence_start_s == pytest.approx(1.5, abs=0.02)
    last_click = (len(np.arange(0, 20 - 0.02, 60 / bpm)) - 1) * 60 / bpm
    assert found.silence_end_s == pytest.approx(2.0 + 20 - last_click - 0.02, abs=0.05)
    assert found.duration_s == pytest.approx(23.5, abs=0.01)


@pytest.mark.parametrize(
    ("chords", "key", "writer"),
    [
        ([("A", "minor"), ("D", "minor"), ("E", "major"), ("A", "minor")], "A minor", write_mp3),
        ([("C", "major"), ("F", "major"), ("G", "major"), ("C", "major")], "C major", write_wav),
        ([("E", "major"), ("A", "major"), ("B", "major"), ("E", "major")], "E major", write_mp3),
        ([("D", "minor"), ("G", "minor"), ("A", "major"), ("D", "minor")], "D minor", write_wav),
    ],
)
def test_a_chord_progression_is_in_its_key(tmp_path: Path, chords: list[tuple[str, str]], key: str, writer) -> None:
    suffix = ".mp3" if writer is write_mp3 else ".wav"
    found = analyze_file(writer(tmp_path / f"chords{suffix}", progression(chords)))
    assert found.key == key
    assert found.bpm == pytest.approx(60, rel=0.03)  # one chord a second


@pytest.mark.parametrize(("dbfs", "channels", "lufs"), [(-20.0, 1, -23.0), (-6.0, 2, -6.0), (-12.0, 2, -12.0)])
def test_a_sine_has_its_loudness_and_true_peak(tmp_path: Path, dbfs: float, channels: int, lufs: float) -> None:
    """BS.1770: a full-scale 997 Hz sine in one channel reads -3.01 LKFS; in two, 0."""
    found = analyze_file(write_wav(tmp_path / "sine.wav", sine(997, 10, dbfs, channels=channels)))
    assert found.lufs == pytest.approx(lufs, abs=0.3)
    assert found.true_peak_db == pytest.approx(dbfs, abs=0.3)
    assert found.bpm is None and found.key is None  # a held tone has no beat and names no key


def test_silence_measures_nothing_but_its_length(tmp_path: Path) -> None:
    found = analyze_file(write_wav(tmp_path / "quiet.wav", np.zeros(44_100 * 3)))
    assert (found.bpm, found.key, found.lufs, found.true_peak_db) == (None, None, None, None)
    assert found.silence_start_s == pytest.approx(3.0, abs=0.01) and "no tempo" in str(found)


def test_decoding_stops_at_the_cap(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "long.wav", np.zeros(44_100 * 12))
    with pytest.raises(DecodeCapError, match="past 10 s"):
        analyze_file(path, max_seconds=10)


def test_without_the_extra_the_error_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "available", lambda: False)
    with pytest.raises(AnalysisUnavailableError, match=r"ipymusicgen\[analysis\]"):
        analyze_file(tmp_path / "x.wav")


def test_measures_are_kept_in_the_library_and_filter_songs(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="auto", style="to measure").ids)
        client.wait(ids)
    fast = write_wav(tmp_path / "fast.wav", click_track(128, 12) * 0.5)
    slow = write_mp3(tmp_path / "slow.mp3", progression([("A", "minor"), ("D", "minor"), ("E", "major")]))
    with Library(path) as library:
        library.store.analysed(ids[0], analyze_file(fast).as_dict())
        library.store.analysed(ids[1], analyze_file(slow).as_dict())
        assert [s.id for s in library.songs(bpm=(110, 130))] == [ids[0]]
        assert [s.id for s in library.songs(key="a  MINOR")] == [ids[1]]
        loud = library.song(ids[1]).lufs
        assert loud is not None and [s.id for s in library.songs(lufs=(loud - 1, None))] == [ids[1]]
        assert library.count(bpm=(None, 100)) == 1 and library.count(bpm=(200, None)) == 0
        for bad in ((1, 2, 3), "fast", (float("nan"), 1), (True, 3)):
            with pytest.raises(ValueError, match="bpm"):
                library.songs(bpm=bad)  # type: ignore[arg-type]


def _measured(song: LibrarySong) -> bool:
    """The background analysis has answered for this song (its measures, or why there are none)."""
    return song.lufs is not None or song.analysis_error is not None


def test_an_archived_song_is_measured_in_the_background_and_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.workspace import session

    monkeypatch.setenv("MUSICGEN_ANALYZE", "on")
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    handed_over = analyst.Analyst.submit  # a busy machine: the analyst hears of a song well after it is saved
    monkeypatch.setattr(analyst.Analyst, "submit", lambda self, *a: (time.sleep(1.0), handed_over(self, *a)))
    journal = tmp_path / "journal.sqlite3"
    with Sandbox(stage_seconds=0.1, song_seconds=6, faults="", keys={"mg-analysis-key": 20}) as server:
        session.configure(api_key="mg-analysis-key", base_url=server.base_url, v2_base_url=server.v2_base_url,
                          journal_path=str(journal), poll_interval=0.05)  # fmt: skip
        try:
            client = session.get_client()
            ids = list(client.generate(action="auto", style="measured").ids)
            client.wait(ids)
            with Library(journal) as library:
                wait_until(lambda: all(_measured(library.song(i)) for i in ids), "both songs measured", timeout=120)
                measured = [library.song(i) for i in ids]
            assert all(s.analysis_error is None and s.lufs is not None for s in measured), measured
            again = analyze(ids[0])  # by id: the archived file, measured again and kept
            assert again.lufs == pytest.approx(measured[0].lufs, abs=0.01)
        finally:
            session.shutdown()
            session.configure(api_key=None, base_url=None, v2_base_url=None, journal_path=None, poll_interval=None)


@pytest.mark.parametrize("seed_text", ["m", "folk dawn", "jazz night", "lo-fi rain"])
def test_the_sandboxs_own_songs_are_measured_at_the_tempo_they_were_made_at(tmp_path: Path, seed_text: str) -> None:
    from ipymusicgen.sandbox.audio import render_song, song_params

    path = tmp_path / "song.mp3"
    path.write_bytes(render_song(seed_text, seconds=40, vocal=True)[0])
    assert analyze_file(path).bpm == pytest.approx(song_params(seed_text).bpm, rel=0.02)
