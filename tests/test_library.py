"""The library over the journal: full-text search, favourites that outlive the process, takes, lineage, spend."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipymusicgen import Journal, MusicClient
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite3"


@pytest.fixture
def lib_client(sandbox: Sandbox, journal_path: Path, tmp_path: Path) -> Iterator[MusicClient]:
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "songs") as client:
        yield client


def _songs(client: MusicClient, **request: object) -> list[str]:
    ids = client.generate(request).ids
    client.wait(ids)
    archiver = archiver_of(client)
    assert archiver is not None and archiver.join(30)
    return ids


@pytest.mark.slow
def test_full_text_search_finds_a_word_of_the_lyrics(lib_client: MusicClient, journal_path: Path) -> None:
    lyric_ids = _songs(lib_client, action="custom", title="Night Ferry", style="dream pop",
                       lyrics="[Verse]\nporcelain tides under the crane lights")  # fmt: skip
    other_ids = _songs(lib_client, action="auto", style="drum and bass", mv="MFV2.0")
    with Library(journal_path) as library:
        assert {s.id for s in library.songs(text="porcelain")} == set(lyric_ids)
        assert {s.id for s in library.songs(text="PORCEL")} == set(lyric_ids)  # prefix, any case
        assert {s.id for s in library.songs(text="drum")} == set(other_ids)  # style
        assert {s.id for s in library.songs(text="ferry night")} == set(lyric_ids)  # title, any order
        assert not library.songs(text="porcelain drum")  # every word must match
        for hostile in ('"', "NEAR(a b)", "*", "a OR", "-x", "title:x", "'; DROP TABLE tasks; --"):
            library.songs(text=hostile)  # never an FTS syntax error
        assert {s.id for s in library.songs(model="MFV2.0")} == set(other_ids)
        assert library.count() == 4 and library.count(text="porcelain") == 2
        assert {s.id for s in library.songs(state="ready")} == set(lyric_ids + other_ids)
        page1, page2 = library.songs(limit=3), library.songs(limit=3, offset=3)
        assert len(page1) == 3 and len(page2) == 1 and not {s.id for s in page1} & {s.id for s in page2}
        assert library.songs(since="1h") and not library.songs(since=4102444800)


@pytest.mark.slow
def test_favourites_and_notes_survive_a_new_process(lib_client: MusicClient, journal_path: Path) -> None:
    ids = _songs(lib_client, action="auto", style="bossa nova")
    with Library(journal_path) as library:
        library.favourite(ids[1])
        library.note(ids[1], "the one for the wedding")
        with pytest.raises(KeyError):
            library.favourite("no-such-task")
    code = (
        "import sys; from ipymusicgen.song_library import Library\n"
        "lib = Library(sys.argv[1]); s = lib.songs(favourite=True)\n"
        "print(len(s), s[0].id, s[0].note); lib.favourite(s[0].id, on=False); lib.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(journal_path)], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == f"1 {ids[1]} the one for the wedding"
    with Library(journal_path) as library:
        assert not library.songs(favourite=True)  # the other process's change is seen here too


@pytest.mark.slow
def test_takes_and_lineage_after_an_extend(lib_client: MusicClient, journal_path: Path) -> None:
    first = _songs(lib_client, action="custom", title="Root", style="folk", lyrics="[Verse]\nroots")
    extended = _songs(lib_client, action="extend", continue_song_id=first[0], continue_at=2, style="folk")
    joined = _songs(lib_client, action="concat", continue_song_id=extended[0])
    with Library(journal_path) as library:
        takes = library.takes(first[0])
        assert [s.id for s in takes] == first and [s.take for s in takes] == [1, 2]
        library.keep(first[1])
        assert [s.kept for s in library.takes(first[0])] == [False, True]
        tree = library.lineage(joined[0])  # from any node: the whole tree from its first ancestor
        assert tree["id"] == first[0] and tree["action"] == "custom"
        assert {c["id"] for c in tree["children"]} == set(extended)
        child = next(c for c in tree["children"] if c["id"] == extended[0])
        assert {g["id"] for g in child["children"]} == set(joined)
        assert next(g for g in child["children"] if g["id"] == joined[0])["current"]
        assert library.song(extended[0]).parent_id == first[0]
        assert library.lineage(first[1])["children"] == []


@pytest.mark.slow
def test_spend_by_day_model_and_batch(lib_client: MusicClient, journal_path: Path) -> None:
    _songs(lib_client, action="auto", style="one", mv="MFV2.0")
    batch = run_batch(
        lib_client, [{"action": "auto", "style": "a"}, {"action": "auto", "style": "b"}], name="night-run"
    )
    assert batch.done
    archiver = archiver_of(lib_client)
    assert archiver is not None and archiver.join(30)
    with Library(journal_path) as library:
        by_batch = {r["batch"]: r for r in library.spend(by="batch").rows}
        assert by_batch["night-run"]["calls"] == 2 and by_batch["night-run"]["songs"] == 4
        assert by_batch["(none)"]["calls"] == 1
        assert by_batch["night-run"]["credits_estimated"] >= 2
        before, after, _ = batch_counts(journal_path, "night-run")
        if before is not None and after is not None:
            assert by_batch["night-run"]["credits_measured"] == before - after
        by_model = {r["model"]: r for r in library.spend(by="model").rows}
        assert by_model["MFV2.0"]["credits_estimated"] == 2
        day = library.spend(by="day")
        assert day.total["calls"] == 3 and day.total["songs"] == 6
        frame = day.to_pandas()
        assert list(frame.columns) == ["day", "calls", "songs", "credits_estimated", "credits_measured"]
        assert {s.id for s in library.songs(batch="night-run")} == set(batch.ids)
        with pytest.raises(ValueError, match="by must be"):
            library.spend(by="week")


def batch_counts(journal_path: Path, name: str) -> tuple[int | None, int | None, int]:
    from ipymusicgen.storage.batches import BatchStore

    store = BatchStore(journal_path)
    try:
        return store.counts(name)
    finally:
        store.close()
