"""The engine of a batch run: every decision, no I/O of its own (the faces in `batch/drivers.py` do the calls).

It keeps at most `concurrency` rows in flight, claims each row in the batch store before its create, backs off on
429s (per key, across the workspace's batches: `KeyActivity`), follows every row's songs in one `TaskSet`, and fails
a row as `stalled` when none of its songs changed state within `stall_timeout`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..client.responses import create_may_have_landed
from ..client.retry import rate_limit_delay
from ..errors import AuthenticationError, CreateOutcomeUnknownError, InsufficientCreditsError, RateLimitError
from ..models.dollar_prices import DollarBudget, budget_charge
from ..models.tasks import TaskSet, TaskState
from ..storage.batches import StoredRow
from ..storage.errors import StorageUnavailableError
from .key_activity import KeyActivity
from .result import Batch
from .rows import BatchRow

RATE_LIMIT_WINDOW = 30.0
"""Seconds a 429 keeps the concurrency lowered before it climbs back one row at a time."""
MAX_RATE_LIMITED = 8
"""429s in a row on one key (with growing pauses: about 3 minutes in all) before a row answered 429 ends as
"not sent (rate limited)": the batch finishes, and a re-run sends it. Any accepted create starts the count again."""
RATE_LIMITED = "not sent (rate limited)"
BACKFILL_ROUNDS = 3
"""Polling rounds a re-run spends reading the records of rows that finished in an earlier run."""


class Scheduler:
    """A batch run's decisions: which row to send next (concurrency, budget, 429 pauses, claims in the store), what
    each create's outcome makes of its row, and when a row is complete, failed or stalled. No I/O of its own: the
    faces in `batch/drivers.py` make the calls and hand it what came back."""

    def __init__(
        self,
        batch: Batch,
        *,
        stall_timeout: float,
        retry_unknown: bool,
        poll_interval: float,
        clock: Callable[[], float],
        activity: KeyActivity,
    ) -> None:
        self.batch = batch
        self.activity = activity
        """What runs on the key share in this workspace: overlapping runs, 429 streaks, rows being sent."""
        self.name = batch.name
        self.store = batch.store
        self.stall_timeout = stall_timeout
        self.retry_unknown = retry_unknown
        self.poll_interval = poll_interval
        self.clock = clock
        self.tasks = TaskSet()
        self.by_id: dict[str, BatchRow] = {}
        self.queue: deque[BatchRow] = deque()
        self.sending: set[int] = set()
        self.limit = batch.concurrency
        self.paused_until = 0.0
        self.lowered_until = 0.0
        self.stop_reason: str | None = None
        self.backfill: list[BatchRow] = []
        self.elsewhere: list[BatchRow] = []
        """Rows another run is sending (`sent_elsewhere`), read from the store each round until they have ids."""
        self.backfill_rounds = 0
        self.committed: Any = 0  # estimated credits (dollars, for a DollarBudget) of rows sent or being sent
        self.charges: dict[int, Any] = {}  # what each row sending counts against the budget, in its unit
        self.key = ""  # the key's fingerprint: 429 streaks are counted per key
        self.host = ""  # the service's v1 host: a run's window is checked against other paid calls there

    # -- start ---------------------------------------------------------------------------------------

    def load(self, stored: dict[int, StoredRow]) -> None:
        """Put each row where its stored state says: send it, watch it, or just report it."""
        for row in self.batch.rows:
            saved = stored[row.index]
            row.ids = list(saved.ids)
            row.error = saved.error
            row.stalled = saved.stalled
            row.cost = saved.cost or 0 if saved.state not in ("pending", "rejected", "skipped", "handed") else 0
            state = saved.state
            if state == "sending":
                if saved.owner_alive and not saved.mine:
                    self.sent_elsewhere(row, f"by process {saved.owner_pid}")
                    continue
                if saved.mine and self.activity.is_sending(self._key(row)):
                    self.sent_elsewhere(row, "by another run of this batch in this kernel")
                    continue
                state = "unknown"
                row.error = "its create may have been sent (the process sending it ended before the answer)"
                self.store.set_state(self.name, row.index, "unknown", error=row.error)
            if state in ("pending", "rejected", "skipped", "handed") or (state == "unknown" and self.retry_unknown):
                # handed: to send through the gateway that holds it (`on_gateway.hold_handed` keeps it from a run
                # that does not reach one)
                row.state = "pending"
                row.error = None if state != "unknown" else row.error
                self.queue.append(row)
            elif state == "submitted" or (state == "failed" and row.ids and row.stalled):
                self.watch(row, row.ids)  # a stalled row is followed again: its songs may have moved since
                row.error = None
            else:
                row.state = state
                if row.ids and state in ("complete", "failed"):  # read their records once, for .records
                    self.backfill.append(row)
                    self.tasks.add(row.ids, v2=row.v2)

    def _key(self, row: BatchRow) -> tuple[int, str, int]:
        return (id(self.store), self.name, row.index)

    def to_send(self) -> list[BatchRow]:
        return list(self.queue)

    def watch(self, row: BatchRow, ids: list[str]) -> None:
        row.state, row.stalled = "submitted", False
        row.ids = list(ids)
        row.started_at = row.started_at or self.clock()
        row.last_change = self.clock()
        self.tasks.add(ids, v2=row.v2)
        for task_id in ids:
            self.by_id[task_id] = row

    # -- sending -------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self.sending) + sum(1 for r in self.batch.rows if r.state == "submitted")

    def next_row(self) -> BatchRow | None:
        """The next row to create now, claimed in the store; None when none may start yet."""
        now = self.clock()
        if self.batch.stop_requested and not self.stop_reason:
            self.stop_reason = "not started: the batch was stopped"
        if self.stop_reason:  # whatever pause a rate limit set: rows not started are skipped now
            while self.queue:
                self._skip(self.queue.popleft(), self.stop_reason)
            return None
        if now >= self.lowered_until and self.limit < self.batch.concurrency:
            self.limit += 1
            self.lowered_until = now + RATE_LIMIT_WINDOW / max(1, self.batch.concurrency)
        while self.queue and now >= self.paused_until and self.in_flight < self.limit:
            row = self.queue.popleft()
            budget = self.batch.budget  # credits, or a DollarBudget across providers (`dollar_prices`)
            cost = budget_charge(row.request, None)  # the service's credits (an engine's row: none)
            charge = budget_charge(row.request, budget) if budget is not None else cost  # in the budget's unit
            if budget is not None and self.committed + charge > getattr(budget, "amount", budget):
                said = budget if isinstance(budget, DollarBudget) else f"{budget} credits"
                self._skip(row, f"budget of {said} reached")
                continue
            try:
                claimed = self.store.claim(self.name, row.index, cost, allow_unknown=self.retry_unknown)
            except StorageUnavailableError as exc:  # locked by another kernel, full: not sent, a re-run sends it
                row.state, row.error = "failed", f"not sent: the batch's row could not be recorded ({exc})"
                row.finished_at = now
                self.batch.changed()
                continue
            if not claimed:  # another run took it since this one loaded: followed from the store like the others
                self.sent_elsewhere(row, "by another run of this batch")
                continue
            self.committed += charge
            self.charges[row.index] = charge
            self.batch.calls += 1
            row.cost = cost
            row.started_at = now
            self.sending.add(row.index)
            self.activity.sending(self._key(row))
            return row
        return None

    def sent_elsewhere(self, row: BatchRow, by: str) -> None:
        """A row another run (in this kernel or another process) is sending: not this run's to send or to pay for,
        but followed from the store, so its songs show here once that run has their ids."""
        row.state, row.error, row.cost = "elsewhere", f"being sent elsewhere ({by})", 0
        row.last_change = self.clock()
        self.elsewhere.append(row)

    def _follow_elsewhere(self, now: float) -> set[int]:
        """Read the rows another run is sending from the store: watch their songs once they have ids, send them here
        if that run let them go unsent, say what it found otherwise."""
        if not self.elsewhere:
            return set()
        stored = self.store.rows(self.name)
        touched: set[int] = set()
        for row in list(self.elsewhere):
            saved = stored.get(row.index)
            state = saved.state if saved is not None else "pending"
            if state == "sending":
                gone = saved is not None and not saved.mine and not saved.owner_alive
                if not gone and now - (row.last_change or now) <= self.stall_timeout:
                    continue
                row.state, row.error = "unknown", "its create was being sent elsewhere and no answer was recorded"
            elif saved is not None and saved.ids and state in ("submitted", "complete", "failed"):
                self.watch(row, saved.ids)  # the other run's songs: this run follows them too
                row.error = None
            elif state in ("pending", "skipped"):  # the other run stopped before sending it: this run may
                row.state, row.error = "pending", None
                self.queue.append(row)
            else:
                row.state = "failed" if state == "rejected" else state
                row.error = saved.error if saved is not None else None
            if row.finished:
                row.finished_at = now
            self.elsewhere.remove(row)
            touched.add(row.index)
        return touched

    def _skip(self, row: BatchRow, why: str) -> None:
        row.state, row.error = "skipped", why
        self.store.set_state(self.name, row.index, "skipped", error=why)

    def settle(self, row: BatchRow, future: Any) -> None:
        """Record how a finished create (a thread's or an asyncio future) ended."""
        error = future.exception()
        if error is None:
            self.created(row, future.result())
        else:
            self.create_failed(row, error)

    def created(self, row: BatchRow, result: Any) -> None:
        self.activity.accepted(self.key)
        self.sending.discard(row.index)
        self.activity.sent(self._key(row))
        ids = list(result.ids) if hasattr(result, "ids") else [s.id for s in result]
        self.store.set_state(self.name, row.index, "submitted", ids=ids)
        self.watch(row, ids)
        seeded = []
        if not hasattr(result, "ids"):  # v2: the submit answer seeds the set, so its title and lyrics outlive
            seeded = self.tasks.add_records(result)  # the v2 query's blanks (the real service answers title "")
        self.batch.changed()  # first the row's ids (a watcher makes their cards), then what is known of them
        self.batch.records_changed(seeded)

    def create_failed(self, row: BatchRow, exc: BaseException) -> None:
        self.sending.discard(row.index)
        self.activity.sent(self._key(row))
        if not create_may_have_landed(exc):  # certainly not done (a 429, a refusal): it cost nothing
            self.committed -= self.charges.pop(row.index, row.cost)
            self.batch.calls -= 1
        if isinstance(exc, RateLimitError):  # definitely not done: back off, slow down, send it again
            now = self.clock()
            streak = self.activity.rate_limited(self.key)
            self.paused_until = max(self.paused_until, now + rate_limit_delay(streak, exc))
            self.limit = max(1, min(self.limit - 1, self.in_flight))
            self.lowered_until = now + RATE_LIMIT_WINDOW
            row.cost = 0
            row.rate_limited += 1
            if streak >= MAX_RATE_LIMITED:  # a 429 that never ends: nothing was created, so the row ends unsent
                row.state, row.finished_at = "failed", now
                row.error = f"{RATE_LIMITED}: the service answered 429 {streak} times in a row; a re-run sends it"
                self.store.set_state(self.name, row.index, "rejected", error=row.error)
                self.batch.changed()
                return
            self.store.set_state(self.name, row.index, "pending")
            row.state = "pending"
            self.queue.appendleft(row)
            return
        row.finished_at = self.clock()
        if create_may_have_landed(exc):
            row.state, row.error = "unknown", str(exc)
            self.store.set_state(self.name, row.index, "unknown", error=row.error)
        else:
            row.state, row.error, row.cost = "failed", str(exc), 0
            self.store.set_state(self.name, row.index, "rejected", error=row.error)
            if isinstance(exc, InsufficientCreditsError | AuthenticationError):
                self.stop_reason = f"not started: {type(exc).__name__} on row {row.index + 1}"
        self.batch.changed()

    # -- following -----------------------------------------------------------------------------------

    @property
    def watching(self) -> bool:
        return bool(self.backfill) or bool(self.elsewhere) or any(r.state == "submitted" for r in self.batch.rows)

    def polled(self, changed: Iterable[Any]) -> None:
        now = self.clock()
        touched = self._follow_elsewhere(now)
        changed = list(changed)
        self.batch.records_changed(changed)
        for record in changed:
            row = self.by_id.get(record.id)
            if row is not None:
                row.last_change = now
                touched.add(row.index)
        self.backfill_rounds += 1
        for row in list(self.backfill):
            found = [r for r in (self.tasks.get(i) for i in row.ids) if r is not None]
            if len(found) == len(row.ids) or self.backfill_rounds >= BACKFILL_ROUNDS:
                row.records = found
                self.backfill.remove(row)
        for row in self.batch.rows:
            if row.state != "submitted":
                continue
            records = [self.tasks.get(i) for i in row.ids]
            row.records = [r for r in records if r is not None]
            if len(row.records) == len(row.ids) and all(r.state.finished for r in row.records):
                complete = [r for r in row.records if r.state is TaskState.COMPLETE]
                row.state = "complete" if complete else "failed"
                row.error = None if complete else "; ".join(str(r.fail_reason or "failed") for r in row.records)
                row.finished_at = now
                self.store.set_state(self.name, row.index, row.state, error=row.error)
                touched.add(row.index)
            elif row.last_change is not None and now - row.last_change > self.stall_timeout:
                row.state, row.stalled = "failed", True
                row.error = f"timed out: no song changed state for {self.stall_timeout:g} s"
                row.finished_at = now
                self.store.set_state(self.name, row.index, "failed", error=row.error, stalled=True)
                touched.add(row.index)
        if touched:
            self.batch.changed()

    @property
    def finished(self) -> bool:
        """Nothing to start, send or follow; a batch told to `leave()` follows nothing more (a create being sent
        is still waited for: its answer says what was paid)."""
        return not self.queue and not self.sending and (not self.watching or self.batch.leave_requested)

    def measured(self, counts_left: int | None) -> None:
        """Stop starting rows once the credits measured on the key (before this run minus now) reach the budget:
        the estimate may be low, the key's own count is what was paid. Not when another run on the key overlapped
        this one: then the measure is unknown, and the budget counts this run's own calls at their price."""
        before, budget = self.batch.counts_before, self.batch.budget
        if isinstance(budget, DollarBudget):  # the key's counts are credits: a dollar budget counts estimates
            return
        if counts_left is None or before is None or budget is None or self.stop_reason or self.batch.overlapped:
            return  # overlapped: the key's counts moved for another run too; `next_row` counts this run's own calls
        spent = before - counts_left
        if spent >= budget and self.queue:
            self.stop_reason = f"not started: {spent} credits spent (measured on the key), the budget of {budget}"

    def cancelled(self, row: BatchRow) -> None:
        """A create cancelled while it was being sent (an async batch cancelled): it may have been charged, so
        it is unknown, as the client journals it, and a re-run treats it by the usual rule."""
        self.create_failed(
            row,
            CreateOutcomeUnknownError(
                "the batch was cancelled while this row's create was being sent; it may have been charged"
            ),
        )

    def pause(self) -> float:
        """Seconds to rest before the next round."""
        if self.queue and self.in_flight < self.limit:
            wait = self.paused_until - self.clock()
            if wait > 0:
                return min(wait, self.poll_interval) if self.watching else wait
        return self.poll_interval

    def finish(self, counts_after: int | None) -> None:
        self.activity.end(self.key, self.batch)
        self.store.flush()  # row states a locked file refused earlier
        if counts_after is not None:
            self.batch.counts_after = counts_after
        self.store.finish_run(self.batch.run_id, counts_after, self.batch.calls)
        self.batch.mark_done()
