"""The library store's rows: plain dicts keyed by column name, in the statement's column order, whatever the shared
connection's row factory (figure 11 reads pages of them; a repeated name keeps its first column, as a
`sqlite3.Row` lookup does)."""

from __future__ import annotations

from pathlib import Path

from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.library import LibraryStore


def test_rows_are_plain_dicts_in_column_order_and_a_repeated_name_keeps_its_first_column(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal:
        journal.submitted(journal.begin("generate", "http://127.0.0.1:9", {"style": "pop"}), ["a", "b"])
        journal.observe([TaskRecord(id="a", status=1, title="first"), TaskRecord(id="b", status=1, title="second")])
        store = LibraryStore(path)
        try:
            rows = store._rows("SELECT id, title, state AS id FROM tasks ORDER BY id")
            assert [type(row) for row in rows] == [dict, dict]
            assert rows == [{"id": "a", "title": "first"}, {"id": "b", "title": "second"}]
            assert list(rows[0]) == ["id", "title"]
            assert store._rows("SELECT id FROM tasks WHERE id = ?", ("none",)) == []
            song = store.song("b")
            assert song is not None and song["title"] == "second" and song["take"] == 2
            # the journal reads the same connection and still gets its sqlite3.Row rows
            assert sorted(e.id for e in journal.unfinished()) == ["a", "b"]
        finally:
            store.close()
