"""The batch layer: many songs from rows, within a budget, safe to re-run. `drivers` runs a batch (its two faces),
`scheduler` decides, `prepare` checks and records it first, `rows` validates the rows, `result` is what a user
holds, `key_activity` what runs on one key share (one per workspace), `retry_failed` sends failed rows again.
Built on the client and the batch store of the workspace's `Database`."""

from .drivers import (
    Batch,
    BatchBudgetError,
    BatchError,
    BatchFailedError,
    BatchRow,
    run_batch,
    run_batch_async,
    validate_rows,
)

__all__ = [
    "Batch",
    "BatchBudgetError",
    "BatchError",
    "BatchFailedError",
    "BatchRow",
    "run_batch",
    "run_batch_async",
    "validate_rows",
]
