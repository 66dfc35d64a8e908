"""The batch's progress view (above its songs), and a batch as it was priced (what a confirm sends).

`BatchView` is one anywidget model: counts, a progress bar, credits and ETA, and the rows; its text repr is
the progress line, so a text-only front end still reads progress. Its `TaskWatcher` (the songs as cards)
follows the batch: cards and the header's batch line come from the batch's own polling rounds. The studio's
Batch tab (`batch_pane.BatchPane`) prices rows into a `PricedBatch` and shows this view under its form.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..config import PaidAsk
from ..errors import one_line
from ..models import costs
from ._static import front_end
from .offered import Offers, allows, controls, target_of
from .text import TextRepr

if TYPE_CHECKING:
    from ..batch.drivers import Batch

ROWS_SHOWN = 200


def plan_data(priced: PricedBatch, asking: str = "", note: str = "") -> dict[str, Any]:
    """A priced batch not sent yet: its rows, its estimate, a Send button (and the question a press asked)."""
    rows = [
        {"index": r.number, "state": "not sent", "request": r.describe(), "error": ""} for r in priced.rows[:ROWS_SHOWN]
    ]
    more = len(priced.rows) - ROWS_SHOWN
    return {
        "name": priced.name or "batch",
        "line": f"Not sent: {priced.rows_words}, about {priced.total} credits (estimate)",
        "counts": {},
        "rows_total": len(priced.rows),
        "rows": rows,
        "more": f"... {more} more rows" if more > 0 else "",
        "can_stop": False,
        "finished": "",
        "can_retry": False,
        "can_send": not asking,
        "asking": asking,
        "note": note,
    }


def view_data(batch: Batch, note: str = "", asking: str = "") -> dict[str, Any]:
    """What the front end draws: plain text and numbers only. Rows are numbered from 1, as people count."""
    rows = [
        {"index": r.number, "state": r.state, "request": r.describe(), "error": (r.error or "")[:300]}
        for r in batch.rows[:ROWS_SHOWN]
    ]
    more = len(batch.rows) - ROWS_SHOWN
    failed = [r for r in batch.rows if r.state == "failed"]
    finished = ""
    if batch.done:
        finished = (
            f"Finished: {len(failed)} of {len(batch.rows)} rows failed." if failed else "Finished: every row done."
        )
    return {
        "name": batch.name,
        "line": batch.progress_line(),
        "counts": batch.counts(),
        "rows_total": len(batch.rows),
        "rows": rows,
        "more": f"... {more} more rows (Batch.to_pandas() has them all)" if more > 0 else "",
        "can_stop": not batch.done and not batch.stop_requested and any(r.state == "pending" for r in batch.rows),
        "finished": finished,
        "can_retry": bool(batch.done and failed and batch.client is not None) and not asking,
        "can_send": False,
        "asking": asking,
        "note": note,
    }


class BatchView(TextRepr, anywidget.AnyWidget):
    """Live progress of one batch; pass it as `on_update` (or call `follow(batch)`).

    `data` is synced whole when its rows are new (another batch, another number of rows) or the front end asks
    again ("resync"); each other update sends only what changed as a versioned patch (a custom message: `{"kind":
    "patch", "version", "set": top-level fields, "rows": [[index, row], ...]}`), applied to `data` here in place,
    so a front end that connects later gets it whole. A 200-row batch's data is about 21 KB; a patch, a few rows.
    """

    _esm, _css = front_end("batch")
    data = traitlets.Dict().tag(sync=True)

    def __init__(self, batch: Batch | None = None, *, watcher: Any = None, confirm: bool | None = None) -> None:
        """`confirm`: the caller's choice for its paid buttons (None: ask with a key that may cost money)."""
        super().__init__()
        self.add_class("ipymusicgen-batch-view")
        self.watcher = watcher
        self.batch: Batch | None = None
        self.confirm = confirm
        self.ask = PaidAsk(self._needs_confirm)
        """The question a paid press (Send, Retry failed rows) showed and what it priced."""
        self._planned: tuple[PricedBatch, Any, Callable[[], Batch]] | None = None
        self._lock = threading.Lock()
        self._followed: list[Batch] = []
        self.on_msg(self._on_msg)
        if batch is not None:
            self.follow(batch)

    def follow(self, batch: Batch) -> None:
        batch.add_listener(self.update)
        self.update(batch)

    def update(self, batch: Batch) -> None:
        """Redraw from the batch's rows; the watcher follows the batch (its songs drawn from the batch's own
        polling rounds: one query per round serves both)."""
        with self._lock:
            self.batch = batch
            if self.watcher is not None and not any(b is batch for b in self._followed):
                self._followed.append(batch)
                self.watcher.batch_line_shown = False  # this view says the progress line, once, with the ETA
                self.watcher.follow(batch)
            self._show(view_data(batch))

    def _show(self, new: dict[str, Any]) -> None:
        """Send the front end what changed in `data` (the whole of it when its rows are new); under `_lock`."""
        shown = self.data
        version = int(shown.get("version", 0)) + 1
        if not shown or shown.get("name") != new.get("name") or len(shown.get("rows", [])) != len(new["rows"]):
            self.data = {**new, "version": version}
            return
        changed = {k: v for k, v in new.items() if k != "rows" and shown.get(k) != v}
        rows = [[i, row] for i, row in enumerate(new["rows"]) if shown["rows"][i] != row]
        if not changed and not rows:
            return
        shown.update(changed)
        for i, row in rows:
            shown["rows"][i] = row
        shown["version"] = version
        self.send({"kind": "patch", "version": version, "set": changed, "rows": rows})

    def retry_failed(self, *, confirmed: bool = True) -> Batch | None:
        """Send the failed rows again as a new batch (`batch.retry`: `<name>-retry-N` with an N no earlier retry
        used, in this kernel or one before a restart, within what is left of the batch's budget), followed here.

        Called from code, the call is the decision; the button sends `confirmed=False`, and then (the `PaidAsk`
        rule, with this view's `confirm` choice) the first press only says what it costs ("press again to send"),
        as a card's paid button does; the next press sends those rows, or asks again if they changed.
        """
        from ..batch.retry_failed import retry_failed

        batch = self.batch
        failed = [r for r in batch.rows if r.state == "failed"] if batch is not None and batch.done else []
        if batch is None or not failed or batch.client is None:
            return None
        cost = costs.estimate_total(r.request for r in failed)
        snapshot = (id(batch), tuple(r.index for r in failed), cost)

        def question(changed: bool) -> str:
            again = "The failed rows changed since they were priced. " if changed else ""
            return f"{again}Retry {len(failed)} failed row(s)? About {cost} credits (estimate). Press again to send."

        if not confirmed and not self.ask.press_again("retry", snapshot, question):
            self._note(self.ask.question)
            return None
        self.ask.cancel()
        retry = retry_failed(batch, wait=False)
        if retry is not None:
            self.follow(retry)
        return retry

    def _needs_confirm(self) -> bool:
        client = self.batch.client if self.batch is not None else None
        if client is None and self._planned is not None:
            client = self._planned[1]
        return client is not None and client.settings.needs_confirm(self.confirm)

    # -- a batch planned, not sent yet (`%%musicgen_batch` with a key that may cost money) -----------------

    def plan(self, priced: PricedBatch, client: Any, start: Callable[[], Batch]) -> None:
        """Show `priced` unsent with a Send button: a press asks (the `PaidAsk` rule), its Confirm calls `start`."""
        self._planned = (priced, client, start)
        self.ask.cancel()
        with self._lock:
            self._show(plan_data(priced))

    def send_planned(self, *, confirmed: bool = True) -> Batch | None:
        """Send the planned batch (from code, or the Send button with `confirmed=False`: asks first)."""
        planned = self._planned
        if planned is None or self.batch is not None:
            return None
        priced = planned[0]
        if not confirmed and not self.ask.press("send", priced.to_payload(), self._plan_question(priced)):
            with self._lock:
                self._show(plan_data(priced, asking=self.ask.question))
            return None
        return self._start_planned()

    def confirm_planned(self) -> Batch | None:
        """The Confirm of a shown question: sends exactly the planned batch it priced."""
        planned = self._planned
        if planned is None or self.batch is not None:
            return None
        priced = planned[0]
        if not self.ask.confirm("send", priced.to_payload(), self._plan_question(priced)):
            with self._lock:
                self._show(plan_data(priced, asking=self.ask.question))
            return None
        return self._start_planned()

    def _start_planned(self) -> Batch | None:
        assert self._planned is not None
        priced, _client, start = self._planned
        self.ask.cancel()
        try:
            batch = start()
        except Exception as exc:  # a budget or credits refusal: said in the view, nothing sent
            with self._lock:
                self._show(plan_data(priced, note=one_line(exc)[:400]))
            return None
        self._planned = None
        self.update(batch)
        return batch

    @staticmethod
    def _plan_question(priced: PricedBatch) -> Callable[[bool], str]:
        def question(changed: bool) -> str:
            again = "The batch changed since it was priced. " if changed else ""
            return f"{again}Send {priced.rows_words}, about {priced.total} credits (estimate)? Press Confirm to send."

        return question

    def cancel(self) -> None:
        """Drop the question a paid press asked; nothing is sent."""
        self.ask.cancel()
        with self._lock:
            if self.batch is not None:
                self._show(view_data(self.batch))
            elif self._planned is not None:
                self._show(plan_data(self._planned[0]))

    def _note(self, text: str) -> None:
        with self._lock:
            if self.batch is not None:
                self._show(view_data(self.batch, text))

    def offers(self) -> Offers:
        """What the view shows now (`offered`): Stop while rows wait, Retry failed rows once the batch ended with
        some, a planned batch's Send, or the Confirm and Cancel of the question it asked; a resync always."""
        with self._lock:
            shown = dict(self.data)
        found = controls("resync")
        wanted = {"stop": "can_stop", "retry_failed": "can_retry", "send": "can_send", "confirm": "asking"}
        found |= controls(*(kind for kind, field in wanted.items() if shown.get(field)))
        if shown.get("asking"):
            found |= controls("cancel")
        return found

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Intents from the front end: `stop` (start no more rows), `retry_failed` (send the failed ones again), a
        planned batch's `send`, `confirm`, `cancel`: only while the view shows them."""
        if not isinstance(content, dict):
            return
        kind = content.get("kind")
        if not allows(self.offers(), kind, target_of(content)):  # a button the view does not show: nothing done
            return
        if self.batch is None and self._planned is not None:  # a planned batch: Send, Confirm, Cancel
            if kind == "send":
                self.send_planned(confirmed=False)
            elif kind == "confirm" and self.ask.asking("send"):  # only a question the view showed
                self.confirm_planned()
            elif kind == "cancel":
                self.cancel()
        if self.batch is None:
            if kind == "resync":
                with self._lock:
                    self.send_state("data")
            return
        if content.get("kind") == "resync":  # the front end missed a patch: the whole data
            with self._lock:
                self.send_state("data")
        elif content.get("kind") == "stop":
            self.batch.stop()
            self.update(self.batch)
        elif content.get("kind") == "retry_failed":
            try:
                self.retry_failed(confirmed=False)
            except Exception as exc:  # said in the view, never raised from a button
                self._note(f"Retry failed: {one_line(exc)[:300]}")

    def __repr__(self) -> str:
        if self.batch is None and self._planned is not None:
            return plan_data(self._planned[0])["line"]
        return self.batch.progress_line() if self.batch is not None else "batch: not started"


@dataclass(frozen=True)
class PricedBatch:
    """A batch as it was priced: the validated rows and the options, frozen, so a confirm sends exactly this."""

    rows: tuple[Any, ...]
    total: int
    budget: int | None
    name: str | None
    concurrency: int

    def to_payload(self) -> dict[str, Any]:
        """What would be sent, as data: two priced batches are the same batch when their payloads are equal (what
        a confirm compares, as it does a single request's)."""
        rows = [[row.v2, row.request.to_payload()] for row in self.rows]
        return {
            "rows": rows,
            "total": self.total,
            "budget": self.budget,
            "name": self.name,
            "concurrency": self.concurrency,
        }

    @property
    def rows_words(self) -> str:
        return f"{len(self.rows)} row{'' if len(self.rows) == 1 else 's'}"

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.total > self.budget
