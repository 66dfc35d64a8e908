"""One user with thousands of rows in the fair queue: a colleague's single row is still next when a seat frees, and
the hog's own listing of their queued ids costs time in proportion to their rows (not to their square: each place
in line counted once, so a few listings cannot hold the gateway's ledger threads for seconds each)."""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ipymusicgen.storage import ledger_queue as lq
from ipymusicgen.storage.ledger_engines import open_ledger

GENERATE = "/v1/music/generate"


def _ledger_with_hog(path: Path, rows: int) -> Any:
    """A SQLite ledger whose seat (one) is taken and whose hog has `rows` queued creates behind it (written in one
    transaction: placing 5,000 one by one takes minutes on a loaded machine)."""
    ledger = open_ledger(str(path))
    ledger.add_user("hog", "hash-hog", None)
    ledger.add_user("col", "hash-col", None)
    lq.ensure_seats(ledger, 1)
    numbers = itertools.count()
    seat = lq.enqueue(ledger, "hog", None, GENERATE, "MFV3.0", 3, None, b"{}", 1, 0.0, lambda: f"gq-s{next(numbers)}")
    assert seat.slot == 1
    ledger.close()
    with sqlite3.connect(path) as db:
        first = db.execute("SELECT MAX(id) FROM calls").fetchone()[0] + 1
        calls = range(first, first + rows)
        db.executemany(
            "INSERT INTO calls (id, user_name, idem_key, endpoint, model, estimated, state, created_at, day) "
            "VALUES (?, 'hog', NULL, ?, 'MFV3.0', 3, 'queued', 0, '2026-01-01')",
            ((c, GENERATE) for c in calls),
        )
        db.executemany(
            "INSERT INTO queue (call_id, user_name, endpoint, ids, state, shown, queued_at) "
            "VALUES (?, 'hog', ?, ?, 'queued', 1, 0)",
            ((c, GENERATE, json.dumps([f"gq-{c}-a", f"gq-{c}-b"])) for c in calls),
        )
        db.executemany(
            "INSERT INTO queue_ids (task_id, call_id, idx) VALUES (?, ?, ?)",
            ((f"gq-{c}-{x}", c, i) for c in calls for i, x in enumerate("ab")),
        )
    return open_ledger(str(path)), seat.reservation.call_id


class _Counting:
    """The ledger, counting the statements its cursors run (what a listing costs, on any machine's load)."""

    def __init__(self, ledger: Any) -> None:
        self.ledger, self.statements = ledger, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ledger, name)

    @contextlib.contextmanager
    def _cursor(self, write: bool = True) -> Iterator[Any]:
        with self.ledger._cursor(write) as cur:
            outer = self

            class Counted:
                def one(self, *args: Any) -> Any:
                    outer.statements += 1
                    return cur.one(*args)

                def all(self, *args: Any) -> Any:
                    outer.statements += 1
                    return cur.all(*args)

            yield Counted()


def _listing_statements(ledger: Any) -> int:
    counting = _Counting(ledger)
    looked = lq.look_up(counting, "hog", None)
    assert max(v.position for v in looked.values()) == len(looked) // 2
    return counting.statements


def test_a_colleagues_one_row_goes_before_the_hogs_five_thousand(tmp_path: Path) -> None:
    ledger, seated = _ledger_with_hog(tmp_path / "hog.sqlite3", 5000)
    try:
        numbers = itertools.count()
        mine = lq.enqueue(
            ledger, "col", None, GENERATE, "MFV3.0", 3, None, b"{}", 1, 1.0, lambda: f"gq-c{next(numbers)}"
        )
        assert mine.shown and mine.position == 1, "a colleague is next in line, ahead of the hog's 5,000"
        assert lq.claim(ledger, 1, 2.0) is None, "the seat is taken"
        lq.release(ledger, seated)
        claimed = lq.claim(ledger, 1, 3.0)
        assert claimed is not None and claimed.user == "col", "the first seat that frees is the colleague's"
        lq.release(ledger, claimed.call_id)
        after = lq.claim(ledger, 1, 4.0)
        assert after is not None and after.user == "hog"
    finally:
        ledger.close()


def test_the_hogs_listing_reads_their_line_once_not_once_per_row(tmp_path: Path) -> None:
    small, _ = _ledger_with_hog(tmp_path / "small.sqlite3", 20)
    large, _ = _ledger_with_hog(tmp_path / "large.sqlite3", 4000)
    try:
        counted = _listing_statements(small), _listing_statements(large)
    finally:
        small.close()
        large.close()
    assert counted[1] == counted[0] <= 4, f"statements for 20 rows, 4,000 rows: {counted}"
