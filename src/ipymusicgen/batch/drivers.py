"""Batches: many songs from a list or a DataFrame, within a budget, resumable by re-running the cell.

`run_batch(client, requests, ...)` (what `MusicClient.batch` and `AsyncMusicClient.batch` call) validates
every row before anything is sent, checks the estimate against the budget and the counts left, then keeps
at most `concurrency` rows in flight (from their create until their songs finish), following every row
with one `TaskSet` polled in batched rounds through the client's own calls, so journaling and the retry
policy stay in the client. Rows are recorded in the batch store so a re-run sends only rows never sent.

This module holds the two faces (the sync one sends creates from worker threads, the async one as asyncio tasks);
what they share before the first call is in `batch/prepare.py`, every decision of a run in `batch/scheduler.py`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..errors import MusicGenError
from ..storage.batches import BatchStore
from . import on_gateway
from .prepare import check_budget, either_budget, start
from .result import STATES, Batch
from .rows import BatchBudgetError, BatchError, BatchFailedError, BatchRow, request_hash, validate_rows
from .scheduler import MAX_RATE_LIMITED, RATE_LIMITED

if TYPE_CHECKING:
    from ..client.faces import AsyncMusicClient, MusicClient

__all__ = [  # the rows, the batch and the engine live in `rows`, `result` and `scheduler`; callers import them here
    "MAX_RATE_LIMITED",
    "RATE_LIMITED",
    "STATES",
    "Batch",
    "BatchBudgetError",
    "BatchError",
    "BatchFailedError",
    "BatchRow",
    "request_hash",
    "run_batch",
    "run_batch_async",
    "validate_rows",
]

MAX_SENDING_THREADS = 32
"""Creates sent at once by the sync face; more rows in flight just wait their turn to be sent."""


class _Wake:
    """What a batch's rest waits on besides its creates, so `stop()` wakes it at once (sync face)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.future: Future[None] = Future()

    def set(self) -> None:
        with self._lock:
            if not self.future.done():
                self.future.set_result(None)

    def rearm(self) -> None:
        with self._lock:
            if self.future.done():
                self.future = Future()


# ---------------------------------------------------------------------------------------------------
# The sync face: creates in worker threads, one polling loop


def run_batch(
    client: MusicClient,
    requests: Any,
    *,
    name: str | None = None,
    concurrency: int = 3,
    budget: Any = None,
    budget_usd: Any = None,
    wait: bool = True,
    stall_timeout: float = 900,
    retry_unknown: bool = False,
    on_update: Callable[[Batch], None] | None = None,
    store: BatchStore | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Batch:
    """Run a batch on a `MusicClient` (what `MusicClient.batch` calls). Partial success is reported, not raised.

    - `requests`: mappings or request models (v1 shapes; a `V2Request`, or a mapping with `"v2": True`, goes
      to v2), or a DataFrame (NaN/None = field not given). All rows are validated before anything is sent.
    - `name`: re-running with it sends only rows never sent; without it, derived from the rows' hash.
    - `concurrency`: rows in flight at once, from their create until their songs finish.
    - `budget`: credits this run may spend; refused up front (nothing sent) when the estimate, or the
      estimate against the key's counts left, is too much. In dollars across providers: `budget='$5'` or
      `budget_usd=5` (a service row then counts at `MUSICGEN_CREDIT_DOLLARS`).
    - `wait=False`: returns at once (the batch runs in a thread); `batch.wait()` blocks, `batch.stop()` stops.
    - `stall_timeout`: a row fails only when none of its songs changed state for that many seconds.
    - `retry_unknown`: resend rows whose create may have reached the service (may charge twice).
    - `on_update(batch)`: called on the batch's thread whenever a row changes.

    Rows are kept in the batch store of the client's journal file, which its wiring gives (a workspace's
    `Database`); a client with no journal keeps them in its wiring's memory store, so re-running in the same
    kernel is still safe but a restart forgets.
    """
    budget = either_budget(budget, budget_usd)
    engine = start(client, requests, name, concurrency, budget, store, on_update, stall_timeout, retry_unknown, clock)
    batch = engine.batch
    info = client.key_info() if engine.to_send() else None
    # a team gateway runs the batch itself (handed over whole, followed here), unless it must stay here
    if on_gateway.runs_batches(info) and not on_gateway.stays_here(engine):
        handed = on_gateway.hand_off(client, engine, wait=wait)
        if handed is not None:  # None: that replica has no batch paths (nothing recorded there): run here
            return handed
    on_gateway.hold_handed(engine)  # rows a gateway holds are never sent from here
    counts_left = info.key_music_counts if info is not None else None
    check_budget(batch, engine, counts_left)

    wake = _Wake()
    batch.add_waker(wake.set)

    def drive() -> None:
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
        from concurrent.futures import wait as wait_futures

        pending: dict[Any, BatchRow] = {}
        try:
            workers = min(concurrency, MAX_SENDING_THREADS)
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"batch-{batch.name[:20]}") as pool:
                while not engine.finished:
                    while (row := engine.next_row()) is not None:
                        if row.v2:
                            pending[pool.submit(client.submit_v2, row.request)] = row
                        else:
                            pending[pool.submit(client.generate, row.request)] = row
                    if engine.watching:
                        try:
                            engine.polled(client.poll(engine.tasks))
                        except MusicGenError:
                            engine.polled(())  # a failed read: try again next round (stall timer still runs)
                    if engine.finished:
                        break
                    pause = engine.pause()  # a create ending or stop() ends the rest at once
                    done, _ = wait_futures([*pending, wake.future], timeout=pause, return_when=FIRST_COMPLETED)
                    wake.rearm()
                    settled = [(pending.pop(f), f) for f in done if f in pending]
                    for row, future in settled:
                        engine.settle(row, future)
                    if batch.budget is not None and any(f.exception() is None for _, f in settled):
                        engine.measured(_counts_left(client))
            after = _counts_left(client) if any(r.cost for r in batch.rows) else None
        except BaseException as exc:
            batch.error = exc
            after = None
            for future, row in pending.items():  # the pool has let them end: record what they learnt
                if future.done():
                    engine.settle(row, future)
        engine.finish(after)

    if wait:
        drive()
        if batch.error is not None:
            raise batch.error
    else:
        batch.run_in_thread(drive)
    return batch


def _counts_left(client: MusicClient) -> int | None:
    try:
        return client.key_info().key_music_counts
    except MusicGenError:
        return None


# ---------------------------------------------------------------------------------------------------
# The async face: creates as asyncio tasks, one polling loop


async def run_batch_async(
    client: AsyncMusicClient,
    requests: Any,
    *,
    name: str | None = None,
    concurrency: int = 3,
    budget: Any = None,
    budget_usd: Any = None,
    wait: bool = True,
    stall_timeout: float = 900,
    retry_unknown: bool = False,
    on_update: Callable[[Batch], None] | None = None,
    store: BatchStore | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Batch:
    """Run a batch on an `AsyncMusicClient`; same meaning as `run_batch`. `wait=False`: `await batch` later."""
    import asyncio

    budget = either_budget(budget, budget_usd)
    engine = start(client, requests, name, concurrency, budget, store, on_update, stall_timeout, retry_unknown, clock)
    batch = engine.batch
    info = (await client.key_info()) if engine.to_send() else None
    if on_gateway.runs_batches(info) and not on_gateway.stays_here(engine):
        handed = await on_gateway.hand_off_async(client, engine, wait=wait)
        if handed is not None:
            return handed
    on_gateway.hold_handed(engine)
    counts_left = info.key_music_counts if info is not None else None
    check_budget(batch, engine, counts_left)

    woken = asyncio.Event()
    loop = asyncio.get_running_loop()
    batch.add_waker(lambda: loop.call_soon_threadsafe(woken.set))

    async def drive() -> Batch:
        pending: dict[asyncio.Task[Any], BatchRow] = {}
        after = None
        try:
            while not engine.finished:
                while (row := engine.next_row()) is not None:
                    call = client.submit_v2(row.request) if row.v2 else client.generate(row.request)
                    pending[asyncio.ensure_future(call)] = row
                if engine.watching:
                    try:
                        engine.polled(await client.poll(engine.tasks))
                    except MusicGenError:
                        engine.polled(())
                if engine.finished:
                    break
                pause = engine.pause()  # a create ending or stop() ends the rest at once
                waiter = asyncio.ensure_future(woken.wait())
                try:
                    done, _ = await asyncio.wait([*pending, waiter], timeout=pause, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                woken.clear()
                settled = [(pending.pop(f), f) for f in done if f in pending]
                for row, future in settled:
                    engine.settle(row, future)
                if batch.budget is not None and any(f.exception() is None for _, f in settled):
                    with contextlib.suppress(MusicGenError):
                        engine.measured((await client.key_info()).key_music_counts)
            if any(r.cost for r in batch.rows):
                try:
                    after = (await client.key_info()).key_music_counts
                except MusicGenError:
                    after = None
        except BaseException as exc:
            batch.error = exc
            for future, row in pending.items():  # a cancelled batch leaves no create running unseen
                if future.done() and not future.cancelled():
                    engine.settle(row, future)
                else:
                    future.cancel()
                    engine.cancelled(row)  # it may have reached the service: unknown, as the journal says
            engine.finish(None)
            raise
        engine.finish(after)
        return batch

    if wait:
        return await drive()
    batch.run_as_task(drive())
    return batch
