"""The batch layer: many songs from rows, within a budget, safe to re-run. `engine` runs a batch (its two faces),
`scheduler` decides, `prepare` checks and records it first, `rows` validates the rows, `result` is what a user
holds, `overlap` and `retry` what runs on one key share. Built on the client and the storage layer's batch store."""

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
