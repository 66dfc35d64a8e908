"""Which ledger engine a database URL names (kept apart from `ledger`, which both engines import)."""

from __future__ import annotations

from .ledger import GatewayLedger


def is_postgres(url: str) -> bool:
    """Whether a database URL names PostgreSQL (`postgresql://...` or `postgres://...`)."""
    return url.startswith(("postgresql://", "postgres://"))


def open_ledger(url: str) -> GatewayLedger:
    """`postgresql://...` (or `postgres://`): PostgreSQL; anything else: a SQLite file (`sqlite:///path` or a path)."""
    if is_postgres(url):
        from .ledger_postgres import PostgresLedger

        return PostgresLedger(url)
    from .ledger_sqlite import SqliteLedger

    return SqliteLedger(url.removeprefix("sqlite://"))
