"""Above `storage/`, a journal file's concerns are reached through its `Database` (issue 38: the `Database` is what
the library, the archiver, the analyst, the extras store and the agent desk are given, never a path). No module
above storage builds a store class from a path; the few that still do are named here with why, so the list only
shrinks. And a `Library` (a script's `Library(path)` too) reads through a `Database`, whose extras its views ask."""

from __future__ import annotations

import ast
from pathlib import Path
from types import MappingProxyType

from ipymusicgen.song_library import Library
from ipymusicgen.storage.database import Database

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ipymusicgen"
STORES = frozenset({"LibraryStore", "ExtrasStore", "Journal", "SongMeasures"})
"""The journal file's store classes (a `Database` concern each; `BatchStore(None)` is the in-memory one)."""
NOT_YET = MappingProxyType(
    {
        "archive/archiver.py": "the archiver's worker opens its own LibraryStore(journal_path) and closes it when "
        "idle (and archive_wav one of its own); given the workspace's Database it would need a store it never closes",
        "lab/analyst.py": "the analyst's worker opens its own LibraryStore(journal_path), as the archiver's does",
        "archive/extras.py": "made_kinds(journal_path) (now unused: LibraryView asks its library's database) and "
        "_keep's LibraryStore(journal_path), in a file another helper is editing beside this change",
        "workspace/workspace.py": "ClientWiring.open_journal: a hand-made client's Journal(settings.journal_path)",
    }
)
"""Modules above storage that still build a store from a path, each with what and why."""


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
        if where.startswith(("storage/", "sandbox/", "gateway/")) or where in NOT_YET:
            continue
        found += stores_built(path)
    assert found == []


def test_the_modules_not_yet_cleared_still_build_one() -> None:
    for where in NOT_YET:
        assert stores_built(PACKAGE / where), f"{where} builds no store from a path now: drop it from NOT_YET"


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
