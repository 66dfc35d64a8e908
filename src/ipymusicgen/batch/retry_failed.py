"""Retrying a batch's failed rows as a new batch: its name comes from the batch store (the names earlier retries
used, in this kernel or any before it), never from a counter that a restart sets back, and it keeps the batch's
budget (what is left of it)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..models.dollar_prices import DollarBudget, budget_charge
from ..models.providers import EngineRequest

if TYPE_CHECKING:
    from ..storage.batches import BatchStore
    from .drivers import Batch


def retry_name(store: BatchStore, name: str) -> str:
    """`<name>-retry-N`, N one more than any retry of `name` the store has ever recorded."""
    prefix = f"{name}-retry-"
    used = [int(n[len(prefix) :]) for n in store.names() if n.startswith(prefix) and n[len(prefix) :].isdigit()]
    return f"{prefix}{max(used, default=0) + 1}"


def retry_budget(batch: Batch) -> Any:
    """What the batch's budget leaves after what its rows were charged (estimated); None when it had none. A
    dollar budget counts, at their dollar estimates, every row that was sent (a failed one with ids too, even an
    engine's refused call: what is left never comes out high)."""
    if batch.budget is None:
        return None
    if isinstance(batch.budget, DollarBudget):
        charged = [
            r for r in batch.rows if r.state in ("complete", "submitted", "unknown") or (r.state == "failed" and r.ids)
        ]
        spent = sum((budget_charge(r.request, batch.budget) for r in charged), Decimal(0))
        return DollarBudget(max(Decimal(0), batch.budget.amount - spent))
    return max(0, int(batch.budget) - batch.spent_estimate)


def retry_failed(batch: Batch, **options: Any) -> Batch | None:
    """Send `batch`'s failed rows again as a new batch in the same store, under a name no earlier retry used and
    within what is left of its budget; None when nothing failed. `options` go to the client's `batch()`."""
    failed = [r for r in batch.failed if not _may_have_been_charged(r)]
    if not failed or batch.client is None:
        return None
    return batch.client.batch(
        [r.request for r in failed],
        name=retry_name(batch.store, batch.name),
        budget=retry_budget(batch),
        store=batch.store,
        **options,
    )


def _may_have_been_charged(row: Any) -> bool:
    """An engine's row whose one call may have been charged (a lost answer, a 5xx) is never sent again by a retry;
    only a definite refusal ("not charged") is. The service's failed rows are retried as before."""
    if not isinstance(row.request, EngineRequest):
        return False
    charges = [(getattr(r, "model_extra", None) or {}).get("charge") for r in row.records]
    return not charges or any(c != "not charged" for c in charges)
