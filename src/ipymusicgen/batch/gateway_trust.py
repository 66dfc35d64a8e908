"""What a notebook believes of a team gateway's answer about a batch it handed over (`on_gateway.Follower`).

The gateway runs the rows, but the notebook checks what it can before it shows or stores a row's state: a row
number is a whole number naming one of the batch's rows (never a bool), once per answer; a state is one of the
gateway's words; ids are short strings, each one row's; a cost is a whole number from 0 to ten times the row's
estimate (a measurement may raise a call's price, never tenfold), else the estimate; server text is cut to a
bound. A row said complete becomes complete here only once the notebook has read its songs itself
(`on_gateway.Follower`), and a batch the gateway calls over ends with each row it never named unknown.
"""

from __future__ import annotations

from typing import Any

GATEWAY_STATES = frozenset({"queued", "sending", "sent", "complete", "failed", "unknown", "skipped"})
BATCH_STATES = frozenset({"running", "done", "stopped"})
MAX_IDS = 8
"""A row's create makes two songs; a few more leave room for the service, never thousands."""
MAX_ID = 200
MAX_ERROR = 1000
COST_REACH = 10
CHARGED_STATES = frozenset({"sending", "sent", "complete", "failed", "unknown"})
NEVER_NAMED = "the gateway ended the batch without ever reporting this row: it may have been sent (and charged)"
UNREAD = "the gateway says complete, but its songs could not be read here ({ids}): not believed"
STILL = "the gateway called the batch done while this row was still {state}: it may have been sent (and charged)"
FAILED_SONGS = "the gateway says complete, but every song of this row failed when read here: not believed"
SHARED = "the gateway named songs that row {row} holds: not believed"


def whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def row_index(shown: Any, rows: int) -> int | None:
    """The row a shown row names (None: not a row of this batch)."""
    index = whole(shown.get("index")) if isinstance(shown, dict) else None
    return index if index is not None and 0 <= index < rows else None


def batch_state(value: Any) -> str:
    """The batch's state; anything else reads as still running (the notebook follows on)."""
    return value if isinstance(value, str) and value in BATCH_STATES else "running"


def row_state(value: Any) -> str | None:
    return value if isinstance(value, str) and value in GATEWAY_STATES else None


def row_ids(value: Any) -> list[str] | None:
    """A row's ids (None: not a list of short, distinct, non-empty strings)."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_IDS:
        return None
    ids = [i for i in value if isinstance(i, str) and 0 < len(i) <= MAX_ID]
    return ids if len(ids) == len(value) and len(set(ids)) == len(ids) else None


def row_cost(value: Any, state: str, estimate: int) -> int:
    """A row's credits as shown, or its estimate (0 for a row never sent) when the figure is not believable."""
    cost = whole(value)
    if cost is not None and 0 <= cost <= COST_REACH * max(estimate, 1):
        return cost
    return estimate if state in CHARGED_STATES else 0


def row_error(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= MAX_ERROR else value[: MAX_ERROR - 1] + "…"
