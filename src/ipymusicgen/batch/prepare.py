"""Before a batch run's first call (shared by both faces in `batch/drivers.py`): its options checked, its rows
validated and recorded in the batch store (or refused whole), what a re-run knows loaded into a new `Scheduler`, and
the estimate checked against the budget and the key's counts left."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Callable
from typing import Any

from ..models.dollar_prices import DollarBudget, DollarPriceError, budget_charge, dollar_budget, parse_budget
from ..storage.batches import BatchStore, StoredRow
from ..storage.errors import StorageError
from .result import Batch
from .rows import BatchBudgetError, BatchError, derive_name, validate_rows
from .scheduler import Scheduler

MAX_CONCURRENCY = 1000


def key_fingerprint(client: Any) -> str:
    """The key as batches compare it (429 streaks, overlapping runs): a hash with the host, never the key."""
    key = client.settings.key_value() or ""
    return hashlib.sha256(f"{client.settings.base_url}|{key}".encode()).hexdigest()[:16]


def _prepare(
    client: Any, requests: Any, name: str | None, concurrency: int, budget: int | None, store: BatchStore | None
) -> tuple[Batch, dict[int, StoredRow]]:
    if (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, numbers.Integral)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise BatchError(f"concurrency must be from 1 to {MAX_CONCURRENCY}, a whole number (got {concurrency!r})")
    try:  # '$5' (or a DollarBudget): dollars across providers; a number: the service's credits
        budget = parse_budget(budget)
    except DollarPriceError as exc:
        raise BatchError(str(exc)) from None
    # a NaN budget would compare False against every cost and so never stop a paid row
    if (
        budget is not None
        and not isinstance(budget, DollarBudget)
        and (isinstance(budget, bool) or not isinstance(budget, numbers.Real) or math.isnan(budget) or budget < 0)
    ):
        raise BatchError(f"budget must be 0 or more credits (got {budget!r})")
    rows = validate_rows(requests, allow_unknown_models=client.settings.allow_unknown_models)
    name = name or derive_name(rows)
    store = store or client.wiring.batch_store(client)  # the workspace's `Database` for its file
    try:
        stored = store.open_batch(name, [(r.request_hash, json.dumps(r.request.to_payload()), r.v2) for r in rows])
    except StorageError as exc:
        raise BatchError(f"The batch's rows cannot be recorded in {store!r} ({exc}); nothing was sent.") from None
    except ValueError as exc:
        index = exc.args[0]
        raise BatchError(
            f"Row {index + 1} of batch {name!r} is not the request first recorded under that name and row; "
            "nothing was sent. Use a new name for a changed batch (or leave the name out)."
        ) from None
    batch = Batch(name, rows, store=store, concurrency=concurrency, budget=budget, estimate=0)
    return batch, stored


def either_budget(budget: Any, budget_usd: Any) -> Any:
    """`budget` (credits, or `'$5'`), or `budget_usd` (dollars) as a `DollarBudget`; both at once is refused."""
    if budget_usd is None:
        return budget
    if budget is not None:
        raise BatchError("give budget or budget_usd, not both")
    try:
        return dollar_budget(budget_usd, "budget_usd")
    except DollarPriceError as exc:
        raise BatchError(str(exc)) from None


def _check_budget_unit(batch: Batch, engine: Scheduler) -> None:
    """Every row priced in the budget's unit (an engine's row cannot come from credits; a service row counts in
    dollars only at the user's rate), and a dollar budget checked, before anything is sent."""
    try:
        charges = [budget_charge(r.request, batch.budget) for r in engine.to_send()]
    except DollarPriceError as exc:
        raise BatchError(f"Batch {batch.name!r}: {exc} Nothing was sent.") from None
    if isinstance(batch.budget, DollarBudget) and sum(charges) > batch.budget.amount:
        raise BatchBudgetError(
            f"Batch {batch.name!r} would cost about ${sum(charges):.2f}, more than the budget of {batch.budget}; "
            "nothing was sent.",
            estimate=sum(charges),  # type: ignore[arg-type]
            budget=batch.budget,  # type: ignore[arg-type]
            counts_left=None,
        )


def check_budget(batch: Batch, engine: Scheduler, counts_left: int | None) -> None:
    estimate = sum(budget_charge(r.request, None) for r in engine.to_send())  # the service's credits only
    batch.estimate = estimate
    batch.counts_before = counts_left  # this run's: a re-run is measured on its own
    _check_budget_unit(batch, engine)
    if batch.budget is not None and not isinstance(batch.budget, DollarBudget) and estimate > batch.budget:
        raise BatchBudgetError(
            f"Batch {batch.name!r} would cost about {estimate} credits, more than the budget of {batch.budget}; "
            "nothing was sent.",
            estimate=estimate,
            budget=batch.budget,
            counts_left=counts_left,
        )
    if counts_left is not None and estimate > counts_left:
        raise BatchBudgetError(
            f"Batch {batch.name!r} would cost about {estimate} credits, but the key has {counts_left} left; "
            "nothing was sent.",
            estimate=estimate,
            budget=batch.budget,
            counts_left=counts_left,
        )
    if counts_left is not None:
        batch.run_id = batch.store.start_run(batch.name, engine.host, counts_left)
    if engine.to_send():  # after every refusal: a refused run, or one with nothing to send, spends nothing
        engine.activity.begin(engine.key, batch)


def _stall_poll_interval(client: Any, stall_timeout: float) -> float:
    return client.settings.poll_interval_for(max(0.01, min(client.settings.poll_interval, stall_timeout / 4)))


def start(
    client: Any,
    requests: Any,
    name: str | None,
    concurrency: int,
    budget: int | None,
    store: BatchStore | None,
    on_update: Callable[[Batch], None] | None,
    stall_timeout: float,
    retry_unknown: bool,
    clock: Callable[[], float],
) -> Scheduler:
    """What both faces do before the first call: validate and store the rows, and load what a re-run knows."""
    if (
        isinstance(stall_timeout, bool)
        or not isinstance(stall_timeout, numbers.Real)
        or math.isnan(stall_timeout)
        or stall_timeout <= 0
    ):  # NaN would never stall, 0 or less at once
        raise BatchError(f"stall_timeout must be more than 0 seconds (got {stall_timeout!r})")
    batch, stored = _prepare(client, requests, name, concurrency, budget, store)
    batch.client = client
    if on_update is not None:
        batch.add_listener(on_update)
    engine = Scheduler(
        batch,
        stall_timeout=stall_timeout,
        retry_unknown=retry_unknown,
        poll_interval=_stall_poll_interval(client, stall_timeout),
        clock=clock,
        activity=client.wiring.keys,  # the workspace's: its other batches and its agent server's calls on the key
    )
    engine.key = key_fingerprint(client)
    engine.host = client.settings.base_url
    engine.load(stored)
    return engine
