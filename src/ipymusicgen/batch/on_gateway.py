"""A batch sent through a team gateway runs there: handed over whole, followed here by its name.

A gateway says what it is in the caller's key info (`"gateway": "ipymusicgen"`), which a batch reads before its
first create anyway, so a batch sent straight to the service costs no extra request. The gateway records the batch
and its rows in its ledger and its workers send them (the user's budget reserved per row, each row's create sent
upstream at most once), so a closed laptop, a culled server or kill -9 of the kernel stops nothing; running the
same batch again attaches to it and sends nothing twice (`retry_unknown=True` asks the gateway to resend, once, the
rows it holds unknown: read first, then named with the attempt seen, so a repeat resends nothing more). Here the
`Batch` follows the gateway's rows (their states, ids, errors and credits) and polls their songs through the client
(the journal, the archive and the views see them as they see any batch's); `batch.stop()` stops the batch at the
gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from types import MappingProxyType
from typing import Any

from ..client.responses import GENERATE, SUBMIT_V2, Endpoint
from ..errors import APIStatusError, MusicGenError
from ..models import costs
from ..models.dollar_prices import DollarBudget, DollarPriceError, budget_charge, credit_rate
from ..models.providers import EngineRequest
from ..models.tasks import TaskSet, TaskState
from ..storage.batches import GATEWAY_OWNER, HANDED, NEVER_SENT
from ..storage.errors import StorageError
from . import gateway_trust as trust
from .result import Batch
from .rows import BatchBudgetError, BatchError, BatchRow
from .scheduler import BACKFILL_ROUNDS, Scheduler

GATEWAY_MARK = "ipymusicgen"
SUBMIT = Endpoint("gateway batch", "POST", "/gateway/v1/batches")
STATUS = Endpoint("gateway batch", "GET", "/gateway/v1/batches")
STOP = Endpoint("gateway batch stop", "POST", "/gateway/v1/batches/stop")
STATES = MappingProxyType({"queued": "pending", "sending": "pending", "sent": "submitted"})
"""The gateway's row states as a batch's (the rest are the same words)."""
STORED = MappingProxyType({"queued": HANDED, "sending": HANDED, "sent": "submitted"})
"""The gateway's row states as the notebook's batch store keeps them (the rest are the same words): a row the
gateway has not sent is `handed` (never sent from here), one it sent is `submitted` with its ids."""
HELD = (
    "handed to a team gateway, which may still send it: never sent from here (run it through that gateway, or stop "
    "it there and run it with retry_unknown=True)"
)
FINISHED = ("complete", "failed", "unknown", "skipped")
MAX_CREDITS = 10**12
"""The largest budget a gateway takes (`batch_routes`)."""


def runs_batches(info: Any) -> bool:
    """Whether key info came from a gateway that runs batches (an extra field the service itself never sends)."""
    extra = getattr(info, "model_extra", None) or {}
    return extra.get("gateway") == GATEWAY_MARK


def stays_here(engine: Scheduler) -> bool:
    """Whether the batch runs in this notebook (its creates through the gateway's paid path) rather than being
    handed over: a row was sent from here, not by a gateway (the gateway knows nothing of it and would send it
    again), or a row is an engine's song (ElevenLabs, Lyria: sent with this notebook's own keys, not the gateway's)."""
    if any(isinstance(r.request, EngineRequest) for r in engine.batch.rows):
        return True
    stored = engine.store.rows(engine.name)
    return any(r.state not in (*NEVER_SENT, HANDED) and r.owner_start != GATEWAY_OWNER for r in stored.values())


def _credits(batch: Batch) -> int | None:
    """The batch's budget as the gateway takes it, whole credits: a dollar budget at the notebook's own rate
    (`MUSICGEN_CREDIT_DOLLARS`), a fraction of a credit rounded down."""
    budget = batch.budget
    if budget is None:
        return None
    if isinstance(budget, DollarBudget):
        try:
            rate = credit_rate()
        except DollarPriceError as exc:
            raise BatchError(f"Batch {batch.name!r}: {exc} Nothing was sent.") from None
        return min(int(budget.amount // rate), MAX_CREDITS)
    return min(math.floor(budget), MAX_CREDITS)


def hold_handed(engine: Scheduler) -> None:
    """A run that does not go through a gateway sends no row a gateway holds (its state kept: a later run through
    that gateway attaches to it); shown as unknown, with why."""
    stored = engine.store.rows(engine.name)
    for row in list(engine.queue):
        saved = stored.get(row.index)
        if saved is not None and saved.state == HANDED:
            if engine.retry_unknown:  # the user's word that the gateway will not send it: an unknown row, resent
                engine.store.set_state(engine.name, row.index, "unknown", error=HELD)
                continue
            engine.queue.remove(row)
            row.state, row.error = "unknown", HELD


def _handed(batch: Batch, engine: Scheduler) -> list[int]:
    """Record the rows to hand over as handed, before the hand-off goes out (as a row is claimed before its
    create): a kernel killed before the answer leaves them to the gateway, never to a run that cannot reach it."""
    try:
        return batch.store.hand_over(batch.name, {r.index: budget_charge(r.request, None) for r in engine.to_send()})
    except StorageError as exc:
        raise BatchError(f"The batch's rows cannot be recorded in {batch.store!r} ({exc}); nothing was sent.") from None


def _not_handed(batch: Batch, marked: list[int], exc: BaseException) -> None:
    """The gateway refused the batch whole, nothing recorded there (a 4xx, or the budget): the rows marked go back
    to never sent. Any other failure (no answer, a 5xx) may have reached it: they stay handed."""
    refused = isinstance(exc, BatchBudgetError) or (
        isinstance(exc, APIStatusError) and 400 <= exc.status_code < 500 and exc.status_code != 408
    )
    for index in marked if refused else []:
        batch.store.set_state(batch.name, index, "pending")


def _no_batch_paths(exc: MusicGenError) -> bool:
    """A 404/405 to the hand-off: the replica that answered has no batch paths (an old one behind the same address
    during an upgrade), so nothing was recorded and the batch runs here instead."""
    return isinstance(exc, APIStatusError) and exc.status_code in (404, 405)


def _submission(batch: Batch, engine: Scheduler, retry: list[dict[str, int]]) -> dict[str, Any]:
    submission = {
        "name": batch.name,
        "rows": [{"v2": r.v2, "body": r.request.to_payload()} for r in batch.rows],
        "concurrency": batch.concurrency,
        "budget": _credits(batch),
        "stall_timeout": engine.stall_timeout,
    }
    return {**submission, "retry_unknown": retry} if retry else submission


NO_RETRY = (
    "Batch {name!r}: this gateway cannot resend rows whose outcome is unknown (retry_unknown=True; it is older than "
    "this notebook): nothing was sent. Ask its admin to upgrade it, or run the batch without retry_unknown."
)


def _retry_of(batch: Batch, data: Any) -> list[dict[str, int]]:
    """The rows the gateway shows unknown, at the attempt shown (what `retry_unknown=True` asks it to resend once:
    a repeat of the same hand-off finds the attempt moved on and resends nothing more)."""
    rows = data.get("rows") if isinstance(data, dict) else None
    asked = []
    for shown in rows if isinstance(rows, list) else []:
        if not isinstance(shown, dict) or shown.get("state") != "unknown":
            continue
        index, attempt = shown.get("index"), shown.get("attempt")
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            raise BatchError(NO_RETRY.format(name=batch.name))
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(batch.rows):
            asked.append({"index": index, "attempt": attempt})
    return asked


def _missing(exc: MusicGenError) -> bool:
    """A 404 to the status read: the gateway holds no batch of that name (nothing of it to resend)."""
    return isinstance(exc, APIStatusError) and exc.status_code == 404


def _refusal(batch: Batch, exc: MusicGenError) -> MusicGenError:
    """A refusal of the whole batch (a changed row, a bad row) as the batch's own error; others as they are."""
    if isinstance(exc, APIStatusError) and exc.status_code in (409, 422):
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        return BatchError(str(message or exc))
    return exc


def _accepted(batch: Batch, data: Any) -> dict[str, Any]:
    """The gateway's answer to the hand-off: the batch's rows, or the budget refusal a local run would raise."""
    if not isinstance(data, dict):
        raise BatchError(f"The gateway's answer to batch {batch.name!r} could not be read; nothing more was sent.")
    if data.get("refused") == "over":
        estimate, left = int(data.get("estimate") or 0), data.get("left")
        if data.get("whose") == "this batch's budget":
            said = f"more than the budget of {batch.budget}"
        else:
            said = f"but the key has {left} left"
        raise BatchBudgetError(
            f"Batch {batch.name!r} would cost about {estimate} credits, {said}; nothing was sent.",
            estimate=estimate,
            budget=batch.budget,
            counts_left=left if isinstance(left, int) else None,
        )
    return data


class Follower:
    """What the gateway says of a batch, applied to the `Batch` a user holds (no I/O of its own)."""

    def __init__(self, batch: Batch, engine: Scheduler) -> None:
        self.batch = batch
        self.clock = engine.clock
        self.poll_interval = engine.poll_interval
        self.stall_timeout = engine.stall_timeout
        self.tasks = TaskSet()
        self.state = "running"
        self.stop_sent = False
        self.rounds_after = 0
        self.failing_since: float | None = None
        self.attempts: dict[int, str] = {}
        """Rows journalled by this follower: their attempt's id."""
        self.claimed: dict[int, str] = {}
        """Each row's state as the gateway last said it (checked: `gateway_trust`); shown only once believed."""
        self.holder: dict[str, int] = {}
        """Which row each id the gateway named belongs to (an id is one row's)."""
        self.estimates = {r.index: costs.estimate_credits(r.request) for r in batch.rows}
        batch.estimate = costs.estimate_total(r.request for r in batch.rows)
        for row in batch.rows:  # ids an earlier run kept: their songs are read again (a rerun's records)
            if row.ids:
                self.tasks.add(row.ids, v2=row.v2)

    def apply(self, data: Any) -> None:
        if not isinstance(data, dict):
            return  # not an answer about this batch: the next round asks again
        self.failing_since = None
        self.state = trust.batch_state(data.get("state"))
        now = self.clock()
        changed = False
        rows = self.batch.rows
        named: set[int] = set()
        shown_rows = data.get("rows")
        for shown in shown_rows if isinstance(shown_rows, list) else []:
            index = trust.row_index(shown, len(rows))
            if index is None or index in named:
                continue
            named.add(index)
            changed |= self._row(rows[index], shown, now)
        self.batch.calls = sum(1 for r in rows if r.cost)
        if changed:
            self.batch.changed()

    def _row(self, row: BatchRow, shown: dict[str, Any], now: float) -> bool:
        said, ids = trust.row_state(shown.get("state")), trust.row_ids(shown.get("ids"))
        if said is None or ids is None:
            return False  # not a state or not ids: the row stays as this notebook knew it
        cost = trust.row_cost(shown.get("cost"), said, self.estimates[row.index])
        error = trust.row_error(shown.get("error"))
        other = next((self.holder[i] for i in ids if self.holder.get(i, row.index) != row.index), None)
        if other is not None:  # another row's songs: never this row's
            said, ids, error = "unknown", [], trust.SHARED.format(row=other + 1)
            cost = self.estimates[row.index]
        self.claimed[row.index] = said
        for task_id in ids:
            self.holder[task_id] = row.index
        state = STATES.get(said, said)
        self._journal(row, state, ids)
        if ids and ids != row.ids:
            self.tasks.add(ids, v2=row.v2)
            row.started_at = row.started_at or now
        if said == "complete" and not self._read_complete(ids):
            state = "submitted"  # complete once its songs are read here
        return self._show(row, state, ids, cost, error, now)

    def _show(self, row: BatchRow, state: str, ids: list[str], cost: int, error: str | None, now: float) -> bool:
        before = (row.state, row.ids, row.cost, row.error)
        row.state, row.ids, row.cost, row.error = state, ids, cost, error
        if row.finished and row.finished_at is None:
            row.finished_at = now
        if before == (row.state, row.ids, row.cost, row.error):
            return False
        kept = {"pending": HANDED}.get(state, state)  # (`STORED`'s words, from the state shown)
        if kept in (HANDED, "submitted", "complete", "failed", "unknown", "skipped"):  # a state this store knows
            self.batch.store.set_state(self.batch.name, row.index, kept, ids=ids, error=row.error)
        return True

    def _read_complete(self, ids: list[str]) -> bool:
        """Whether this notebook has read every song of `ids` itself, finished, at least one complete."""
        records = [self.tasks.get(i) for i in ids]
        if not records or any(r is None or not r.state.finished for r in records):
            return False
        return any(r.state == TaskState.COMPLETE for r in records if r is not None)

    def settle(self) -> None:
        """At the end: a row the gateway said complete whose songs were not read here finished fails, and a row it
        never named, or named still queued or sent in a batch it called done, is unknown (it may have been sent), at
        its estimate at least."""
        now = self.clock()
        for row in self.batch.rows:
            said = self.claimed.get(row.index)
            if said is None and not row.finished:
                self._show(row, "unknown", row.ids, self.estimates[row.index], trust.NEVER_NAMED, now)
            elif said is not None and said not in FINISHED and not row.finished:
                self._show(row, "unknown", row.ids, max(row.cost, self.estimates[row.index]),
                           trust.STILL.format(state=said), now)  # fmt: skip
            elif said == "complete" and row.state != "complete":
                if self._read_complete(row.ids):
                    self._show(row, "complete", row.ids, row.cost, row.error, now)
                else:
                    read = [self.tasks.get(i) for i in row.ids]
                    if row.ids and all(r is not None and r.state == TaskState.FAILED for r in read):
                        error = trust.FAILED_SONGS  # read here: every song failed
                    else:
                        error = trust.UNREAD.format(ids=", ".join(row.ids) or "none named")
                    self._show(row, "failed", row.ids, row.cost, error, now)

    def _journal(self, row: BatchRow, state: str, ids: list[str]) -> None:
        """A create the gateway made for this row, journalled once as if this notebook had made it (spend by day,
        model and batch count it; its songs belong to it): when the row first shows ids, or first shows unknown
        (it may have cost). A row an earlier run of this notebook already knew the ids or doubt of is not again."""
        journal = getattr(self.batch.client, "journal", None)
        first_ids = bool(ids) and not row.ids
        first_doubt = state == "unknown" and not ids and row.state != "unknown"
        if journal is None or not (first_ids or first_doubt):
            return
        endpoint = (SUBMIT_V2 if row.v2 else GENERATE).name
        settings = self.batch.client.settings
        host = settings.v2_base_url if row.v2 else settings.base_url
        with contextlib.suppress(MusicGenError):  # a journal that cannot take it costs the count, never the batch
            attempt = self.attempts.get(row.index) or journal.begin(endpoint, host, row.request.to_payload())
            self.attempts[row.index] = attempt  # a doubt `gateway reconcile` settles later names its songs on it
            if first_ids:
                journal.submitted(attempt, ids, v2=row.v2)
            else:
                journal.unknown(attempt, "sent by the team gateway: it may have been charged")

    def polled(self, changed: list[Any]) -> None:
        self.batch.records_changed(changed)
        now = self.clock()
        for row in self.batch.rows:
            if row.ids:
                row.records = [r for r in (self.tasks.get(i) for i in row.ids) if r is not None]
            if self.claimed.get(row.index) == "complete" and row.state != "complete" and self._read_complete(row.ids):
                self._show(row, "complete", row.ids, row.cost, row.error, now)  # read here: believed now
        if changed:
            self.batch.changed()

    def failed_read(self, exc: BaseException) -> None:
        """A status read that failed (after the client's retries): the batch runs on at the gateway; following
        gives up only after `stall_timeout` seconds without an answer."""
        now = self.clock()
        self.failing_since = self.failing_since or now
        if now - self.failing_since > self.stall_timeout:
            raise exc

    @property
    def gateway_done(self) -> bool:
        """The gateway calls the batch over and every row it named is over (as it says: `settle` checks them); a
        batch it calls done is over whatever its rows say (a row still sent then contradicts it: `settle`)."""
        return self.state == "done" or (self.state != "running" and all(s in FINISHED for s in self.claimed.values()))

    @property
    def to_poll(self) -> bool:
        return bool(self.tasks.unfinished()[0] or self.tasks.unfinished()[1])

    @property
    def finished(self) -> bool:
        if not self.gateway_done:
            return False
        if not self.to_poll:
            return True
        self.rounds_after += 1  # a song never read (gone upstream) does not hold the batch open
        return self.rounds_after > BACKFILL_ROUNDS


def _over(batch: Batch, follower: Follower) -> None:
    with contextlib.suppress(MusicGenError, StorageError):  # what the store cannot take stays shown
        follower.settle()
    for row in batch.rows:  # the gateway runs on; what this view knew stays as it was
        row.finished_at = row.finished_at or follower.clock()
    batch.mark_done()


# -- the sync face ------------------------------------------------------------------------------------------------


def hand_off(client: Any, engine: Scheduler, *, wait: bool) -> Batch | None:
    """Hand the batch to the gateway and follow it (`wait=False`: in a thread); what `run_batch` returns. None:
    the gateway has no batch paths after all (nothing recorded): the batch runs here."""
    batch = engine.batch
    retry: list[dict[str, int]] = []
    if engine.retry_unknown:  # read before anything is sent: which rows the gateway holds unknown, at which attempt
        try:
            retry = _retry_of(batch, client._run(client._request_flow(STATUS, params={"name": batch.name})))
        except MusicGenError as exc:
            if not (_missing(exc) or _no_batch_paths(exc)):
                raise
    submission = _submission(batch, engine, retry)
    marked = _handed(batch, engine)
    try:
        data = client._run(client._request_flow(SUBMIT, json=submission))
        accepted = _accepted(batch, data)
    except MusicGenError as exc:
        _not_handed(batch, marked, exc)
        if _no_batch_paths(exc):
            return None
        raise _refusal(batch, exc) from None
    follower = Follower(batch, engine)
    follower.apply(accepted)
    woken = threading.Event()
    batch.add_waker(woken.set)

    def drive() -> None:
        try:
            while True:
                if batch.stop_requested and not follower.stop_sent:
                    follower.stop_sent = True
                    follower.apply(client._run(client._request_flow(STOP, json={"name": batch.name})))
                if follower.to_poll:
                    with contextlib.suppress(MusicGenError):  # a failed read: the next round asks again
                        follower.polled(client.poll(follower.tasks))
                if follower.finished:
                    break
                woken.wait(follower.poll_interval)
                woken.clear()
                try:
                    follower.apply(client._run(client._request_flow(STATUS, params={"name": batch.name})))
                except MusicGenError as exc:
                    follower.failed_read(exc)
        except BaseException as exc:
            batch.error = exc
        _over(batch, follower)

    if wait:
        drive()
        if batch.error is not None:
            raise batch.error
    else:
        batch.run_in_thread(drive)
    return batch


# -- the async face -----------------------------------------------------------------------------------------------


async def hand_off_async(client: Any, engine: Scheduler, *, wait: bool) -> Batch | None:
    """`hand_off` on an `AsyncMusicClient` (`wait=False`: `await batch` later); None as `hand_off`'s."""
    batch = engine.batch
    retry: list[dict[str, int]] = []
    if engine.retry_unknown:  # as `hand_off`: read before anything is sent
        try:
            retry = _retry_of(batch, await client._run(client._request_flow(STATUS, params={"name": batch.name})))
        except MusicGenError as exc:
            if not (_missing(exc) or _no_batch_paths(exc)):
                raise
    submission = _submission(batch, engine, retry)
    marked = _handed(batch, engine)
    try:
        data = await client._run(client._request_flow(SUBMIT, json=submission))
        accepted = _accepted(batch, data)
    except MusicGenError as exc:
        _not_handed(batch, marked, exc)
        if _no_batch_paths(exc):
            return None
        raise _refusal(batch, exc) from None
    follower = Follower(batch, engine)
    follower.apply(accepted)
    woken = asyncio.Event()
    loop = asyncio.get_running_loop()
    batch.add_waker(lambda: loop.call_soon_threadsafe(woken.set))

    async def drive() -> Batch:
        try:
            while True:
                if batch.stop_requested and not follower.stop_sent:
                    follower.stop_sent = True
                    follower.apply(await client._run(client._request_flow(STOP, json={"name": batch.name})))
                if follower.to_poll:
                    with contextlib.suppress(MusicGenError):
                        follower.polled(await client.poll(follower.tasks))
                if follower.finished:
                    break
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(woken.wait(), follower.poll_interval)
                woken.clear()
                try:
                    follower.apply(await client._run(client._request_flow(STATUS, params={"name": batch.name})))
                except MusicGenError as exc:
                    follower.failed_read(exc)
        except BaseException as exc:
            batch.error = exc
            _over(batch, follower)
            raise
        _over(batch, follower)
        return batch

    if wait:
        return await drive()
    batch.run_as_task(drive())
    return batch


__all__ = ["hand_off", "hand_off_async", "hold_handed", "runs_batches", "stays_here"]
