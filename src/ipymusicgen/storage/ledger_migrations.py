"""The gateway ledger's schema as numbered steps, applied once each, in order, in the transaction that opens it.

As the journal's (`migrations.py`): the ledger's version is the number of steps applied, kept in the
`ledger_schema` row. Ledgers made before versions existed (version 0) already hold some of step 1's tables, so
every step is a no-op on what is already there (`IF NOT EXISTS`, columns added only when missing). A ledger whose
version is above what this code knows was written by a newer ipymusicgen: it is refused, untouched. The steps run
under the engine's schema lock (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: an advisory lock), so two gateways
starting at once apply each step exactly once. A new step is a new function at the end; steps are never edited
once released.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Step = Callable[[Any, Any], None]
"""A step: (the ledger, for its dialect and column look-ups; a cursor in the opening transaction)."""
MIGRATIONS: list[Step] = []


class LedgerVersionError(RuntimeError):
    """The ledger was written by a newer version of ipymusicgen; it is left as it is."""


def migration(step: Step) -> Step:
    MIGRATIONS.append(step)
    return step


def add_missing_columns(ledger: Any, cur: Any, table: str, columns: tuple[tuple[str, str], ...]) -> None:
    present = ledger.columns_of(cur, table)
    for name, kind in columns:
        if name not in present:
            cur.run(f"ALTER TABLE {table} ADD COLUMN {name} {ledger.types[kind]}")


@migration
def m001_base(ledger: Any, cur: Any) -> None:
    """Users, team, calls, tasks, songs, the meter, the running totals and singers, as the ledger stood before
    it had versions (the engine's own DDL; a ledger made earlier gets what it lacks, filled from its rows)."""
    ledger.base_schema(cur)


@migration
def m002_windows_and_reconcile(ledger: Any, cur: Any) -> None:
    """Each call's window on the ledger's clock (`created_at` to `ended_at`), the process that sent it, the body
    it sent (what `gateway reconcile` matches the upstream's tasks against) and a note saying why it was not
    measured; the meter's reading window start and the credits charged at an estimate that a late reading may
    still show falling (`owed`)."""
    add_missing_columns(
        ledger,
        cur,
        "calls",
        (("ended_at", "real"), ("owner", "text"), ("request", "blob"), ("note", "text")),
    )
    add_missing_columns(ledger, cur, "meter", (("read_at", "real"), ("owed", "int"), ("owed_at", "real")))
    cur.run("CREATE INDEX IF NOT EXISTS calls_created ON calls (created_at)")
    cur.run("CREATE INDEX IF NOT EXISTS calls_ended ON calls (ended_at)")


@migration
def m003_fair_queue(ledger: Any, cur: Any) -> None:
    """The fair queue over the upstream key's seats (`gateway serve --max-in-flight`, `ledger_queue`): rows waiting
    for a seat (one per paid create, keyed by its call) and the ids the gateway answered them with; the seats and
    the call each holds; each user's last turn (round-robin); the seats a 429 shrank the key to."""
    t = ledger.types
    cur.run(
        f"CREATE TABLE IF NOT EXISTS queue (call_id {t['int']} PRIMARY KEY, user_name TEXT NOT NULL, "
        "endpoint TEXT NOT NULL, ids TEXT NOT NULL, state TEXT NOT NULL, shown INTEGER NOT NULL DEFAULT 0, "
        f"claimed_by TEXT, claimed_at {t['real']}, queued_at {t['real']} NOT NULL)"
    )
    cur.run("CREATE INDEX IF NOT EXISTS queue_waiting ON queue (state, user_name, call_id)")
    cur.run(
        f"CREATE TABLE IF NOT EXISTS queue_ids (task_id TEXT PRIMARY KEY, call_id {t['int']} NOT NULL, "
        "idx INTEGER NOT NULL)"
    )
    cur.run(f"CREATE TABLE IF NOT EXISTS queue_turns (user_name TEXT PRIMARY KEY, turn {t['int']} NOT NULL)")
    cur.run(
        f"CREATE TABLE IF NOT EXISTS queue_seats (slot INTEGER PRIMARY KEY, call_id {t['int']}, holder TEXT, "
        f"held_at {t['real']}, checked_at {t['real']})"
    )
    cur.run(
        f"CREATE TABLE IF NOT EXISTS queue_limit (id INTEGER PRIMARY KEY, low INTEGER, shrunk_at {t['real']}, "
        f"hold {t['real']})"
    )


@migration
def m004_gateway_batches(ledger: Any, cur: Any) -> None:
    """Batches handed to the gateway whole (`gateway/batch_store.py`): each batch of a user by its name, its rows
    by index with their request, state, the idempotency key of their create and the replica sending it, and each
    replica's heartbeat (a row claimed by a replica that stopped beating is taken over by another)."""
    serial = "BIGSERIAL PRIMARY KEY" if ledger.types["blob"] == "BYTEA" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    real, text, num = ledger.types["real"], ledger.types["text"], ledger.types["int"]
    cur.run(
        f"CREATE TABLE IF NOT EXISTS batches (id {serial}, user_name {text} NOT NULL, name {text} NOT NULL, "
        f"state {text} NOT NULL, concurrency {num} NOT NULL, budget_left {num}, stall_timeout {real} NOT NULL, "
        f"note {text}, created_at {real} NOT NULL, updated_at {real} NOT NULL, last_claim_at {real}, "
        f"paused_until {real}, UNIQUE (user_name, name))"
    )
    cur.run(
        f"CREATE TABLE IF NOT EXISTS batch_rows (batch_id {num} NOT NULL, row_index {num} NOT NULL, "
        f"request_hash {text} NOT NULL, request {text} NOT NULL, v2 {num} NOT NULL, estimate {num} NOT NULL, "
        f"state {text} NOT NULL, idem_base {text} NOT NULL, attempt {num} NOT NULL DEFAULT 0, ids {text}, "
        f"error {text}, cost {num} NOT NULL DEFAULT 0, claimed_by {text}, last_change {real}, "
        "PRIMARY KEY (batch_id, row_index))"
    )
    cur.run("CREATE INDEX IF NOT EXISTS batch_rows_state ON batch_rows (state, batch_id)")
    cur.run(f"CREATE TABLE IF NOT EXISTS batch_workers (owner {text} PRIMARY KEY, seen_at {real} NOT NULL)")


@migration
def m005_queue_stand_ins(ledger: Any, cur: Any) -> None:
    """A queued create that names a song or singer the caller does not own is sent with a stand-in id (one that does
    not exist); the pair (stand-in, the id asked for) is kept with its row, so its later answers name the id asked."""
    add_missing_columns(ledger, cur, "queue", (("swap", "text"),))


@migration
def m006_engine_calls(ledger: Any, cur: Any) -> None:
    """The synchronous engines' calls (ElevenLabs, Lyria) served at their own paths (`gateway/engine_routes.py`,
    `ledger_dollars.py`): priced in US dollars (whole millionths), never in credits, in a table of their own so the
    credit meter and `gateway reconcile` never take one for the service's; their answers (the audio) kept for a
    repeat of the same Idempotency-Key. Each user's and the team's dollar budget and what is charged against it."""
    serial = "BIGSERIAL PRIMARY KEY" if ledger.types["blob"] == "BYTEA" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    t = ledger.types
    cur.run(
        f"CREATE TABLE IF NOT EXISTS engine_calls (id {serial}, user_name {t['text']} NOT NULL, idem_key {t['text']}, "
        f"provider {t['text']} NOT NULL, endpoint {t['text']} NOT NULL, model {t['text']}, "
        f"estimated_usd {t['int']} NOT NULL, state {t['text']} NOT NULL, status_code {t['int']}, "
        f"media_type {t['text']}, body {t['blob']}, fingerprint {t['text']}, owner {t['text']}, "
        f"created_at {t['real']} NOT NULL, ended_at {t['real']}, day {t['text']} NOT NULL, note {t['text']}, "
        "UNIQUE (user_name, idem_key))"
    )
    add_missing_columns(ledger, cur, "users", (("budget_usd", "int"), ("spent_usd", "int")))
    add_missing_columns(ledger, cur, "team", (("budget_usd", "int"), ("spent_usd", "int")))


@migration
def m007_service_calls_in_dollars(ledger: Any, cur: Any) -> None:
    """A service call paid from a dollar budget (`ledger_dollars.service_rate`): the rate it was reserved at, in
    millionths of a dollar per credit (NULL: paid in credits, as every call before). Its credits times this rate
    move the dollar totals, never the credit ones: each call is reserved and settled in exactly one unit."""
    add_missing_columns(ledger, cur, "calls", (("usd_rate", "int"),))


LATEST = len(MIGRATIONS)


def migrate(ledger: Any, cur: Any) -> int:
    """Apply the steps the ledger lacks, in the caller's transaction (which holds the schema lock); its version."""
    cur.run("CREATE TABLE IF NOT EXISTS ledger_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
    row = cur.one("SELECT version FROM ledger_schema WHERE id = 1")
    current = int(row[0]) if row else 0
    if current > LATEST:
        raise LedgerVersionError(
            f"the ledger was written by a newer version of ipymusicgen (schema version {current}); this version "
            f"knows schema versions up to {LATEST}. Upgrade ipymusicgen to use it; the ledger was left untouched."
        )
    for step in MIGRATIONS[current:]:
        step(ledger, cur)
    if current < LATEST:
        if row:
            cur.run("UPDATE ledger_schema SET version = ? WHERE id = 1", (LATEST,))
        else:
            cur.run("INSERT INTO ledger_schema (id, version) VALUES (1, ?)", (LATEST,))
    return LATEST
