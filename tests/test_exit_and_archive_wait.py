"""Background work at its edges: `wait(archived=True)` returns once each song is in the archive, and at exit every
worker (archiver, analyst) is told to stop and joined, bounded, before the interpreter finalizes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from helpers import WAIT

from ipymusicgen import Journal, WaitTimeoutError, lifecycle
from ipymusicgen.archive import archiver as archiver_module
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.errors import MusicGenError
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.database import Database

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # waits on real time (a sandbox's stages): over half a second
def test_wait_archived_returns_once_every_song_is_in_the_archive(sandbox: Sandbox, tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal), archive=tmp_path / "songs") as client:
        ids = client.generate(action="auto", style="archived at once").ids
        songs = client.wait(ids, archived=True)
        with Library(journal) as library:  # no waiting here: the wait said they are kept
            assert all(library.archived_path(i) is not None and library.archived_path(i).is_file() for i in ids)
        again = client.wait(songs, archived=True)  # finished records given back: no new round, still answered
        assert [r.id for r in again] == list(ids)


@pytest.mark.slow
def test_the_async_wait_archived_too(sandbox: Sandbox, tmp_path: Path) -> None:
    import asyncio

    journal = tmp_path / "journal.sqlite3"

    async def make() -> list[str]:
        async with sandbox.async_client(journal=Journal(journal), archive=tmp_path / "songs") as client:
            ids = (await client.generate(action="auto", style="async archive")).ids
            await client.wait(ids, archived=True)
            return list(ids)

    ids = asyncio.run(make())
    with Library(journal) as library:
        assert all(library.archived_path(i) is not None for i in ids)


@pytest.mark.slow
def test_wait_archived_times_out_naming_the_songs_not_kept_yet(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = threading.Event()
    real = archiver_module.archive_song
    monkeypatch.setattr(archiver_module, "archive_song", lambda *a: (held.wait(WAIT), real(*a))[1])
    with sandbox.client(journal=Journal(tmp_path / "j.sqlite3"), archive=tmp_path / "songs") as client:
        ids = client.generate(action="auto", style="held").ids
        try:
            with pytest.raises(WaitTimeoutError, match="not archived") as caught:
                client.wait(ids, timeout=3, archived=True)
            assert set(caught.value.pending) <= set(ids) and caught.value.pending
        finally:
            held.set()
        assert archiver_of(client).join(WAIT)


def test_wait_archived_on_a_client_that_archives_nothing_says_so(sandbox: Sandbox) -> None:
    with sandbox.client(archive=False) as client:
        ids = client.generate(action="auto", style="no archive").ids
        with pytest.raises(MusicGenError, match="archives nothing"):
            client.wait(ids, timeout=WAIT, archived=True)


class _Worker:
    """A worker whose thread ends only once it is told to stop."""

    def __init__(self) -> None:
        self.told = threading.Event()
        self.thread = threading.Thread(target=self.told.wait, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.told.set()

    def join_worker(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


class _Stuck(_Worker):
    def stop(self) -> None:
        pass  # never ends: the exit gives up on it at the bound


def test_at_exit_every_worker_is_told_first_then_joined_within_one_bound() -> None:
    workers = [_Worker(), _Worker()]  # this test's workers only, not the suite's (no registry reached into)
    assert lifecycle.stop_workers(timeout=WAIT, workers=workers)
    assert not any(w.thread.is_alive() for w in workers)
    stuck = _Stuck()
    assert not lifecycle.stop_workers(timeout=0.2, workers=[*workers, stuck])  # bounded: one stuck cannot hold it
    stuck.told.set()


def test_a_stopped_analyst_finishes_the_song_in_hand_and_takes_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.lab import analyst as analyst_module

    started, release, measured = threading.Event(), threading.Event(), []

    def slow_measure(path: Path) -> object:
        started.set()
        release.wait(WAIT)
        measured.append(path)
        raise ValueError("not a song")  # kept as the song's analysis error

    monkeypatch.setattr(analyst_module, "analyze_file", slow_measure)
    journal = tmp_path / "journal.sqlite3"
    Journal(journal).close()
    database = Database(journal)  # the owner's, as a wiring gives it
    analyst = analyst_module.Analyst(journal, lambda _path: database)
    analyst.submit("first", tmp_path / "a.mp3")
    analyst.submit("second", tmp_path / "b.mp3")
    assert started.wait(WAIT)
    analyst.stop()
    assert not analyst.join_worker(0.05)  # the song in hand is still being measured: not abandoned
    release.set()
    assert analyst.join_worker(WAIT)
    assert measured == [tmp_path / "a.mp3"]  # the second was never started
    analyst.submit("third", tmp_path / "c.mp3")  # after the stop: nothing starts again
    assert analyst.join_worker(0) and measured == [tmp_path / "a.mp3"]
    database.close()


SCRIPT = textwrap.dedent(
    """
    import ipymusicgen

    client = ipymusicgen.get_client()  # the embedded sandbox: no key
    ids = list(client.generate(action="auto", style="lo-fi rain").ids)
    ids += client.generate(action="auto", style="night drive").ids
    client.wait(ids, timeout=120, archived=True)
    print(ipymusicgen.waveform(ids[0], points=50).shape)
    print(ipymusicgen.analyze(ids[1]).bpm is not None)
    # exits here, with the background analysis of the other songs still running
    """
)


@pytest.mark.slow  # ten processes, each with a sandbox and librosa
@pytest.mark.timeout(900)  # 10 x 30 s at load 12 passed the suite's 300 s; each run keeps its own 300 s
def test_a_script_that_archives_and_analyzes_exits_cleanly_every_time(tmp_path: Path) -> None:
    """The analysis runs in the background at exit (librosa's native code); the exit joins it first."""
    script = tmp_path / "songs.py"
    script.write_text(SCRIPT)
    env = {**_clean_env(), "MUSICGEN_ANALYZE": "on", "MUSICGEN_SANDBOX_STAGE_SECONDS": "0.2",
           "MUSICGEN_SANDBOX_SONG_SECONDS": "20", "XDG_DATA_HOME": str(tmp_path / "xdg")}  # fmt: skip
    for run in range(10):
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"run {run + 1}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
        assert done.stdout.splitlines()[-2:] == ["(50, 2)", "True"], done.stdout
        assert "terminate called" not in done.stderr


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}


def test_a_song_not_archived_yet_says_how_to_wait_for_it() -> None:
    from ipymusicgen.archive.waveform import song_path

    with pytest.raises(FileNotFoundError, match=r"wait\(ids, archived=True\)"):
        song_path("e3e70682-c209-4cac-a29f-6fbed82c07cd", find=lambda task_id: None)
