"""The batch layer: many songs from rows, within a budget, safe to re-run (`engine`), rows read from text
or a DataFrame (`rows`). Built on the client and the storage layer's batch store."""

from .engine import (
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
