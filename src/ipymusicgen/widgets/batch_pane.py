"""The studio's Batch tab: a pane like the others (same field kit, same confirm), whose request is a priced batch.

Rows come from pasted `%musicgen` lines or a notebook variable (a DataFrame or a list of dicts). Every keystroke
re-validates every row and re-prices the batch without any network call; Start sends the batch in the
background and its progress view (`BatchView`, a child of the studio's view) appears under the form, its songs
in the studio's watcher.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..models import costs
from .batch import BatchView, PricedBatch
from .fields import parse_number
from .pane import FieldSpec, Pane, plural

if TYPE_CHECKING:
    from ..batch.drivers import Batch
    from .pane import PaneHost

NO_VARIABLE = (("none: the lines above", ""),)
MAX_CONCURRENCY = 100
LINES_PLACEHOLDER = 'one %musicgen line per song, e.g.\n--style "lo-fi" rain on the window\n--v2 synthwave drive'


class BatchProblem(Exception):
    """Why the batch as typed cannot be sent, and the field it belongs to ("" for the whole form)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class BatchPane(Pane):
    """Many songs at once: the rows, how many at once, a budget and a name; the estimate before Start."""

    title = "Batch"
    tab = "batch"
    submit_label = "Start batch"

    def __init__(self, studio: PaneHost, shell: Any = None) -> None:
        super().__init__(
            studio,
            [
                FieldSpec("lines", "Songs, one per line", "textarea", LINES_PLACEHOLDER, wide=True, hint="%musicgen"),
                FieldSpec("source", "Or rows from a variable", "select", options=NO_VARIABLE, hint="--from"),
                FieldSpec("concurrency", "Songs at once", "number", "3", hint="concurrency"),
                FieldSpec("budget", "Budget (credits)", "number", "no limit", hint="budget"),
                FieldSpec("name", "Batch name", "text", "made from the rows", hint="name"),
            ],
        )
        self.typed["concurrency"] = "3"
        self._shell = shell
        self.notes: list[str] = []
        """What `%musicgen` would note for the lines (fields left as typed, fields the service ignores)."""
        self.batch: Batch | None = None
        self.view = BatchView(watcher=studio.watcher, confirm=studio.confirm)  # its retry asks as the panes do

    # -- rows ------------------------------------------------------------------------------------------

    @property
    def shell(self) -> Any:
        if self._shell is None:
            from IPython import get_ipython

            self._shell = get_ipython()
        return self._shell

    @property
    def namespace(self) -> dict[str, Any]:
        return getattr(self.shell, "user_ns", None) or {}

    def list_sources(self) -> list[str]:
        """The notebook's variables a batch can take rows from (`--from`'s rule), as the choices of "Or rows from
        a variable"; empty lists are left out."""
        from ..notebook.batch_lines import holds_rows

        names = sorted(
            n
            for n, v in self.namespace.items()
            if not n.startswith("_") and holds_rows(v) and (type(v).__name__ == "DataFrame" or len(v) > 0)
        )
        current = self.typed["source"]
        if current and current not in names:
            names.append(current)  # a chosen variable stays chosen: validation says it is gone
        self.specs["source"] = replace(self.specs["source"], options=(*NO_VARIABLE, *((n, n) for n in names)))
        return names

    def focus(self, name: str) -> None:
        if name == "source":
            self.list_sources()
            self._studio.pane_changed(self, revalidate=False)

    def visible(self) -> list[str]:
        return [n for n in self.specs if n != "lines" or not self.typed["source"]]

    def required(self) -> set[str]:
        return {"concurrency"} | ({"source"} if self.typed["source"] else {"lines"})

    def counts(self) -> dict[str, Any]:
        priced = self.request
        return {"lines": plural(len(priced.rows), "row")} if isinstance(priced, PricedBatch) else {}

    # -- pricing -----------------------------------------------------------------------------------------

    def validate(self) -> None:
        try:
            self.request = self.price()
        except BatchProblem as problem:
            self.request = None
            self.problems = {problem.field: problem.message} if problem.field else {}
            self.general = [] if problem.field else [problem.message]
            return
        self.problems, self.general = {}, []

    def price(self) -> PricedBatch:
        """Every row validated and priced (no network): what a confirm shows and then sends; or `BatchProblem`."""
        from ..batch.drivers import validate_rows
        from ..notebook.batch_lines import parse_lines, rows_from_variable

        concurrency = parse_number(str(self.typed["concurrency"]))
        if not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise BatchProblem("concurrency", f"use a whole number from 1 to {MAX_CONCURRENCY}")
        budget = parse_number(str(self.typed["budget"]))
        if budget is not None and (not isinstance(budget, int) or budget < 0):
            raise BatchProblem("budget", "use a whole number of credits, or leave it empty for no limit")
        source = self.typed["source"]
        if not source and not any(
            ln.strip() and not ln.strip().startswith("#") for ln in self.typed["lines"].splitlines()
        ):
            raise BatchProblem("lines", "required: one %musicgen line per song, or choose a variable")
        printed = io.StringIO()
        try:
            with redirect_stdout(printed):  # a line's notes are shown in the pane, not printed into a cell
                found = (
                    rows_from_variable(source, self.namespace)
                    if source
                    else parse_lines(self.typed["lines"], self.shell)
                )
            rows = validate_rows(found, allow_unknown_models=self.client.settings.allow_unknown_models)
            total = costs.estimate_total(r.request for r in rows)
        except costs.CostTableError as exc:  # a typo in MUSICGEN_CREDIT_COSTS: said once, nothing sent
            raise BatchProblem("", str(exc)) from None
        except Exception as exc:  # UsageError / BatchError name the line or row
            raise BatchProblem("source" if source else "lines", str(exc)) from None
        self.notes = [line for line in printed.getvalue().splitlines() if line.strip()]
        priced = PricedBatch(tuple(rows), total, budget, self.typed["name"].strip() or None, concurrency)
        if priced.over_budget:
            raise BatchProblem("budget", f"the rows are estimated at {total} credits, more than this budget")
        return priced

    def estimate(self, request: Any) -> int:
        return request.total

    def cost_words(self) -> str:
        return f"{self.request.rows_words}: {super().cost_words()}"

    def confirm_question(self, changed: bool) -> str:
        again = "The batch changed since it was priced. " if changed else ""
        return f"{again}Send {self.request.rows_words}? It {super().cost_words()}."

    # -- sending -----------------------------------------------------------------------------------------

    def _build(self) -> Any:
        return self.price()

    def _call(self, priced: PricedBatch) -> Batch:
        """Start the batch in the background; its view follows it under the form."""
        from ..batch.drivers import run_batch

        batch = run_batch(
            self.client,
            [row.request for row in priced.rows],
            name=priced.name,
            concurrency=priced.concurrency,
            budget=priced.budget,
            wait=False,
            on_update=self.view.update,
        )
        self.batch = batch
        self.view.update(batch)
        return batch

    def _describe(self, result: Batch) -> str:
        return f"{result.name} started: {plural(len(result.rows), 'row')}, followed below"

    def state(self) -> dict[str, Any]:
        data = super().state()
        if not data["status"] and self.notes:
            data["status"] = " · ".join(self.notes[:3]) + (" …" if len(self.notes) > 3 else "")
        data["has_batch"] = self.batch is not None
        return data

    def __repr__(self) -> str:
        return super().__repr__() + ("\n" + repr(self.view) if self.batch is not None else "")
