"""`Batch`: what a user holds while a batch runs and after: its rows, their states, its spend and its progress.

Partial success is reported, not raised; the engine (`batch/drivers.py`) changes it through the public methods
under "what the engine tells the batch", views follow it through listeners.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .rows import BatchFailedError, BatchRow

if TYPE_CHECKING:
    from ..storage.batches import BatchStore

STATES = ("pending", "elsewhere", "submitted", "complete", "failed", "unknown", "skipped")
"""A row's states; "elsewhere": another run of the batch is sending it, and this one follows it from the store."""


class Batch:
    """A batch's rows, their states and spend. Partial success is reported, not raised."""

    def __init__(
        self, name: str, rows: list[BatchRow], *, store: BatchStore, concurrency: int, budget: int | None, estimate: int
    ) -> None:
        self.name = name
        self.rows = rows
        self.store = store
        self.concurrency = concurrency
        self.budget = budget
        self.estimate = estimate
        self.counts_before: int | None = None
        """The key's counts before this run (each run is measured on its own), None when not read."""
        self.counts_after: int | None = None
        self.overlapped = False
        """Another batch ran on the key during this run: the counts moved for both, so this run's spend and price
        are not measured (unknown), and its budget counts its own calls (`batch.key_activity`)."""
        self.calls = 0
        """Creates this run sent."""
        self.run_id: int | None = None
        """This run's row in the batch store's runs (None when the counts were not read or the file refused it)."""
        self.client: Any = None
        """The client that runs it (a view's "retry failed rows" sends with it)."""
        self.started_at = time.monotonic()
        self.finished_at: float | None = None
        self.error: BaseException | None = None
        """What crashed the run (re-raised by `wait()`); rows that failed are reported in `rows`, not here."""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: Any = None
        self._listeners: list[Callable[[Batch], None]] = []
        self._record_listeners: list[Callable[[list[Any]], None]] = []
        self._wakers: list[Callable[[], Any]] = []
        """Called by `stop()`: whatever the batch is resting on wakes at once."""
        self.stop_requested = False
        self.leave_requested = False
        """`leave()`: the rows already sent are no longer followed here (their store follows them on a re-run)."""

    # -- state ---------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Batch:
        """Block until the batch has finished (for `wait=False` on a sync client); re-raises a crash."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"batch {self.name!r} still running")
        if self.error is not None:
            raise self.error
        return self

    def __await__(self) -> Any:
        """`await batch` (from `AsyncMusicClient.batch(wait=False)`) waits for it to finish."""
        if self._task is not None:
            yield from self._task.__await__()
        return self

    def stop(self) -> None:
        """Start no more rows (they become `skipped`); rows already sent are still followed to the end.

        Whatever the batch is waiting on (a rate limit's pause, the next polling round) ends at once.
        """
        self.stop_requested = True
        for wake in list(self._wakers):
            with contextlib.suppress(Exception):  # a closed event loop: nothing is waiting there any more
                wake()

    def leave(self) -> None:
        """`stop()`, and stop following the rows already sent too (their workspace is closing): the batch ends once
        no create is being sent. Those rows stay sent in the batch's store, where a re-run of the same name follows
        them to the end without sending them again."""
        self.leave_requested = True
        self.stop()

    def add_listener(self, callback: Callable[[Batch], None]) -> None:
        self._listeners.append(callback)

    def add_record_listener(self, callback: Callable[[list[Any]], None]) -> None:
        """Call `callback(records)` with the song records that changed in each of the batch's polling rounds
        (and a v2 row's submit answer), on the batch's thread: a watcher shows them without polling again."""
        self._record_listeners.append(callback)

    # -- what the engine tells the batch (`batch/drivers.py` calls these; a user has no need to) ----------

    def changed(self) -> None:
        """Tell the listeners a row changed (on the batch's thread); a view's bug never stops paid work."""
        for callback in list(self._listeners):
            with contextlib.suppress(Exception):  # a view's bug must not stop paid work
                callback(self)

    def records_changed(self, records: list[Any]) -> None:
        """Hand the record listeners the song records a polling round (or a v2 submit) changed."""
        if not records:
            return
        for callback in list(self._record_listeners):
            with contextlib.suppress(Exception):  # a view's bug must not stop paid work
                callback(records)

    def add_waker(self, wake: Callable[[], Any]) -> None:
        """`wake()` is called by `stop()`, so whatever the batch rests on ends at once."""
        self._wakers.append(wake)

    def run_in_thread(self, drive: Callable[[], None]) -> None:
        """Run the batch (`wait=False` on the sync face) in a daemon thread."""
        self._thread = threading.Thread(target=drive, name=f"ipymusicgen-batch-{self.name}", daemon=True)
        self._thread.start()

    def run_as_task(self, drive: Any) -> None:
        """Run the batch (`wait=False` on the async face) as an asyncio task; `await batch` waits for it."""
        import asyncio

        self._task = asyncio.ensure_future(drive)

    def mark_done(self) -> None:
        """The run is over (its counts after read, or none to read): waiters wake, listeners hear it last."""
        self.finished_at = time.monotonic()
        self._done.set()
        self.changed()

    @property
    def ids(self) -> list[str]:
        return [i for r in self.rows for i in r.ids]

    @property
    def records(self) -> list[Any]:
        return [rec for r in self.rows for rec in r.records]

    @property
    def failed(self) -> list[BatchRow]:
        return [r for r in self.rows if r.state == "failed"]

    @property
    def unknown(self) -> list[BatchRow]:
        return [r for r in self.rows if r.state == "unknown"]

    def counts(self) -> dict[str, int]:
        """Rows per state, plus `in_flight` (submitted, not finished)."""
        found = {state: 0 for state in STATES}
        for row in self.rows:
            found[row.state] = found.get(row.state, 0) + 1
        return found

    @property
    def spent_estimate(self) -> int:
        return sum(r.cost for r in self.rows)

    @property
    def spent_usd_estimate(self) -> Decimal | None:
        """Estimated dollars of the engines' rows sent (ElevenLabs, Lyria: priced in dollars, never in credits), kept
        apart from `spent_estimate`; a call the engine refused before any work ("not charged") costs nothing, one
        that may have been charged counts. None when no row of the batch is an engine's."""
        from ..models.dollar_prices import DollarPriceError, estimate
        from ..models.providers import EngineRequest

        engine_rows = [r for r in self.rows if isinstance(r.request, EngineRequest)]
        if not engine_rows:
            return None
        total = Decimal(0)
        for row in engine_rows:
            if not row.ids or any(_charge(record) == "not charged" for record in row.records):
                continue  # never sent, or refused before any work
            with contextlib.suppress(DollarPriceError):  # a price table changed since: counted where it can be
                total += estimate(row.request)
        return total

    @property
    def real_cost_per_call(self) -> float | None:
        """Credits one create of this run really took, from the key's counts before and after it (None until known)."""
        before, after, calls = self.counts_before, self.counts_after, self.calls
        if before is None or after is None or not calls or self.overlapped:
            return None
        return (before - after) / calls

    def eta_seconds(self) -> float | None:
        """Seconds left, from how long rows finished so far took and how many are left (None until one finished)."""
        durations = [
            r.finished_at - r.started_at for r in self.rows if r.state == "complete" and r.started_at and r.finished_at
        ]
        left = sum(1 for r in self.rows if not r.finished)
        if not durations:
            return None
        if not left:
            return 0.0
        per_row = sum(durations) / len(durations)
        return math.ceil(left / max(1, self.concurrency)) * per_row

    def summary(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "name": self.name,
            "rows": len(self.rows),
            **counts,
            "estimate": self.estimate,
            "spent_estimate": self.spent_estimate,
            "spent_usd_estimate": self.spent_usd_estimate,
            "budget": self.budget,
            "counts_before": self.counts_before,
            "counts_after": self.counts_after,
            "real_cost_per_call": self.real_cost_per_call,
            "overlapped": self.overlapped,
            "done": self.done,
        }

    def progress_line(self) -> str:
        """One line for text-only front ends: rows done / in flight / failed / unknown / skipped, credits, ETA."""
        c = self.counts()
        eta = self.eta_seconds()
        parts = [
            f"batch {self.name}: {c['complete']}/{len(self.rows)} done",
            f"{c['submitted']} in flight",
            f"{c['failed']} failed",
            f"{c['unknown']} unknown",
            f"{c['skipped']} skipped",
        ]
        if c["elsewhere"]:
            parts.append(f"{c['elsewhere']} being sent elsewhere")
        # measured and estimated credits are said as such and never added together
        if self.counts_before is not None and self.counts_after is not None and not self.overlapped:
            parts.append(f"{self.counts_before - self.counts_after} credits spent (measured)")
            parts.append(f"{self.counts_after} left (measured)")
        else:
            parts.append(f"~{self.spent_estimate} credits spent (estimate)")
            if self.overlapped:
                parts.append("not measured: other calls on the key overlapped this run")
            if self.counts_after is not None:
                parts.append(f"{self.counts_after} left (measured)")
            elif self.counts_before is not None:
                parts.append(f"{self.counts_before} left before this run (measured)")
        usd = self.spent_usd_estimate
        if usd is not None:  # the engines' rows, in their own unit: never added to the credits
            parts.append(f"~${usd:.2f} in dollars spent by engine rows (estimate)")
        per_call = self.real_cost_per_call
        if per_call is not None:
            parts.append(f"{per_call:g} per call (measured)")
        if eta is not None and not self.done:
            parts.append(f"ETA {eta:.0f} s")
        return ", ".join(parts)

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "row": r.number,
                    "state": r.state,
                    "request": r.describe(),
                    "ids": ",".join(r.ids),
                    "error": r.error,
                    "cost": r.cost,
                }
                for r in self.rows
            ]
        ).set_index("row")

    def raise_for_failures(self) -> Batch:
        bad = self.failed + self.unknown
        if bad:
            lines = "; ".join(f"row {r.number} {r.state}: {r.error or ''}" for r in bad[:10])
            raise BatchFailedError(
                f"{len(bad)} of {len(self.rows)} rows of batch {self.name!r} did not finish: {lines}"
            )
        return self

    def __repr__(self) -> str:
        lines = [self.progress_line()]
        for r in self.rows[:20]:
            extra = f" ({r.error})" if r.error else ""
            lines.append(f"  {r.number:>4} {r.state:<9} {r.describe()!r} {','.join(r.ids)}{extra}")
        if len(self.rows) > 20:
            lines.append(f"  ... {len(self.rows) - 20} more rows")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from ..safe_html import esc

        body = "".join(
            f"<tr><td>{r.number}</td><td>{esc(r.state)}</td><td>{esc(r.describe())}</td>"
            f"<td><code>{esc(', '.join(r.ids))}</code></td><td>{esc(r.error or '')}</td></tr>"
            for r in self.rows[:200]
        )
        more = f"<p>... {len(self.rows) - 200} more rows</p>" if len(self.rows) > 200 else ""
        return (
            f"<div class='ipymusicgen-batch'><p>{esc(self.progress_line())}</p><table>"
            "<thead><tr><th>row</th><th>state</th><th>request</th><th>ids</th><th>error</th></tr></thead>"
            f"<tbody>{body}</tbody></table>{more}</div>"
        )


def _charge(record: Any) -> str | None:
    """What an engine's record says of money ("charged", "not charged", "may have been charged"), if anything."""
    extra = getattr(record, "__pydantic_extra__", None) or {}
    found = extra.get("charge", getattr(record, "charge", None))
    return found if isinstance(found, str) else None
