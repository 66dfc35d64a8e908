"""Above `storage/`, a journal file's concerns are reached through its `Database` (issue 38: the `Database` is what
the library, the archiver, the analyst, the extras store and the agent desk are given, never a path). No module
above storage builds a store class from a path (the archiver, the analyst, the paid extras' archive and a hand-made
client's journal all ask a `Database`). And a `Library` (a script's `Library(path)` too) reads through a
`Database`, whose extras its views ask."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ipymusicgen.song_library import Library
from ipymusicgen.storage.database import Database

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ipymusicgen"
STORES = frozenset({"LibraryStore", "ExtrasStore", "Journal", "SongMeasures"})
"""The journal file's store classes (a `Database` concern each; `BatchStore(None)` is the in-memory one)."""


def stores_built(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in STORES:
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno} {ast.unparse(node)[:60]}")
    return found


def test_no_module_above_storage_builds_a_store_from_a_path() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(("storage/", "sandbox/", "gateway/")):
            continue
        found += stores_built(path)
    assert found == []


def test_a_library_reads_through_a_database_given_or_its_own(tmp_path: Path) -> None:
    given = Database(tmp_path / "given.sqlite3")
    with Library(given) as shared:
        assert shared.database is given and shared.store is given.library
    assert given.library.song_count() == 0  # the given database stays open: its owner closes it
    given.close()
    with Library(tmp_path / "own.sqlite3") as own:
        assert isinstance(own.database, Database) and own.database.extras.made_kinds(["nothing"]) == {"nothing": []}
        database = own.database
    assert database.library is not own.store  # its own database was closed with it (opened afresh when asked)
    database.close()


def test_the_archiver_and_the_analyst_use_their_workspaces_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace's archiver reads and writes the library of the workspace's own `Database`, and its analyst measures
    into it: one store per file, closed by the workspace, none of their own left open."""
    from ipymusicgen.archive.archiver import archiver_of
    from ipymusicgen.lab import analyst as analyst_module

    def unreadable(path: Path) -> object:
        raise ValueError(f"not a song: {path.name}")  # no worker process: the store's use is what is tested

    monkeypatch.setattr(analyst_module, "analyze_file", unreadable)
    from ipymusicgen.config import Settings
    from ipymusicgen.storage.shared_connection import open_connections
    from ipymusicgen.workspace.workspace import Workspace

    settings = Settings.from_env().with_changes(
        api_key="test-key-never-sent", base_url="http://127.0.0.1:9", v2_base_url="http://127.0.0.1:9"
    )
    workspace = Workspace(settings, journal_path=tmp_path / "journal.sqlite3")
    try:
        workspace.archive.choose(tmp_path / "songs")
        archiver = archiver_of(workspace.client)
        assert archiver is not None and archiver.store is workspace.db.library
        users = [shared.users for shared in open_connections() if shared.path == workspace.path.resolve()]
        analyst = workspace.analysts.of(workspace.path)
        analyst.submit("no-such-song", tmp_path / "missing.mp3")
        assert analyst.join(30) and "no-such-song" in analyst.errors  # measured (a missing file: its error kept)
        assert not analyst.join_worker(0)  # its thread still runs (until idle) and holds what it uses: no store of
        assert [s.users for s in open_connections() if s.path == workspace.path.resolve()] == users  # its own
    finally:
        workspace.close()


def test_a_database_named_by_a_relative_path_keeps_that_file_when_the_folder_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Workspace(journal_path="songs.sqlite")`, then `%cd elsewhere`: the journal, the library and the batch rows,
    each opened when first used, are still the one file it was named by, never a second one in the new folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    database = Database("songs.sqlite")
    monkeypatch.chdir(elsewhere)
    try:
        database.batches.flush()
        database.library.close  # noqa: B018 - opened by being asked for
        assert database.journal.file == (tmp_path / "songs.sqlite").resolve()
        assert database.path == tmp_path / "songs.sqlite"
        assert not (elsewhere / "songs.sqlite").exists()
    finally:
        database.close()


def test_a_database_named_from_home_is_in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`MUSICGEN_JOURNAL=~/songs.sqlite` (an IPython `%env` does not expand it) means the home folder's file, as the
    archive folder's `~` already does; not a folder named `~` in the current one."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    database = Database("~/songs.sqlite")
    try:
        assert database.journal.file == (tmp_path / "home" / "songs.sqlite").resolve()
        assert not (tmp_path / "~").exists()
    finally:
        database.close()
    named = Database("~songs.sqlite")  # no slash: a file of that name here, not the home of a user "songs"
    assert named.path == tmp_path / "~songs.sqlite"
