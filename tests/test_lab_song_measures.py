"""Issue 41's measures kept: every measure of a song's analysis (tempo confidence, half and double, key confidence
and runner-up, LRA, maximum momentary and short-term loudness, the lossy verdict, ...) is kept in the journal with
the file it was taken from, so a second analysis of the same unchanged file measures nothing; a changed file, a
new WAV or a newer analysis measures again; a failure forgets the old numbers. Hostile rows and values too."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest
from signals import click_track, write_wav
from test_lab_lossy import noise, through_mp3

from ipymusicgen.lab import song_analysis
from ipymusicgen.lab.analysis import Analysis, analyze_file
from ipymusicgen.lab.lossy import lossy_source
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.migrations import LATEST, migrate, version_of
from ipymusicgen.storage.song_measures import Source

pytestmark = pytest.mark.slow  # librosa per file

NEW_MEASURES = (
    "bpm_confidence", "bpm_half", "bpm_double", "key_confidence", "key_runner_up", "loudness_range_lu",
    "max_momentary_lufs", "max_short_term_lufs", "lossy_cutoff_hz", "lossy_checked",
)  # fmt: skip


class Counting:
    """The measuring functions, counted (in process: the worker's answers are the same `analyze_file`)."""

    def __init__(self) -> None:
        self.measured: list[Path] = []
        self.lossy: list[Path] = []

    def measure(self, path: Path) -> Analysis:
        self.measured.append(path)
        return analyze_file(path)

    def verdict(self, path: Path) -> tuple[str, float | None] | None:
        self.lossy.append(path)
        return lossy_source(path)


@pytest.fixture
def songs(sandbox: Sandbox, tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="auto", style="kept measures, 128 bpm in D minor").ids)
        client.wait(ids)
    return path, ids


def analyse(library: Library, song: str, path: Path, counting: Counting, wav: Path | None = None) -> Analysis:
    return song_analysis.analyse_song(
        library.store, song, path, wav=wav, measure=counting.measure, lossy=counting.verdict
    )


def test_a_second_analysis_of_the_same_file_measures_nothing(songs: tuple[Path, list[str]], tmp_path: Path) -> None:
    journal, ids = songs
    audio = write_wav(tmp_path / "song.wav", click_track(128, 12) * 0.5)
    counting = Counting()
    with Library(journal) as library:
        first = analyse(library, ids[0], audio, counting)
        assert first.bpm == pytest.approx(128, rel=0.02) and first.lossy_checked is None  # clicks: no verdict
        again = analyse(library, ids[0], audio, counting)
        assert again == first and counting.measured == [audio]
        kept = library.store.measures_of([ids[0], ids[1]])
        assert set(kept) == {ids[0]}
        assert all(name in kept[ids[0]] for name in NEW_MEASURES)
        assert kept[ids[0]]["bpm_confidence"] == first.bpm_confidence is not None
        assert library.song(ids[0]).bpm == first.bpm  # the filterable columns as before
    with Library(journal) as reopened:  # another kernel on the same journal
        assert analyse(reopened, ids[0], audio, counting) == first and len(counting.measured) == 1
        other = analyse(reopened, ids[1], audio, counting)  # another song: measured for itself
        assert dataclasses.replace(other, seconds=0) == dataclasses.replace(first, seconds=0)
        assert len(counting.measured) == 2


def test_a_changed_file_a_new_version_or_a_failure_measures_again(
    songs: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, ids = songs
    audio = write_wav(tmp_path / "song.wav", click_track(100, 10) * 0.5)
    counting = Counting()
    with Library(journal) as library:
        slow = analyse(library, ids[0], audio, counting)
        write_wav(audio, click_track(140, 10) * 0.5)  # rewritten in place, same name
        os.utime(audio, ns=(1, 1))  # even with its time set back: its size or time differ from the kept file's
        fast = analyse(library, ids[0], audio, counting)
        assert len(counting.measured) == 2 and fast.bpm != slow.bpm
        monkeypatch.setattr(song_analysis, "MEASURES_VERSION", song_analysis.MEASURES_VERSION + 1)
        analyse(library, ids[0], audio, counting)
        assert len(counting.measured) == 3
        audio.write_bytes(b"<!doctype html><title>not found</title>")
        with pytest.raises(ValueError, match="HTML"):
            analyse(library, ids[0], audio, counting)
        assert library.store.measures_of([ids[0]]) == {}
        assert library.song(ids[0]).analysis_error and library.song(ids[0]).bpm is None


def test_the_verdict_comes_from_the_songs_wav_and_a_new_wav_is_judged_again(
    songs: tuple[Path, list[str]], tmp_path: Path
) -> None:
    journal, ids = songs
    mp3_like = write_wav(tmp_path / "song.wav", click_track(120, 8) * 0.5)
    wav = write_wav(tmp_path / "paid.wav", through_mp3(noise(), 128))
    counting = Counting()
    with Library(journal) as library:
        lossy = analyse(library, ids[0], mp3_like, counting, wav=wav)
        assert lossy.lossy_checked == "wav" and lossy.lossy_cutoff_hz and 15_500 <= lossy.lossy_cutoff_hz <= 17_500
        assert "lossy source (the WAV cut at" in lossy.lossy_verdict
        assert analyse(library, ids[0], mp3_like, counting, wav=wav) == lossy and len(counting.lossy) == 1
        write_wav(wav, noise(seconds=9))  # the WAV made again, full band this time
        full = analyse(library, ids[0], mp3_like, counting, wav=wav)
        assert full.lossy_cutoff_hz is None and full.lossy_verdict == "the WAV is full band (not from an MP3)"
        assert len(counting.lossy) == 2 and len(counting.measured) == 2
        wav.write_bytes(b"")  # a WAV that is no audio: no verdict, the song's own measures stand
        broken = analyse(library, ids[0], mp3_like, counting, wav=wav)
        assert broken.bpm == full.bpm and broken.lossy_checked is None and broken.lossy_cutoff_hz is None


@pytest.mark.parametrize(
    "row",
    ["not json", "[1, 2]", '{"bpm": "fast", "nonsense_field": 1}', "null", '{"bpm": true}'],
    ids=["text", "list", "wrong-types", "null", "bool"],
)
def test_a_damaged_kept_row_is_measured_again(songs: tuple[Path, list[str]], tmp_path: Path, row: str) -> None:
    journal, ids = songs
    audio = write_wav(tmp_path / "song.wav", click_track(110, 8) * 0.5)
    counting = Counting()
    with Library(journal) as library:
        analyse(library, ids[0], audio, counting)
        with library.store.write() as db:
            db.execute("UPDATE song_measures SET measures = ? WHERE song = ?", (row, ids[0]))
        found = analyse(library, ids[0], audio, counting)
        assert found.bpm == pytest.approx(110, rel=0.02) and len(counting.measured) == 2
        assert analyse(library, ids[0], audio, counting) == found and len(counting.measured) == 2  # kept anew


def test_values_that_are_not_numbers_are_kept_as_none_and_a_huge_object_not_at_all(
    songs: tuple[Path, list[str]], tmp_path: Path
) -> None:
    journal, ids = songs
    audio = write_wav(tmp_path / "song.wav", np.zeros(44_100))
    source = Source.of(audio)
    with Library(journal) as library:
        library.store.keep_measures(
            ids[0], {"lufs": float("nan"), "bpm": float("inf"), "x": [float("-inf")]}, source, 9
        )
        assert library.store.kept_measures(ids[0], source, 9) == {"lufs": None, "bpm": None, "x": [None]}
        assert library.store.kept_measures(ids[0], source, 8) is None
        assert library.store.kept_measures(ids[0], None, 9) is None
        library.store.keep_measures(ids[1], {"notes": "x" * 50_000}, source, 9)
        assert library.store.kept_measures(ids[1], source, 9) is None
    assert Source.of(tmp_path / "missing.wav") is None and Source.of("bad\0name") is None


def test_the_table_is_a_numbered_migration_of_the_journal(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None)
    try:
        assert migrate(db) == LATEST == version_of(db)
        columns = {row[1] for row in db.execute("PRAGMA table_info(song_measures)")}
        assert {"song", "measures", "path", "size", "mtime_ns", "version", "measured_at"} <= columns
    finally:
        db.close()


def test_the_worker_gives_a_files_verdict_without_compiling_anything(tmp_path: Path) -> None:
    from signals import write_mp3

    from ipymusicgen.lab.analysis_worker import AnalysisWorker
    from ipymusicgen.lab.decoding import AudioFileError

    lossy = write_wav(tmp_path / "paid.wav", through_mp3(noise(), 96))
    page = tmp_path / "page.wav"
    page.write_bytes(b"<html><body>404</body></html>")
    worker = AnalysisWorker(tmp_path / "cache")
    try:
        assert worker.lossy(lossy) == lossy_source(lossy) and lossy_source(lossy)[1] is not None
        assert worker.lossy(write_mp3(tmp_path / "song.mp3", click_track(90, 4) * 0.5)) is None
        with pytest.raises(AudioFileError, match="HTML"):
            worker.lossy(page)
        assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.nbi"))
    finally:
        worker.close()


def _wav_header(rate: int, claimed_bytes: int) -> bytes:
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF" + struct.pack("<I", 36 + claimed_bytes) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", claimed_bytes)
    )


def test_files_that_cannot_tell_get_no_verdict_and_nan_samples_count_as_silence(tmp_path: Path) -> None:
    """Silence, an empty data chunk, a header claiming 10 hours over 1 s of samples and a tone claim nothing
    ("full band" would be a guess); a float WAV with NaN and infinite samples is measured, never crashed on."""
    import soundfile

    rate = 16_000
    (tmp_path / "empty.wav").write_bytes(_wav_header(rate, 0))
    (tmp_path / "ten-hours.wav").write_bytes(_wav_header(rate, rate * 2 * 36_000) + bytes(rate * 2))
    write_wav(tmp_path / "silence.wav", np.zeros(44_100 * 3))
    write_wav(tmp_path / "tone.wav", 0.5 * np.sin(2 * np.pi * 997 * np.arange(44_100 * 3) / 44_100))
    for name in ("empty", "ten-hours", "silence", "tone"):
        found = analyze_file(tmp_path / f"{name}.wav")
        assert found.lossy_checked is None and found.lossy_cutoff_hz is None and found.lossy_verdict == "", name
        assert lossy_source(tmp_path / f"{name}.wav") is None, name
    noisy = np.random.default_rng(3).normal(0, 0.1, 44_100 * 4)
    noisy[10_000:12_000], noisy[20_000] = np.nan, np.inf
    soundfile.write(tmp_path / "nan.wav", noisy.astype(np.float32), 44_100, subtype="FLOAT")
    found = analyze_file(tmp_path / "nan.wav")
    assert found.lufs is not None and np.isfinite(found.lufs) and found.true_peak_db is not None
    assert found.lossy_checked == "wav" and found.lossy_cutoff_hz is None  # full-band noise, NaNs as silence
