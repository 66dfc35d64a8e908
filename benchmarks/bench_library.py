"""Figure 11: the library. Waveform decode speed, search over 10,000 songs vs 100, archive cost vs download.

- waveform: CPU seconds to decode a 3-minute MP3 and reduce it to 400 peaks (best of 3), as x real time.
- search: median time of a page of results (a word search, a filtered page, the first page) in a journal
  of 10,000 songs vs one of 100, interleaved; the ratio is the figure (goal <= 3x).
- archive: a song's archiving (download + tags + cover + peaks + journal rows) next to its plain download
  from the same sandbox, median of interleaved rounds; the overhead per song is reported.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from ._common import Row, interleaved, median, spread

FIGURE = 11
AUDIO_SECONDS = 180
WAVEFORM_TARGET = 20.0
SEARCH_TARGET = 3.0
WORDS = ["rain", "harbour", "neon", "velvet", "ember", "glacier", "orbit", "meadow", "canyon", "lantern", "echo",
         "willow"]  # fmt: skip


def measure_waveform(runs: int = 3, seconds: float = AUDIO_SECONDS) -> dict[str, float]:
    from ipymusicgen.archive.waveform import waveform
    from ipymusicgen.sandbox.audio import render_song

    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-wave-"))
    try:
        path = folder / "song.mp3"
        path.write_bytes(render_song("benchmark waveform", seconds=seconds, vocal=True)[0])
        timings = []
        for _ in range(runs):
            start = time.process_time()
            waveform(path)
            timings.append(time.process_time() - start)
        return {"cpu_seconds": min(timings), "audio_seconds": seconds, "realtime_factor": seconds / min(timings)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fill_journal(path: Path, songs: int, seed: int = 1) -> None:
    """A journal file with `songs` finished songs (two per paid call) and their library rows."""
    from ipymusicgen.storage.journal import Journal
    from ipymusicgen.storage.journal_file import open_db
    from ipymusicgen.storage.library import LibraryStore

    Journal(path).close()
    rng = random.Random(seed)
    db = open_db(path)
    now = time.time()
    attempts, tasks = [], []
    for call in range(songs // 2):
        attempt = uuid.UUID(int=rng.getrandbits(128)).hex
        words = rng.sample(WORDS, 3)
        lyrics = f"[Verse] {words[2]}"
        payload = {"action": "custom", "title": f"{words[0]} {call}", "style": words[1], "lyrics": lyrics}
        created = now - (songs - call) * 60
        attempts.append((attempt, "generate", "https://api.example", json.dumps(payload), created, "submitted"))
        for take in range(2):
            task = str(uuid.UUID(int=rng.getrandbits(128)))
            tasks.append((task, attempt, "https://api.example", "complete", payload["title"], payload["style"],
                          f"https://cdn.example/{task}.mp3", created + take, created))  # fmt: skip
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO attempts (id, endpoint, host, payload, created_at, outcome) VALUES (?, ?, ?, ?, ?, ?)", attempts
    )
    db.executemany(
        "INSERT INTO tasks (id, attempt_id, host, state, title, style, audio_url, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        tasks,
    )
    db.execute("COMMIT")
    db.close()
    store = LibraryStore(path)
    store.sync()
    store.close()


def measure_search(rounds: int = 30, small: int = 100, large: int = 10_000) -> dict[str, object]:
    from ipymusicgen.song_library import Library

    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-library-"))
    try:
        fill_journal(folder / "small.sqlite3", small)
        fill_journal(folder / "large.sqlite3", large)
        libraries = {"small": Library(folder / "small.sqlite3"), "large": Library(folder / "large.sqlite3")}

        def page(library: Library) -> float:
            start = time.perf_counter()
            library.songs(text="harbour")
            library.songs(text="velvet ember")
            library.songs(favourite=False, limit=24, offset=24)
            library.songs(limit=24)
            library.count(text="neon")
            return time.perf_counter() - start

        for library in libraries.values():
            page(library)  # warm the page cache of both files
        samples = interleaved({name: (lambda lib=lib: page(lib)) for name, lib in libraries.items()}, rounds)
        for library in libraries.values():
            library.close()
        return {
            "small_ms": median(samples["small"]) * 1000,
            "large_ms": median(samples["large"]) * 1000,
            "small": spread(samples["small"]),
            "large": spread(samples["large"]),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_archive(rounds: int = 5) -> dict[str, object]:
    from ipymusicgen.archive.archiver import archive_song
    from ipymusicgen.sandbox import Sandbox
    from ipymusicgen.storage.journal import Journal
    from ipymusicgen.storage.library import LibraryStore

    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-archive-"))
    try:
        with Sandbox(stage_seconds=0.05, song_seconds=30, faults="") as sandbox:
            journal_path = folder / "journal.sqlite3"
            with sandbox.client(journal=Journal(journal_path), archive=False) as client:
                ids = client.generate(action="custom", title="bench", style="pop", lyrics="[Verse] la").ids
                records = client.wait(ids)
                url = records[0].audio_url or ""
                client.download(url, folder / "warm")  # the sandbox renders once; both sides then read it
                store = LibraryStore(journal_path)
                count = [0]

                def download() -> float:
                    start = time.perf_counter()
                    client.download(url, folder / "plain")
                    return time.perf_counter() - start

                def archive() -> float:
                    count[0] += 1
                    store.db.execute("UPDATE library_songs SET archive_path = NULL WHERE id = ?", (ids[0],))
                    start = time.perf_counter()
                    archive_song(client, store, folder / f"songs{count[0]}", ids[0])
                    return time.perf_counter() - start

                samples = interleaved({"download": download, "archive": archive}, rounds)
                store.close()
        return {
            "download_ms": median(samples["download"]) * 1000,
            "archive_ms": median(samples["archive"]) * 1000,
            "download": spread(samples["download"]),
            "archive": spread(samples["archive"]),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


MEMORY_TARGET_MB = 100.0
_ARCHIVE_MEMORY = """
import json, resource, sqlite3, sys, tempfile
from pathlib import Path
from ipymusicgen.archive.archiver import archive_song
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.library import LibraryStore
import ipymusicgen.archive.waveform, miniaudio, mutagen, numpy  # loaded before the baseline is read

source, seconds = Path(sys.argv[1]), float(sys.argv[2])
folder = Path(tempfile.mkdtemp())
journal = Journal(folder / "journal.sqlite3")
attempt = journal.begin("generate", "https://bench.example", {"style": "bench"})
journal.submitted(attempt, ["bench-task"])
journal.close()
store = LibraryStore(folder / "journal.sqlite3")
with store.write() as db:
    db.execute("UPDATE tasks SET state = 'complete', audio_url = ?, title = 'bench' WHERE id = 'bench-task'",
               (source.as_uri(),))
    db.execute("INSERT OR IGNORE INTO library_songs (id, duration_s) VALUES ('bench-task', ?)", (seconds,))

class Local:  # the archive's downloader, reading the file from disk (no network in the figure)
    def download(self, url, directory):
        Path(directory).mkdir(parents=True, exist_ok=True)
        target = Path(directory) / ("song" + source.suffix)
        target.write_bytes(source.read_bytes())
        return target

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

try:  # Linux: start the high-water mark again here, so the peak is this archive's, not the imports'
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
except OSError:
    pass
before = status("VmRSS")
placed = archive_song(Local(), store, folder / "songs", "bench-task")
after = status("VmHWM")
peaks = (store.stored_peaks("bench-task") or (None, None))[0]
print(json.dumps({"baseline_mb": before, "peak_mb": after, "kept": placed.is_file(), "peaks": peaks is not None}))
"""


def measure_archive_memory(seconds: float = AUDIO_SECONDS) -> dict[str, object]:
    """Peak RSS above the baseline of a fresh process while it archives a song, and while it archives a
    crafted FLAC of about 100 KB that decodes to 2.5 hours (1.6 GB of PCM unbounded)."""
    from ipymusicgen.sandbox.audio import render_song

    from ._audio import flac_bomb
    from ._common import fresh_python

    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-memory-"))
    try:
        song, bomb = folder / "song.mp3", folder / "bomb.flac"
        song.write_bytes(render_song("benchmark memory", seconds=seconds, vocal=True)[0])
        bomb.write_bytes(flac_bomb())
        code = _ARCHIVE_MEMORY
        results = {}
        for name, path, reported in (("song", song, seconds), ("bomb", bomb, 4.0)):
            child = fresh_python(code.replace("sys.argv[1]", repr(str(path))).replace("sys.argv[2]", repr(reported)))
            child["above_mb"] = child["peak_mb"] - child["baseline_mb"]
            results[name] = child
        results["bomb_bytes"] = bomb.stat().st_size
        return results
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(*, quick: bool = False) -> list[Row]:
    wave = measure_waveform(runs=1 if quick else 3, seconds=30 if quick else AUDIO_SECONDS)
    search = measure_search(rounds=5 if quick else 30, large=1_000 if quick else 10_000)
    archive = measure_archive(rounds=2 if quick else 5)
    memory = measure_archive_memory(seconds=30 if quick else AUDIO_SECONDS)
    worst = max(float(memory["song"]["above_mb"]), float(memory["bomb"]["above_mb"]))  # type: ignore[index]
    factor = wave["realtime_factor"]
    search_ratio = float(search["large_ms"]) / max(float(search["small_ms"]), 1e-9)  # type: ignore[arg-type]
    archive_ratio = float(archive["archive_ms"]) / max(float(archive["download_ms"]), 1e-9)  # type: ignore[arg-type]
    large = "1,000" if quick else "10,000"
    return [
        Row(FIGURE, f"waveform: decode + 400 peaks of a {wave['audio_seconds']:.0f} s MP3",
            round(wave["cpu_seconds"], 4), "CPU s", baseline=wave["audio_seconds"], baseline_unit="s of audio",
            ratio=round(factor, 1),
            target=f">= {WAVEFORM_TARGET:.0f}x real time", passed=factor >= WAVEFORM_TARGET, details=wave),
        Row(FIGURE, f"library: search pages over {large} songs vs 100", round(float(search["large_ms"]), 2),  # type: ignore[arg-type]
            "ms", baseline=round(float(search["small_ms"]), 2), ratio=round(search_ratio, 2),  # type: ignore[arg-type]
            target=f"<= {SEARCH_TARGET:.0f}x", passed=search_ratio <= SEARCH_TARGET, details=search),
        Row(FIGURE, "archive a song (tags, cover, peaks, rows) vs its download", round(float(archive["archive_ms"]), 2),  # type: ignore[arg-type]
            "ms", baseline=round(float(archive["download_ms"]), 2), ratio=round(archive_ratio, 2),  # type: ignore[arg-type]
            target="report", details=archive),
        Row(FIGURE, f"archive peak RSS above baseline: a {wave['audio_seconds']:.0f} s song / a crafted FLAC "
            f"({int(memory['bomb_bytes']) // 1024} KB, 2.5 h decoded)",  # type: ignore[call-overload]
            round(worst, 1), "MB", baseline=MEMORY_TARGET_MB, ratio=round(worst / MEMORY_TARGET_MB, 3),
            target=f"<= {MEMORY_TARGET_MB:.0f} MB", passed=worst <= MEMORY_TARGET_MB, details=memory),
    ]  # fmt: skip


if __name__ == "__main__":
    for row in run():
        print(row)
