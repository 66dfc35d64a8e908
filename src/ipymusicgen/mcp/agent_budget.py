"""What the agent server has spent against its budget: every paid call and batch, reserved before it is sent
and counted as the service charged it wherever that can be told.

A paid operation takes its estimate out of the budget under one lock before anything is sent (a batch takes
its whole estimate), so two calls or two batches at once cannot both fit in the same credits. When it ends it
counts what the key's music counts say it cost (before minus after), if no other paid operation of this
server, nor a batch of its workspace, ran in its window (the workspace's `KeyActivity`, which its batches ask
too) and the charge has shown (a create that took nothing is not measured), and its estimate otherwise; a batch
that sent fewer rows than it reserved gives the rest back. Lyrics are counted at their estimate: music counts do
not say what they cost.

A budget is in one unit, never two added together: the service's credits (an engine's song, priced in dollars, is
refused), or US dollars across providers (`models.dollar_prices.DollarBudget`): an engine's song counts at its
dollar price, a service call at its credits times the user's rate (`MUSICGEN_CREDIT_DOLLARS`), which the spend
keeps so that what the key's counts measure converts at the rate it was priced at.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..errors import MusicGenError

Amount = int | Decimal
"""Credits (int) or US dollars (Decimal): a ledger holds one unit only."""


def shown(amount: Amount | None, dollars: bool) -> str:
    """An amount with its unit: `7 credits`, `1 credit`, `$4.25`."""
    if dollars:
        return f"${Decimal(amount or 0).quantize(Decimal('0.01'))}"
    return f"{amount} credit{'' if amount == 1 else 's'}"


class OverBudget(MusicGenError):
    """The estimate does not fit in what is left of the budget; nothing was reserved."""

    def __init__(self, left: Amount, estimate: Amount, dollars: bool = False) -> None:
        super().__init__(f"{shown(left, dollars)} left, about {shown(estimate, dollars)} needed")
        self.left, self.estimate, self.dollars = left, estimate, dollars


@dataclass
class Window:
    """A paid operation's stretch of time on the key; overlapped when another one ran in it (not measurable)."""

    overlapped: bool = False
    open: bool = True


@dataclass
class Spend:
    """One paid operation: a single call (`batch` None) or a batch (its reservation in `estimate`, in the ledger's
    unit). `dollars`: the ledger counts dollars, and `rate` (dollars per credit, as priced) converts the credits the
    key's counts measure; `measured` stays in credits, as the key says."""

    estimate: Amount
    window: Window
    is_batch: bool = False
    batch: Any = None
    sent: bool = False
    measured: int | None = None
    ended: bool = False
    dollars: bool = False
    rate: Decimal | None = None

    def in_unit(self, credits: int) -> Amount:
        """Credits in the ledger's unit (a dollar ledger: at the rate this spend was priced at)."""
        if not self.dollars:
            return credits
        return (self.rate or Decimal(0)) * credits  # no rate: no service call could be sent (refused before)

    def batch_spent(self) -> Amount:
        """What the batch's rows sent are estimated to cost, in the ledger's unit (an engine's row: its dollars)."""
        credits = self.in_unit(self.batch.spent_estimate)
        if not self.dollars:
            return credits
        return credits + (self.batch.spent_usd_estimate or Decimal(0))

    @property
    def running(self) -> bool:
        return not self.ended and not (self.batch is not None and self.batch.done)

    def counted(self) -> Amount:
        """What the budget counts for it, in its unit: its reservation while it runs, then what it cost."""
        if self.is_batch:
            if self.batch is None:
                return self.estimate
            if not self.batch.done:
                return max(self.batch_spent(), self.estimate)
            measured = self.batch_measured()
            if measured is None:
                return self.batch_spent()
            engines = (self.batch.spent_usd_estimate or Decimal(0)) if self.dollars else 0
            return self.in_unit(measured) + engines  # the key measures the service's rows only
        if not self.ended:
            return self.estimate
        return self.estimate if self.measured is None else self.in_unit(self.measured)

    def batch_measured(self) -> int | None:
        before, after = self.batch.counts_before, self.batch.counts_after
        overlapped = self.window.overlapped or self.batch.overlapped  # the batch's own: the workspace's other runs
        if overlapped or before is None or after is None or before < after:
            return None
        if before == after and self.batch.calls:  # creates that cost nothing yet: the charge has not shown
            return None
        return before - after

    def estimated(self) -> Amount:
        if self.is_batch:
            return 0 if self.batch is None else self.batch_spent()
        return self.estimate if self.sent or not self.ended else 0

    def measured_credits(self) -> int | None:
        if self.is_batch:
            return self.batch_measured() if self.batch is not None and self.batch.done else None
        return self.measured if self.ended else None


@dataclass
class AgentBudget:
    """The server's lifetime budget (None: no cap; credits, or US dollars when `dollars`) and every paid operation it
    sent. `activity` and `key`: the
    workspace's per-key state (`batch.key_activity.KeyActivity`) and the key's fingerprint, where a single call's
    window is opened too, so the workspace's batches and this server's calls see each other overlap (a batch
    opens its own window there when it reads its counts)."""

    budget: Amount | None
    activity: Any = None
    key: str = ""
    dollars: bool = False
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

    def _counted(self) -> Amount:
        return sum((s.counted() for s in self._spends), Decimal(0) if self.dollars else 0)

    def _left(self) -> Amount:
        assert self.budget is not None
        return max(Decimal(0) if self.dollars else 0, self.budget - self._counted())

    def left(self) -> Amount | None:
        if self.budget is None:
            return None
        with self._lock:
            return self._left()

    def reserve(self, estimate: Amount, *, batch: bool = False, rate: Decimal | None = None) -> Spend:
        """Take `estimate` (in the ledger's unit) out of the budget now, or raise `OverBudget` (nothing taken).
        `rate`: the dollars per credit a service call of a dollar ledger was priced at."""
        finite = not isinstance(estimate, Decimal) or estimate.is_finite()
        if self.dollars != isinstance(estimate, Decimal) or not finite or estimate < 0:  # NaN, a sign, the other unit
            raise OverBudget(self.left() or 0, estimate, self.dollars)  # units are never mixed: nothing taken
        with self._lock:
            if self.budget is not None:
                left = self._left()
                if estimate > left:
                    raise OverBudget(left, estimate, self.dollars)
            window = self._open_window(batch=batch)
            spend = Spend(estimate, window, is_batch=batch, dollars=self.dollars, rate=rate)
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
        """Spent as estimated, as measured on the key, and as the budget counts it (measured where known), in the
        budget's unit (`server_budget_unit`: dollars as strings of cents, "4.25"), and one line that says it."""
        with self._lock:
            self._close_finished()
            spends = [s for s in self._spends if s.sent or s.running]
            measured = [s.in_unit(m) for s in spends if (m := s.measured_credits()) is not None]
            unmeasured = sum(1 for s in spends if s.measured_credits() is None)
            counted = self._counted()
            left = None if self.budget is None else self._left()
            zero: Amount = Decimal(0) if self.dollars else 0
            estimate = sum((s.estimated() for s in spends), zero)
            report: dict[str, Any] = {
                "server_spent_estimate": estimate,
                "server_spent_measured": sum(measured, zero),
                "server_spends_not_measured": unmeasured,
                "server_spent_counted": counted,
                "server_budget": self.budget,
                "server_budget_left": left,
            }
            if self.dollars:  # cents as text ("4.25"): a JSON number would round them
                report = {k: _cents(v) for k, v in report.items()}
            line = "no budget"
            if self.budget is not None:
                line = f"{shown(left, self.dollars)} left of {shown(self.budget, self.dollars)}"
            unit = "USD" if self.dollars else "credits"
            return {**report, "server_budget_unit": unit, "server_budget_line": line}


def _cents(value: Any) -> Any:
    """A dollar amount as text in cents; a count (int) or None as it is."""
    if value is None or isinstance(value, int):
        return value
    return f"{Decimal(value).quantize(Decimal('0.01'))}"
