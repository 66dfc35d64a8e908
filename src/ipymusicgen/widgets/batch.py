"""The batch's progress view (above its songs) and the studio's Batch tab form.

`BatchView` is one anywidget model: counts, a progress bar, credits and ETA, and the rows; its text repr is
the progress line, so a text-only front end still reads progress. Its `TaskWatcher` (the songs as cards)
follows the batch: cards and the header's batch line come from the batch's own polling rounds. `BatchForm`
takes pasted `%musicgen` lines or a DataFrame variable, shows the estimate before Start, and runs the batch in
the background.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets as w
import traitlets

from ..models import costs
from ..safe_html import esc
from ._static import css, esm
from .text import TextRepr

if TYPE_CHECKING:
    from ..batch.engine import Batch
    from ..client.faces import MusicClient

ROWS_SHOWN = 200


def view_data(batch: Batch, note: str = "") -> dict[str, Any]:
    """What the front end draws: plain text and numbers only. Rows are numbered from 1, as people count."""
    rows = [
        {"index": r.index + 1, "state": r.state, "request": r.describe(), "error": (r.error or "")[:300]}
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
        "can_retry": bool(batch.done and failed and batch.client is not None),
        "note": note,
    }


class BatchView(TextRepr, anywidget.AnyWidget):
    """Live progress of one batch; pass it as `on_update` (or call `follow(batch)`)."""

    _esm = traitlets.Unicode(esm("batch")).tag(sync=True)
    _css = traitlets.Unicode(css("batch")).tag(sync=True)
    data = traitlets.Dict().tag(sync=True)

    def __init__(self, batch: Batch | None = None, *, watcher: Any = None) -> None:
        super().__init__()
        self.add_class("ipymusicgen-batch-view")
        self.watcher = watcher
        self.batch: Batch | None = None
        self._lock = threading.Lock()
        self._followed: list[Batch] = []
        self._retry_asked = False
        self._retries = 0
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
                self.watcher.follow(batch)
            self.data = view_data(batch)

    def retry_failed(self, *, confirmed: bool = True) -> Batch | None:
        """Send the failed rows again as a new batch (`<name>-retry-N`), followed by this view.

        Called from code, the call is the decision; the button sends `confirmed=False`, and with a real key the
        first press only says what it costs ("press again to send"), as a card's paid button does.
        """
        batch = self.batch
        failed = [r for r in batch.rows if r.state == "failed"] if batch is not None and batch.done else []
        if batch is None or not failed or batch.client is None:
            return None
        cost = costs.estimate_total(r.request for r in failed)
        if not confirmed and batch.client.settings.needs_confirm(None) and not self._retry_asked:
            self._retry_asked = True
            self._note(f"Retry {len(failed)} failed row(s)? About {cost} credits (estimate). Press again to send.")
            return None
        self._retry_asked = False
        self._retries += 1
        retry = batch.client.batch([r.request for r in failed], name=f"{batch.name}-retry-{self._retries}", wait=False)
        self.follow(retry)
        return retry

    def _note(self, text: str) -> None:
        with self._lock:
            if self.batch is not None:
                self.data = view_data(self.batch, text)

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Intents from the front end: `stop` (start no more rows), `retry_failed` (send the failed ones again)."""
        if not isinstance(content, dict) or self.batch is None:
            return
        if content.get("kind") == "stop":
            self.batch.stop()
            self.update(self.batch)
        elif content.get("kind") == "retry_failed":
            try:
                self.retry_failed(confirmed=False)
            except Exception as exc:  # said in the view, never raised from a button
                self._note(f"Retry failed: {' '.join(str(exc).split())[:300]}")

    def __repr__(self) -> str:
        return self.batch.progress_line() if self.batch is not None else "batch: not started"


@dataclass(frozen=True)
class PricedBatch:
    """A batch as it was priced: the validated rows and the options, frozen, so a confirm sends exactly this."""

    rows: tuple[Any, ...]
    total: int
    budget: int | None
    name: str | None
    concurrency: int
    fingerprint: str

    @classmethod
    def of(cls, rows: list[Any], total: int, budget: int | None, name: str | None, concurrency: int) -> PricedBatch:
        payloads = [[row.v2, row.request.to_payload()] for row in rows]
        text = json.dumps([payloads, total, budget, name, concurrency], sort_keys=True, default=str)
        return cls(tuple(rows), total, budget, name, concurrency, hashlib.sha256(text.encode()).hexdigest())

    @property
    def rows_words(self) -> str:
        return f"{len(self.rows)} row{'' if len(self.rows) == 1 else 's'}"

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.total > self.budget


class BatchForm(w.VBox):
    """The studio's Batch tab: lines or a DataFrame variable, concurrency, budget, the estimate, Start."""

    def __init__(self, client: MusicClient | None = None, watcher: Any = None, shell: Any = None) -> None:
        self._client = client
        self.watcher = watcher
        self._shell = shell
        self.lines = w.Textarea(
            placeholder='one %musicgen line per song, e.g.\n--style "lo-fi" rain on the window\n--v2 synthwave drive',
            description="Lines",
            layout=w.Layout(width="100%", height="8em"),
        )
        self.source = w.Dropdown(description="or from", options=[("(the lines above)", "")], value="")
        self.refresh_sources = w.Button(description="Refresh", tooltip="List DataFrame and list variables")
        self.concurrency = w.BoundedIntText(value=3, min=1, max=100, description="Concurrency")
        self.budget = w.Text(value="", placeholder="no limit", description="Budget")
        self.name = w.Text(value="", placeholder="derived from the rows", description="Name")
        self.estimate = w.HTML()
        self.start = w.Button(description="Start", button_style="primary", tooltip="Send the batch")
        self.cancel = w.Button(description="Cancel", tooltip="Do not send the batch", layout=w.Layout(display="none"))
        self.confirm_required: bool | None = None
        """None: a real key confirms before paying (the embedded sandbox's demo key does not); or forced."""
        self.confirm_text = ""
        self._priced: PricedBatch | None = None
        """What the shown confirm priced: the second press sends exactly this, or asks again if the rows changed."""
        self._rows_words = ""
        self.error = ""
        self.batch: Batch | None = None
        self.view = BatchView(watcher=watcher)
        for control in (self.lines, self.source, self.concurrency, self.budget, self.name):
            control.observe(lambda _change: self.update_estimate(), names="value")
        self.refresh_sources.on_click(lambda _b: self.list_sources())
        self.start.on_click(lambda _b: self._start_clicked())
        self.cancel.on_click(lambda _b: self._set_confirm(""))
        super().__init__(
            [
                self.lines,
                w.HBox([self.source, self.refresh_sources]),
                w.HBox([self.concurrency, self.budget, self.name]),
                self.estimate,
                w.HBox([self.start, self.cancel]),
                self.view,
            ]
        )
        self.add_class("ipymusicgen-batch-form")
        self.list_sources()

    # -- inputs --------------------------------------------------------------------------------------

    @property
    def shell(self) -> Any:
        if self._shell is None:
            from IPython import get_ipython

            self._shell = get_ipython()
        return self._shell

    @property
    def client(self) -> MusicClient:
        if self._client is None:
            from ..session import get_client

            self._client = get_client()
        return self._client

    def list_sources(self) -> None:
        """The notebook's DataFrame and list-of-dict variables, for the "or from" choice."""
        namespace = getattr(self.shell, "user_ns", {}) or {}
        names = sorted(
            n
            for n, v in namespace.items()
            if not n.startswith("_")
            and (type(v).__name__ == "DataFrame" or (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)))
        )
        current = self.source.value
        self.source.options = [("(the lines above)", ""), *[(n, n) for n in names]]
        self.source.value = current if current in names else ""

    def requests(self) -> Any:
        from ..notebook.batch_lines import parse_lines, rows_from_variable

        if self.source.value:
            return rows_from_variable(self.source.value, getattr(self.shell, "user_ns", {}) or {})
        return parse_lines(self.lines.value, self.shell)

    def _budget(self) -> int | None:
        text = self.budget.value.strip()
        if not text:
            return None
        value = int(text)
        if value < 0:
            raise ValueError
        return value

    def price(self) -> PricedBatch | None:
        """Validate every row and price them (no network): what a confirm shows and then sends; None, with the
        problem shown, when there is one."""
        from ..batch.engine import validate_rows

        try:
            rows = validate_rows(self.requests(), allow_unknown_models=self.client.settings.allow_unknown_models)
            total = costs.estimate_total(r.request for r in rows)
            budget = self._budget()
        except costs.CostTableError as exc:  # a typo in MUSICGEN_CREDIT_COSTS: one line, nothing sent
            self._show_error(str(exc))
            return None
        except ValueError:
            self._show_error("Budget: use a whole number of credits, or leave it empty")
            return None
        except Exception as exc:  # UsageError / BatchError: say it, send nothing
            self._show_error(str(exc))
            return None
        self.error = ""
        return PricedBatch.of(rows, total, budget, self.name.value.strip() or None, self.concurrency.value)

    def update_estimate(self) -> int | None:
        """Validate every row and show the estimate (no network); the problem, escaped, when there is one."""
        self._set_confirm("")  # a changed batch is confirmed again
        priced = self.price()
        if priced is None:
            return None
        over = f" — more than the budget of {priced.budget}" if priced.over_budget else ""
        self._rows_words = priced.rows_words
        self.estimate.value = f"<span>{priced.rows_words}, about <b>{priced.total}</b> credits{esc(over)}</span>"
        return priced.total

    def _show_error(self, message: str) -> None:
        self.error = message
        self.estimate.value = f"<span style='color: var(--jp-error-color1, #d32f2f)'>{esc(message)}</span>"

    # -- start ---------------------------------------------------------------------------------------

    @property
    def needs_confirm(self) -> bool:
        """A batch is confirmed before it is sent with a real key; the embedded sandbox's demo key costs nothing."""
        return self.client.settings.needs_confirm(self.confirm_required)

    def _set_confirm(self, text: str, priced: PricedBatch | None = None) -> None:
        self.confirm_text = text
        self._priced = priced if text else None
        self.start.description = "Confirm and send" if text else "Start"
        self.cancel.layout.display = None if text else "none"
        if text:
            self.estimate.value = f"<span>{esc(text)}</span>"

    def _start_clicked(self) -> None:
        """The Start button (the browser only says it was pressed): with a real key the first press prices the
        batch and asks; the second sends exactly what was priced. If the rows changed meanwhile (a cell changed
        the DataFrame, say), nothing is sent and it asks again with the new rows. Decided here, not in the browser.
        """
        if not self.needs_confirm:
            self.submit()
            return
        priced = self.price()
        if priced is None:
            self._set_confirm("")
            return
        shown = self._priced
        if shown is None or shown.fingerprint != priced.fingerprint:
            again = "The batch changed since it was priced. " if shown is not None else ""
            self._set_confirm(f"{again}Send {priced.rows_words}? It uses about {priced.total} credits.", priced)
            return
        self._set_confirm("")
        self.submit(shown)

    def submit(self, priced: PricedBatch | None = None) -> Batch | None:
        """Start the batch in the background (the view follows it); None, with the problem shown, if refused.

        `priced`: the snapshot a confirm showed, sent as it was priced (its rows, name, budget, concurrency).
        """
        from ..batch.engine import run_batch

        priced = priced or self.price()
        if priced is None:
            return None
        try:
            batch = run_batch(
                self.client,
                [row.request for row in priced.rows],
                name=priced.name,
                concurrency=priced.concurrency,
                budget=priced.budget,
                wait=False,
                on_update=self.view.update,
            )
        except Exception as exc:  # a refusal (budget, counts, changed row): shown, nothing sent
            self._show_error(str(exc))
            return None
        self.batch = batch
        self.view.update(batch)
        return batch

    def __repr__(self) -> str:
        head = f"Batch form: {self.error or 'ready'}"
        return head + ("\n" + repr(self.view) if self.batch is not None else "")
