"""Batches handed to the gateway whole, kept in its ledger: the names the gateway's batch modules use.

The tables and their SQL are `storage/ledger_batches.py`'s (every SQL statement lives in `storage/`); this module
keeps the gateway's own name for them, so its routes, worker and command line import from beside them.
"""

from __future__ import annotations

from ..storage.ledger_batches import (
    CALL_OF_ROW,
    CHARGED,
    COMPLETE,
    DONE,
    FAILED,
    LEASE,
    QUEUED,
    ROW_STATES,
    RUNNING,
    SENDING,
    SENT,
    SKIPPED,
    STOPPED,
    STOPPED_BY_ADMIN,
    UNKNOWN,
    BatchStore,
    BatchSummary,
    Claimed,
    DeadClaim,
    Following,
    NewRow,
    Submitted,
    idem_base,
)

__all__ = [
    "CALL_OF_ROW",
    "CHARGED",
    "COMPLETE",
    "DONE",
    "FAILED",
    "LEASE",
    "QUEUED",
    "ROW_STATES",
    "RUNNING",
    "SENDING",
    "SENT",
    "SKIPPED",
    "STOPPED",
    "STOPPED_BY_ADMIN",
    "UNKNOWN",
    "BatchStore",
    "BatchSummary",
    "Claimed",
    "DeadClaim",
    "Following",
    "NewRow",
    "Submitted",
    "idem_base",
]
