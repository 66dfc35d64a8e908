"""What the agent server has spent against its budget: every paid call and batch, reserved before it is sent
and counted as the service charged it wherever that can be told.

A paid operation takes its estimate out of the budget under one lock before anything is sent (a batch takes
its whole estimate), so two calls or two batches at once cannot both fit in the same credits. When it ends it
counts what the key's music counts say it cost (before minus after), if no other paid operation of this
server, nor a batch of its workspace, ran in its window (the workspace's `KeyActivity`, which its batches ask
too) and the charge has shown (a create that took nothing is not measured), and its estimate otherwise; a batch
that sent fewer rows than it reserved gives the rest back. Lyrics are counted at their estimate: music counts do
not say what they cost.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..errors import MusicGenError


class OverBudget(MusicGenError):
    """The estimate does not fit in what is left of the budget; nothing was reserved."""

    def __init__(self, left: int, estimate: int) -> None:
        super().__init__(f"{left} credit(s) left, about {estimate} needed")
        self.left, self.estimate = left, estimate


@dataclass
class Window:
    """A paid operation's stretch of time on the key; overlapped when another one ran in it (not measurable)."""

    overlapped: bool = False
    open: bool = True


@dataclass
class Spend:
    """One paid operation: a single call (`batch` None) or a batch (its reservation in `estimate`)."""

    estimate: int
    window: Window
    is_batch: bool = False
    batch: Any = None
    sent: bool = False
    measured: int | None = None
    ended: bool = False

    @property
    def running(self) -> bool:
        return not self.ended and not (self.batch is not None and self.batch.done)

    def counted(self) -> int:
        """Credits the budget counts for it: its reservation while it runs, then what it cost."""
        if self.is_batch:
            if self.batch is None:
                return self.estimate
            if not self.batch.done:
                return max(self.batch.spent_estimate, self.estimate)
            measured = self.batch_measured()
            return self.batch.spent_estimate if measured is None else measured
        if not self.ended:
            return self.estimate
        return self.estimate if self.measured is None else self.measured

    def batch_measured(self) -> int | None:
        before, after = self.batch.counts_before, self.batch.counts_after
        overlapped = self.window.overlapped or self.batch.overlapped  # the batch's own: the workspace's other runs
        if overlapped or before is None or after is None or before < after:
            return None
        if before == after and self.batch.calls:  # creates that cost nothing yet: the charge has not shown
            return None
        return before - after

    def estimated(self) -> int:
        if self.is_batch:
            return 0 if self.batch is None else self.batch.spent_estimate
        return self.estimate if self.sent or not self.ended else 0

    def measured_credits(self) -> int | None:
        if self.is_batch:
            return self.batch_measured() if self.batch is not None and self.batch.done else None
        return self.measured if self.ended else None


@dataclass
class Ledger:
    """The server's lifetime budget (None: no cap) and every paid operation it sent. `activity` and `key`: the
    workspace's per-key state (`batch.key_activity.KeyActivity`) and the key's fingerprint, where a single call's
    window is opened too, so the workspace's batches and this server's calls see each other overlap (a batch
    opens its own window there when it reads its counts)."""

    budget: int | None
    activity: Any = None
    key: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _spends: list[Spend] = field(default_factory=list)

    def _close(self, spend: Spend) -> None:
        spend.window.open = False
        if self.activity is not None and not spend.is_batch:
            self.activity.end(self.key, spend.window)

    def _close_finished(self) -> None:
        for spend in self._spends:
            if spend.window.open and not spend.running:
                self._close(spend)

    def _open_window(self, *, batch: bool) -> Window:
        self._close_finished()
        others = [s.window for s in self._spends if s.window.open]
        for window in others:
            window.overlapped = True
        window = Window(overlapped=bool(others))
        if self.activity is not None and not batch:
            self.activity.begin(self.key, window)
        return window

    def _counted(self) -> int:
        return sum(s.counted() for s in self._spends)

    def left(self) -> int | None:
        if self.budget is None:
            return None
        with self._lock:
            return max(0, self.budget - self._counted())

    def reserve(self, estimate: int, *, batch: bool = False) -> Spend:
        """Take `estimate` out of the budget now, or raise `OverBudget` (nothing taken)."""
        with self._lock:
            if self.budget is not None:
                left = max(0, self.budget - self._counted())
                if estimate > left:
                    raise OverBudget(left, estimate)
            spend = Spend(estimate, self._open_window(batch=batch), is_batch=batch)
            self._spends.append(spend)
            return spend

    def started(self, spend: Spend, batch: Any) -> None:
        """The batch reserved by `spend` is running (what it sends is counted from its rows from now on)."""
        with self._lock:
            spend.batch, spend.sent = batch, True

    def release(self, spend: Spend) -> None:
        """Nothing was sent: the reservation is given back whole."""
        with self._lock:
            self._close(spend)
            if spend in self._spends:
                self._spends.remove(spend)

    def settle(self, spend: Spend, before: int | None, after: int | None) -> None:
        """A single call was sent (or may have been): it counts what the key's counts say, if they can tell."""
        with self._lock:
            spend.sent = spend.ended = True
            self._close(spend)
            # a create that took nothing off the key has not been charged *yet* (a service may charge late): the
            # estimate stands, so a late charge can never let the budget be passed
            known = before is not None and after is not None and before > after and not spend.window.overlapped
            spend.measured = before - after if known else None  # type: ignore[operator]

    def report(self) -> dict[str, Any]:
        """Spent as estimated, as measured on the key, and as the budget counts it (measured where known)."""
        with self._lock:
            self._close_finished()
            spends = [s for s in self._spends if s.sent or s.running]
            measured = [m for m in (s.measured_credits() for s in spends) if m is not None]
            unmeasured = sum(1 for s in spends if s.measured_credits() is None)
            counted = self._counted()
            return {
                "server_spent_estimate": sum(s.estimated() for s in spends),
                "server_spent_measured": sum(measured),
                "server_spends_not_measured": unmeasured,
                "server_spent_counted": counted,
                "server_budget": self.budget,
                "server_budget_left": None if self.budget is None else max(0, self.budget - counted),
            }
