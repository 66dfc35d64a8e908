"""Review R2: odd numbers for a batch and decomposed unicode in a library search, over the real sandbox."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from ipymusicgen import Journal, MusicClient
from ipymusicgen.archive import archiver_of
from ipymusicgen.batch import BatchError, run_batch, run_batch_async
from ipymusicgen.batch_store import BatchStore
from ipymusicgen.library import Library
from ipymusicgen.sandbox import Sandbox

GENERATE = "/v1/music/generate"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("budget", float("nan"), "budget"),
        ("budget", "10", "budget"),
        ("concurrency", 2.5, "concurrency"),
        ("concurrency", "3", "concurrency"),
        ("stall_timeout", float("nan"), "stall_timeout"),
        ("stall_timeout", -1, "stall_timeout"),
        ("stall_timeout", 0, "stall_timeout"),
    ],
)
def test_odd_batch_numbers_are_refused_before_anything_is_sent(
    client: MusicClient, sandbox: Sandbox, option: str, value: object, message: str
) -> None:
    # a NaN budget compared False against every cost: the batch would spend without limit
    with pytest.raises(BatchError, match=message):
        run_batch(client, [{"style": "lo-fi", "mv": "MFV2.0"}], store=BatchStore(None), **{option: value})
    assert sandbox.request_counts().get(GENERATE, 0) == 0


def test_odd_batch_numbers_are_refused_by_the_async_face_too(sandbox: Sandbox) -> None:
    import asyncio

    async def run() -> None:
        async with sandbox.async_client() as aclient:
            with pytest.raises(BatchError, match="budget"):
                await run_batch_async(aclient, [{"style": "lo-fi", "mv": "MFV2.0"}], budget=float("nan"),
                                      store=BatchStore(None))  # fmt: skip

    asyncio.run(run())
    assert sandbox.request_counts().get(GENERATE, 0) == 0


def test_whole_numbers_of_any_kind_are_accepted(client: MusicClient) -> None:
    import numpy as np

    batch = run_batch(client, [{"style": "lo-fi", "mv": "MFV2.0"}], concurrency=np.int64(2), budget=np.int64(5),
                      stall_timeout=float("inf"), store=BatchStore(None))  # fmt: skip
    assert batch.counts()["complete"] == 1


def test_a_search_typed_in_decomposed_unicode_finds_the_song(sandbox: Sandbox, tmp_path: Path) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "songs") as client:
        ids = client.generate(action="custom", title="Naïve Café", style="chanson",
                              lyrics="[Verse]\nrésumé of a crème brûlée").ids  # fmt: skip
        client.wait(ids)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
    with Library(journal_path) as library:
        for typed in ("naïve", "Café", "crème brûlée", "résum"):
            decomposed = unicodedata.normalize("NFD", typed)  # what macOS input methods often send
            assert {s.id for s in library.songs(text=typed)} == set(ids), typed
            assert {s.id for s in library.songs(text=decomposed)} == set(ids), ascii(decomposed)
            assert library.count(text=decomposed) == len(ids)


def test_a_sandbox_with_its_own_key_never_archives_into_the_users_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sandbox is known by identity (it made the client), not by its demo key alone
    monkeypatch.delenv("MUSICGEN_ARCHIVE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    from ipymusicgen.archive import archive_dir_for, default_archive_dir, sandbox_archive_dir

    assert str(default_archive_dir()).startswith(str(tmp_path / "xdg"))
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={"my-test-key": 50}) as own:
        with own.client(journal=Journal(tmp_path / "journal.sqlite3")) as client:
            assert archive_dir_for(client) == sandbox_archive_dir()
            ids = client.generate(action="auto", style="drone").ids
            client.wait(ids)
            archiver = archiver_of(client)
            assert archiver is not None and archiver.join(30)
            assert archiver.archived  # it archived, into its own temp folder
        async_client = own.async_client()
        assert archive_dir_for(async_client) == sandbox_archive_dir()
    assert not (tmp_path / "xdg").exists() or not any((tmp_path / "xdg").rglob("*.mp3"))
