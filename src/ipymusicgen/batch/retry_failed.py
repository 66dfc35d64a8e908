"""Retrying a batch's failed rows as a new batch: its name comes from the batch store (the names earlier retries
used, in this kernel or any before it), never from a counter that a restart sets back, and it keeps the batch's
budget (what is left of it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..storage.batches import BatchStore
    from .drivers import Batch


def retry_name(store: BatchStore, name: str) -> str:
    """`<name>-retry-N`, N one more than any retry of `name` the store has ever recorded."""
    prefix = f"{name}-retry-"
    used = [int(n[len(prefix) :]) for n in store.names() if n.startswith(prefix) and n[len(prefix) :].isdigit()]
    return f"{prefix}{max(used, default=0) + 1}"


def retry_budget(batch: Batch) -> int | None:
    """What the batch's budget leaves after what its rows were charged (estimated); None when it had none."""
    if batch.budget is None:
        return None
    return max(0, int(batch.budget) - batch.spent_estimate)


def retry_failed(batch: Batch, **options: Any) -> Batch | None:
    """Send `batch`'s failed rows again as a new batch in the same store, under a name no earlier retry used and
    within what is left of its budget; None when nothing failed. `options` go to the client's `batch()`."""
    failed = batch.failed
    if not failed or batch.client is None:
        return None
    return batch.client.batch(
        [r.request for r in failed],
        name=retry_name(batch.store, batch.name),
        budget=retry_budget(batch),
        store=batch.store,
        **options,
    )
