"""Issue 41's kept measures attacked: a song's file replaced by another of the same size and modification time
(`touch -r`, a copy that keeps times) must be measured again, not read back as the old song's numbers; a forged
or damaged row (NaN, 1e308, a string where a number goes, a key with escape codes or HTML) never reaches
`analyze()`'s result nor breaks the library card; two threads analysing one song keep one row. The measuring
function is a counted stand-in here (no librosa): these are tests of the cache, not of the measures."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ipymusicgen.lab import song_analysis
from ipymusicgen.lab.analysis import Analysis
from ipymusicgen.song_library import Library


class Counting:
    def __init__(self) -> None:
        self.measured: list[Path] = []
        self.lock = threading.Lock()

    def measure(self, path: Path) -> Analysis:
        with self.lock:
            self.measured.append(path)
            bpm = 90.0 + 10 * len(self.measured)
        return Analysis(
            bpm=bpm, key="D minor", lufs=-14.0, true_peak_db=-1.0, silence_start_s=0.0, silence_end_s=0.0,
            duration_s=12.0, seconds=0.01, key_confidence=0.8, key_runner_up="F major", loudness_range_lu=6.0,
        )  # fmt: skip


def _riff(seed: int, size: int = 200_000) -> bytes:
    body = bytes((seed * 31 + i * 7) % 251 for i in range(size))
    return b"RIFF" + body


def analyse(library: Library, song: str, path: Path, counting: Counting, wav: Path | None = None) -> Analysis:
    return song_analysis.analyse_song(library.store, song, path, wav=wav, measure=counting.measure)


@pytest.mark.parametrize("how", ["replaced", "rewritten-in-place", "middle-edited"])
def test_a_file_swapped_for_another_of_the_same_size_and_time_is_measured_again(tmp_path: Path, how: str) -> None:
    song = tmp_path / "song.wav"
    song.write_bytes(_riff(1))
    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        first = analyse(library, "s1", song, counting)
        before = os.stat(song)
        if how == "replaced":  # another song, same size, its times copied (touch -r), moved over the old one
            other = tmp_path / "other.wav"
            other.write_bytes(_riff(2))
            os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
            os.replace(other, song)
        elif how == "rewritten-in-place":
            song.write_bytes(_riff(3))
        else:  # one stretch in the middle changed: a cheap sample of the file may miss it, the inode's ctime not
            with song.open("r+b") as handle:
                handle.seek(100_003)
                handle.write(b"\x00" * 100)
        os.utime(song, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(song).st_size == before.st_size and os.stat(song).st_mtime_ns == before.st_mtime_ns
        again = analyse(library, "s1", song, counting)
        assert len(counting.measured) == 2 and again.bpm != first.bpm
        assert analyse(library, "s1", song, counting) == again and len(counting.measured) == 2  # kept anew


def test_a_wav_swapped_for_another_of_the_same_size_and_time_is_judged_again(tmp_path: Path) -> None:
    song, wav = tmp_path / "song.mp3", tmp_path / "paid.wav"
    song.write_bytes(_riff(1))
    wav.write_bytes(_riff(5))
    judged: list[Path] = []

    def lossy(path: Path) -> tuple[str, float | None]:
        judged.append(path)
        return ("wav", 16_000.0 if len(judged) == 1 else None)

    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        first = song_analysis.analyse_song(library.store, "s1", song, wav=wav, measure=counting.measure, lossy=lossy)
        assert first.lossy_sourced
        before = os.stat(wav)
        other = tmp_path / "full.wav"
        other.write_bytes(_riff(6))
        os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(other, wav)
        again = song_analysis.analyse_song(library.store, "s1", song, wav=wav, measure=counting.measure, lossy=lossy)
        assert len(judged) == 2 and not again.lossy_sourced


FORGED = {
    "nan": '"bpm": NaN',
    "huge": '"bpm": 1e308',
    "negative-infinity-lufs": '"lufs": -Infinity',
    "string-bpm": '"bpm": "fast"',
    "escape-key": '"key": "\\u001b[31mC major\\u001b[0m"',
    "html-key": '"key": "<img src=x onerror=alert(1)>"',
    "html-runner-up": '"key_runner_up": "<b>A minor</b>"',
    "confidence-past-one": '"key_confidence": 7.5',
    "lossy-checked-html": '"lossy_checked": "<script>x</script>"',
    "negative-cutoff": '"lossy_cutoff_hz": -5',
}


@pytest.mark.parametrize("field", list(FORGED.values()), ids=list(FORGED))
def test_a_forged_kept_row_is_measured_again_and_never_shown(tmp_path: Path, field: str) -> None:
    import json

    song = tmp_path / "song.wav"
    song.write_bytes(_riff(1))
    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        first = analyse(library, "s1", song, counting)
        (row,) = library.store._rows("SELECT measures FROM song_measures WHERE song = ?", ("s1",))
        text = row["measures"]
        name = field.split(":")[0].strip('"')
        forged = text.replace(f'"{name}": {json.dumps(json.loads(text)[name])}', field)
        assert forged != text
        with library.store.write() as db:
            db.execute("UPDATE song_measures SET measures = ? WHERE song = ?", (forged, "s1"))
        found = analyse(library, "s1", song, counting)
        assert len(counting.measured) == 2, "the forged row was taken as the song's measures"
        assert found.key == "D minor" and found.bpm == first.bpm + 10


@pytest.mark.parametrize("field", list(FORGED.values()), ids=list(FORGED))
def test_a_forged_kept_row_does_not_break_or_reach_the_library_card(tmp_path: Path, field: str) -> None:
    import json

    from ipymusicgen.widgets.library import lab_lines

    song = tmp_path / "song.wav"
    song.write_bytes(_riff(1))
    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        analyse(library, "s1", song, counting)
        kept = library.store.measures_of(["s1"])["s1"]
        name = field.split(":")[0].strip('"')
        forged = json.loads("{" + field + "}")
        kept = {**kept, **forged, "lossy_checked": forged.get("lossy_checked", "wav")}

        class Song:  # what the card reads of a library song: a request naming a tempo, a key and a length
            style, prompt, title = "128 bpm in D minor", None, None
            lufs, bpm, musical_key, duration_s = -14.0, 100.0, "D minor", 12.0
            asked_seconds = 12.0  # `--seconds 12`

        lines = lab_lines(Song(), kept)  # type: ignore[arg-type]
        text = " ".join(line["text"] for line in lines)
        assert "\x1b" not in text and "<" not in text and "nan" not in text.lower() and "1e+308" not in text, name


class Overlapping(Counting):
    """A measurement that lasts until another one starts (or 3 s pass): the analyses overlap for certain."""

    def __init__(self) -> None:
        super().__init__()
        self.second = threading.Event()

    def measure(self, path: Path) -> Analysis:
        found = super().measure(path)
        if len(self.measured) >= 2:
            self.second.set()
        self.second.wait(3.0)
        return found


@pytest.mark.slow  # up to 3 s of waiting for a second measurement that must not come
def test_four_threads_analysing_one_song_measure_it_once_and_keep_one_row(tmp_path: Path) -> None:
    song = tmp_path / "song.wav"
    song.write_bytes(_riff(1))
    counting = Overlapping()
    with Library(tmp_path / "journal.sqlite3") as library:
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                barrier.wait()
                analyse(library, "s1", song, counting)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        rows = library.store._rows("SELECT song FROM song_measures", ())
        assert len(rows) == 1
        assert len(counting.measured) == 1, "each of the four measured the song for itself"
        assert analyse(library, "s1", song, counting).bpm is not None


def test_a_paid_wav_that_is_an_mp3_renamed_reads_lossy_and_a_one_sample_wav_claims_nothing(tmp_path: Path) -> None:
    """The question users ask of a paid WAV is whether it is the MP3 in disguise: a file named .wav whose bytes
    are an MP3 is exactly that, and must read lossy (not 'nothing to say'); a WAV of one sample, or none, tells
    nothing either way; with no WAV at all the card has no verdict line."""
    import numpy as np
    from signals import write_mp3, write_wav
    from test_lab_lossy import noise

    from ipymusicgen.lab.lossy import lossy_source
    from ipymusicgen.widgets.library import lab_lines

    disguised = write_mp3(tmp_path / "paid.wav", noise(seconds=4))
    found = lossy_source(disguised)
    assert found is not None and found[0] == "mp3", found
    song = tmp_path / "song.mp3"
    song.write_bytes(_riff(1))
    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        measures = song_analysis.analyse_song(
            library.store, "s1", song, wav=disguised, measure=counting.measure, lossy=lossy_source
        )
        assert measures.lossy_sourced and "MP3" in measures.lossy_verdict and "lossless" in measures.lossy_verdict
        assert song_analysis.analyse_song(library.store, "s1", song, wav=disguised, measure=counting.measure) == (
            measures
        )  # kept, and read back whole
        assert len(counting.measured) == 1

        class Song:
            style, prompt, title = "ambient", None, None
            lufs, bpm, musical_key, duration_s = -14.0, 100.0, "D minor", 12.0
            asked_seconds = None  # a request naming no length

        card = lab_lines(Song(), library.store.measures_of(["s1"])["s1"])  # type: ignore[arg-type]
        assert [line["kind"] for line in card] == ["lossy"] and card[0]["met"] is False, card
        none = song_analysis.analyse_song(library.store, "s2", song, measure=counting.measure)
        assert none.lossy_checked is None and lab_lines(Song(), library.store.measures_of(["s2"])["s2"]) == []  # type: ignore[arg-type]
    assert lossy_source(write_wav(tmp_path / "one.wav", np.array([0.5]))) is None
    assert lossy_source(write_wav(tmp_path / "none.wav", np.zeros(0))) is None


@pytest.mark.slow  # librosa
def test_analyze_of_a_wav_that_is_an_mp3_says_lossy(tmp_path: Path) -> None:
    from signals import write_mp3
    from test_lab_lossy import noise

    from ipymusicgen.lab.analysis import analyze_file

    found = analyze_file(write_mp3(tmp_path / "paid.wav", noise(seconds=4)))
    assert found.lossy_checked == "mp3" and found.lossy_sourced and "lossy source" in str(found)
    assert analyze_file(write_mp3(tmp_path / "song.mp3", noise(seconds=4))).lossy_checked is None  # honest MP3


def test_m016_on_a_journal_of_the_older_schema_keeps_its_data_and_a_newer_journal_is_left_untouched(
    tmp_path: Path,
) -> None:
    import sqlite3

    from ipymusicgen.storage.migrations import LATEST, MIGRATIONS, JournalVersionError, migrate, version_of

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for number, step in enumerate(MIGRATIONS[:15]):  # as ipymusicgen wrote it before m016
            step(db)
            db.execute(f"PRAGMA user_version = {number + 1}")
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "song_measures" not in tables
        before = {
            table: db.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall() for table in sorted(tables)
        }  # nothing lost below: the same rows after
        db.execute("CREATE TABLE IF NOT EXISTS kept_by_user (x TEXT)")
        db.execute("INSERT INTO kept_by_user VALUES ('an old row')")
        assert migrate(db, path) == LATEST == version_of(db)
        assert db.execute("SELECT x FROM kept_by_user").fetchall() == [("an old row",)]
        assert all(
            db.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall() == rows for table, rows in before.items()
        )
        assert db.execute("SELECT COUNT(*) FROM song_measures").fetchone() == (0,)
        db.execute(f"PRAGMA user_version = {LATEST + 1}")
    finally:
        db.close()
    newer = path.read_bytes()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(JournalVersionError, match="newer version"):
            migrate(db, path)
    finally:
        db.close()
    assert path.read_bytes() == newer
    with pytest.raises(JournalVersionError):
        Library(path)
    assert path.read_bytes() == newer


def test_a_forged_asked_in_a_kept_row_never_reaches_the_result(tmp_path: Path) -> None:
    """What a request asked is never kept (analyze() reads it from the request each time): a row holding one was
    written by someone else, and must not come back (a string tempo there made str(result) raise TypeError)."""
    import json

    song = tmp_path / "song.wav"
    song.write_bytes(_riff(1))
    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        analyse(library, "s1", song, counting)
        (row,) = library.store._rows("SELECT measures FROM song_measures WHERE song = ?", ("s1",))
        forged = {**json.loads(row["measures"]), "asked": {"bpm": "fast", "key": "<b>"}}
        with library.store.write() as db:
            db.execute("UPDATE song_measures SET measures = ? WHERE song = ?", (json.dumps(forged), "s1"))
        found = analyse(library, "s1", song, counting)
        assert found.asked is None and "fast" not in str(found)


def test_the_source_of_a_named_pipe_or_a_folder_is_none_at_once(tmp_path: Path) -> None:
    """Source.of reads a sample of the file for its digest: a named pipe in the archive's place must not hang
    the kernel on open() (nothing writes to it), and a folder is no file either."""
    from ipymusicgen.storage.song_measures import Source

    pipe = tmp_path / "song.mp3"
    os.mkfifo(pipe)
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(Source.of(pipe)), daemon=True)
    reader.start()
    reader.join(10.0)
    if reader.is_alive():  # free the hung thread before failing
        with open(pipe, "wb"):
            pass
        reader.join(10.0)
        pytest.fail("Source.of hung on a named pipe")
    assert found == [None] and Source.of(tmp_path) is None


def test_a_row_kept_by_a_newer_analysis_is_not_taken_and_is_measured_again(tmp_path: Path) -> None:
    """A kernel on an older ipymusicgen beside a newer one, one journal: the newer's row (version + 1, measures
    this version does not know) is not read as this version's; the song is measured and kept by this version."""
    song = tmp_path / "song.wav"
    song.write_bytes(_riff(1))
    counting = Counting()
    with Library(tmp_path / "journal.sqlite3") as library:
        first = analyse(library, "s1", song, counting)
        with library.store.write() as db:
            db.execute("UPDATE song_measures SET version = version + 1 WHERE song = ?", ("s1",))
        again = analyse(library, "s1", song, counting)
        assert len(counting.measured) == 2 and again.bpm != first.bpm
        (row,) = library.store._rows("SELECT version FROM song_measures WHERE song = ?", ("s1",))
        assert row["version"] == song_analysis.MEASURES_VERSION
