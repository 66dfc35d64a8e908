"""The ledger on PostgreSQL (psycopg 3): one ledger for many gateway processes on many machines.

A reservation locks the team row (`SELECT ... FOR UPDATE`), so reservations run one at a time across every
gateway while reads run freely. A connection the server dropped (a restart) is found by a cheap statement
at the start of each transaction and opened again once; a statement that fails mid-transaction is an error
for that call, never retried blindly.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .ledger import GatewayLedger, fill_singers, fill_totals

CONNECT_TIMEOUT = 10
SCHEMA_LOCK = 3131_0001
"""Advisory lock id: two gateways starting at once do not race to create the same tables."""


class PostgresLedger(GatewayLedger):
    placeholder = "%s"

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT)

    def _begin(self, cur: Any, write: bool) -> None:
        cur.execute("SELECT 1")

    def _is_stale(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)

    def _lock_for_reserve(self, cur: Any, user: str) -> None:
        cur.one("SELECT budget FROM team WHERE id = 1 FOR UPDATE")

    types: ClassVar[dict[str, str]] = {"real": "DOUBLE PRECISION", "blob": "BYTEA", "int": "BIGINT", "text": "TEXT"}
    claim_lock = " FOR UPDATE SKIP LOCKED"
    """How a replica claims a queue row or a seat (`ledger_queue`): rows another replica holds are passed over."""
    now_sql = "EXTRACT(EPOCH FROM clock_timestamp())::float8"
    """The ledger's clock: the database server's, one for every replica (their own clocks may differ)."""

    def columns_of(self, cur: Any, table: str) -> set[str]:
        return {
            r[0]
            for r in cur.all(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = ?",
                (table,),
            )
        }

    def _schema_lock(self, cur: Any) -> None:
        cur.run("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))

    def base_schema(self, cur: Any) -> None:
        """The tables as they stood before the ledger had versions (migration step 1)."""
        cur.run(
            "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, "
            "budget BIGINT, revoked INTEGER NOT NULL DEFAULT 0, created_at DOUBLE PRECISION NOT NULL, "
            "spent BIGINT NOT NULL DEFAULT 0)"
        )
        cur.run(
            "CREATE TABLE IF NOT EXISTS team (id INTEGER PRIMARY KEY, budget BIGINT, spent BIGINT NOT NULL DEFAULT 0)"
        )
        cur.run("INSERT INTO team (id, budget) VALUES (1, NULL) ON CONFLICT (id) DO NOTHING")
        cur.run(
            "CREATE TABLE IF NOT EXISTS calls (id BIGSERIAL PRIMARY KEY, user_name TEXT NOT NULL, "
            "idem_key TEXT, endpoint TEXT NOT NULL, model TEXT, estimated BIGINT NOT NULL, measured BIGINT, "
            "state TEXT NOT NULL, status_code INTEGER, body BYTEA, created_at DOUBLE PRECISION NOT NULL, "
            "day TEXT NOT NULL, fingerprint TEXT, UNIQUE (user_name, idem_key))"
        )
        cur.run("ALTER TABLE calls ADD COLUMN IF NOT EXISTS fingerprint TEXT")  # a ledger made before it had one
        cur.run("CREATE TABLE IF NOT EXISTS tasks (task_id TEXT PRIMARY KEY, user_name TEXT NOT NULL)")
        cur.run("CREATE TABLE IF NOT EXISTS songs (song_id TEXT PRIMARY KEY, user_name TEXT NOT NULL)")
        cur.run("CREATE INDEX IF NOT EXISTS tasks_user ON tasks (user_name)")  # a user's tasks, not every task
        cur.run(  # the meter's calls in flight (a few), not every call, read while it holds the team row
            "CREATE INDEX IF NOT EXISTS calls_in_flight ON calls (created_at) WHERE state IN ('pending', 'unknown')"
        )
        cur.run("CREATE TABLE IF NOT EXISTS meter (id INTEGER PRIMARY KEY, counts BIGINT, last_call BIGINT)")
        cur.run("INSERT INTO meter (id) VALUES (1) ON CONFLICT (id) DO NOTHING")
        have = {
            r[0]
            for r in cur.all(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND column_name = 'spent' AND table_name IN ('users', 'team')"
            )
        }
        added = [t for t in ("users", "team") if t not in have]
        for table in added:  # a ledger made before the running totals: added and filled in this one transaction
            cur.run(f"ALTER TABLE {table} ADD COLUMN spent BIGINT NOT NULL DEFAULT 0")
        if added:
            fill_totals(cur)
        if (
            cur.one("SELECT to_regclass('singers')")[0] is None
        ):  # a ledger made before: the singers its vibe calls made, from their answers
            cur.run("CREATE TABLE singers (singer_id TEXT PRIMARY KEY, user_name TEXT NOT NULL)")
            fill_singers(cur)
