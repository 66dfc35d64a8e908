"""Every `resume()` (sync or async, with or without `wait`) retries the archive's failures, through the client's
resume hook; the client holds no archive code."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ipymusicgen import Journal
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library


def _archived(directory: Path) -> list[str]:
    return sorted(p.name[-14:-4] for p in directory.glob("*.mp3"))


@pytest.mark.slow
@pytest.mark.parametrize("wait", [False, True])
def test_resume_retries_failed_archives(sandbox: Sandbox, tmp_path: Path, wait: bool) -> None:
    songs = tmp_path / "songs"
    with sandbox.client(journal=Journal(tmp_path / "journal.sqlite3"), archive=songs) as client:
        sandbox.set_faults("server_error:rate=1:path=/files")  # every download fails, however many polling rounds try
        ids = client.generate(action="auto", style="resume me").ids
        client.wait(ids)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
        assert set(archiver.errors) == set(ids) and not _archived(songs)
        sandbox.clear_faults()
        found = client.resume(wait=wait)
        assert not found.ids  # nothing unfinished: only the resume hook can bring the retry
        assert archiver.join(30)
    assert _archived(songs) == sorted(f"[{i[:8]}]" for i in ids)
    with Library(tmp_path / "journal.sqlite3") as library:
        assert not library.failed_archives()


@pytest.mark.slow
def test_async_resume_retries_failed_archives(sandbox: Sandbox, tmp_path: Path) -> None:
    songs = tmp_path / "songs"

    async def run() -> list[str]:
        async with sandbox.async_client(journal=Journal(tmp_path / "journal.sqlite3"), archive=songs) as client:
            sandbox.set_faults("server_error:rate=1:path=/files")  # a second polling round's try fails too
            ids = (await client.generate(action="auto", style="async resume")).ids
            await client.wait(ids)
            archiver = archiver_of(client)
            assert archiver is not None and await asyncio.to_thread(archiver.join, 30)
            assert set(archiver.errors) == set(ids) and not _archived(songs)
            sandbox.clear_faults()
            await client.resume()
            assert await asyncio.to_thread(archiver.join, 30)
            return ids

    ids = asyncio.run(run())
    assert _archived(songs) == sorted(f"[{i[:8]}]" for i in ids)


def test_a_resume_listener_is_called_once_per_resume_and_can_be_removed(sandbox: Sandbox, tmp_path: Path) -> None:
    calls: list[int] = []

    def listener() -> None:
        calls.append(1)

    with sandbox.client(journal=Journal(tmp_path / "journal.sqlite3"), archive=False) as client:
        client.add_resume_listener(listener)
        client.resume()
        client.resume(wait=True)
        assert len(calls) == 2
        client.remove_resume_listener(listener)
        client.resume()
        assert len(calls) == 2
