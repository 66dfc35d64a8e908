"""The agent server's consent quotes, journalled with their attempts (issue 40).

A quote (a priced paid call waiting for the user's press in the consent card or on the consent page) is written
to the journal's file when it is made, and its attempt row (`batch_rows.quote_id`) names the quote that is paying
it. So after a restart the journal still says which quote paid which attempt and its ids: a confirm of a quote of
before the restart answers what it paid (nothing is sent again), or that it was never confirmed (nothing sent).
The tables are made by a numbered step of `migrations.py` (`create_tables`); these functions use the batch tables'
store (`BatchStore`), its one connection and its lock.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # migrations.py makes the tables from here: no import back into the store at run time
    from .batches import BatchStore


def create_tables(db: sqlite3.Connection) -> None:
    """The quotes table and the attempt row's quote id (a no-op on a file that has them)."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS agent_quotes (
            id TEXT PRIMARY KEY,
            tool TEXT NOT NULL,
            attempt TEXT,
            price TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'quoted' CHECK (state IN ('quoted', 'confirmed')),
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            confirmed_at REAL
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS agent_quotes_attempt ON agent_quotes(attempt)")
    present = {row[1] for row in db.execute("PRAGMA table_info(batch_rows)")}
    if "quote_id" not in present:
        db.execute("ALTER TABLE batch_rows ADD COLUMN quote_id TEXT")


@dataclass(frozen=True)
class QuoteRecord:
    """A quote as the journal holds it."""

    id: str
    tool: str
    attempt: str | None
    price: dict[str, Any]
    state: str
    created_at: float
    expires_at: float
    confirmed_at: float | None


def note_quote(
    store: BatchStore, quote_id: str, tool: str, attempt: str | None, price: dict[str, Any], expires_at: float
) -> bool:
    """Journal a quote as it is made (`attempt`: the batch-table name its call is recorded under). False when the
    file refused (locked, read-only): the quote still stands for this process, and the write is retried later."""
    return store._record(
        [
            (
                "INSERT OR IGNORE INTO agent_quotes (id, tool, attempt, price, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (quote_id, tool, attempt, json.dumps(price, default=str), time.time(), expires_at),
            )
        ]
    )


def note_confirmed(store: BatchStore, quote_id: str) -> bool:
    """Journal that the user confirmed this quote (right before its call is sent)."""
    sql = "UPDATE agent_quotes SET state = 'confirmed', confirmed_at = ? WHERE id = ?"
    return store._record([(sql, (time.time(), quote_id))])


def name_paying_quote(store: BatchStore, attempt: str, quote_id: str) -> bool:
    """The attempt row (a single call's: row 0) names the quote paying it; written once the row is claimed and
    before the call goes out (a row never sent is rewritten whole when it is opened again)."""
    sql = "UPDATE batch_rows SET quote_id = ? WHERE batch = ? AND row_index = 0"
    return store._record([(sql, (quote_id, attempt))])


def quote_record(store: BatchStore, quote_id: str) -> QuoteRecord | None:
    """The journal's quote of this id, or None."""
    with store._lock:
        row = store._db.execute(
            "SELECT id, tool, attempt, price, state, created_at, expires_at, confirmed_at FROM agent_quotes "
            "WHERE id = ?",
            (quote_id,),
        ).fetchone()
    if row is None:
        return None
    return QuoteRecord(
        row[0], row[1], row[2], json.loads(row[3]), row[4], float(row[5]), float(row[6]),
        None if row[7] is None else float(row[7]),
    )  # fmt: skip


def attempt_quote(store: BatchStore, attempt: str) -> str | None:
    """The quote id an attempt row names (the one that paid it, or the latest made for it)."""
    with store._lock:
        row = store._db.execute(
            "SELECT quote_id FROM batch_rows WHERE batch = ? AND row_index = 0", (attempt,)
        ).fetchone()
    return None if row is None else row[0]
