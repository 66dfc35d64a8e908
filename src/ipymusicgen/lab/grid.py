"""Prompt grids: the cross product of a few choices (styles × models, say), each cell made `repeat` times.

A grid is a plan first: its cells, each priced (`models.costs`), and the total, checked like any batch
before anything is sent. `run()` sends it as ONE named batch (the engine: idempotent by name, a budget,
429 back-off), so running it again sends nothing twice. `to_pandas()` gives a row per cell and take
with its parameters, ids, state and stars.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..batch.drivers import Batch, BatchError, validate_rows
from ..models.dollar_prices import budget_charge, usd_estimate
from ..storage.batches import NEVER_SENT
from ..storage.errors import StorageError

if TYPE_CHECKING:
    from ..client.faces import MusicClient
    from ..song_library import Library

MAX_CELLS = 200
"""More rows than this in one grid is a typo (a list of 1,000 styles), refused before anything is priced."""


@dataclass(frozen=True)
class GridCell:
    """One row of the grid: the axis values that make it, which take it is, and the whole request."""

    index: int
    params: dict[str, Any]
    take: int
    request: dict[str, Any]
    estimate: int
    """The service's credits (an engine's cell: 0; its price is in dollars)."""
    estimate_usd: Decimal | None = None
    """Its price in dollars: an engine's always, the service's at the user's credit rate (None without)."""


class Grid:
    """A prompt grid: `base` fields, `axes` (field -> values) crossed, each cell `repeat` times."""

    def __init__(
        self,
        client: MusicClient,
        base: Mapping[str, Any] | None = None,
        axes: Mapping[str, Iterable[Any]] | None = None,
        *,
        repeat: int = 1,
        name: str | None = None,
        view: Callable[[Grid], Any] | None = None,
    ) -> None:
        """`view`: how the grid is drawn when shown in a notebook, given by whoever sits above the widgets (the
        lab never imports them); without one, a grid shows as its priced table."""
        if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= 20:
            raise BatchError(f"repeat must be a whole number from 1 to 20 (got {repeat!r})")
        self.client = client
        self.base = dict(base or {})
        self.axes = {str(field): _values(field, values) for field, values in (axes or {}).items()}
        if not self.axes:
            raise BatchError("a grid needs at least one axis with values, e.g. style=['lo-fi', 'jazz']")
        clash = sorted(set(self.axes) & set(self.base))
        if clash:
            raise BatchError(f"{', '.join(clash)}: given both in base and as an axis; keep one")
        self.repeat = repeat
        size = math.prod(len(values) for values in self.axes.values()) * repeat  # before any product is built
        if size > MAX_CELLS:
            raise BatchError(f"the grid has {size} rows, more than {MAX_CELLS}; make it smaller")
        combos = list(itertools.product(*self.axes.values()))
        cells = []
        for combo in combos:
            params = dict(zip(self.axes, combo, strict=True))
            for take in range(1, repeat + 1):
                cells.append((params, take, {**self.base, **params}))
        rows = validate_rows(
            [request for _, _, request in cells], allow_unknown_models=client.settings.allow_unknown_models
        )
        order = list(range(len(rows)))  # batch row of each cell, in grid order
        self.resend_note = ""
        """Said in the plan when the grid will send again rows an earlier grid of its fields sent (it is not an
        extension of that grid, so it runs as a batch of its own)."""
        if name is None:
            hashes = [r.request_hash for r in rows]
            name, order, self.resend_note = _derived_name_and_order(client, self.base, self.axes, repeat, hashes)
        self.cells = [
            GridCell(order[i], params, take, request, budget_charge(row.request, None), usd_estimate(row.request))
            for i, ((params, take, request), row) in enumerate(zip(cells, rows, strict=True))
        ]
        self.name = name
        self.batch: Batch | None = None
        self._run_listeners: list[Callable[[Batch], None]] = []
        self._view: Any = None
        self._view_factory = view

    # -- the plan ------------------------------------------------------------------------------------

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The requests, one per cell and take, in batch order (what `run()` sends): grid order, except that an
        extended grid keeps the rows its earlier run recorded first and adds its new cells after them."""
        return [cell.request for cell in sorted(self.cells, key=lambda cell: cell.index)]

    @property
    def estimate(self) -> int:
        """Estimated credits of the whole grid (each cell priced by its model)."""
        return sum(cell.estimate for cell in self.cells)

    def run(
        self,
        *,
        budget: Any = None,
        budget_usd: Any = None,
        concurrency: int = 3,
        wait: bool = False,
        on_update: Callable[[Batch], None] | None = None,
    ) -> Batch:
        """Send the grid as one named batch (`self.name`): a re-run sends only rows never sent. `budget`: credits,
        or dollars across providers (`'$5'`, or `budget_usd=5`)."""
        told: list[Batch] = []
        telling = threading.Lock()

        def tell(batch: Batch) -> None:
            with telling:  # once per run, from whichever thread speaks first
                if told:
                    return
                told.append(batch)
            self._run_started(batch)

        def updated(batch: Batch) -> None:
            tell(batch)  # the first word of the run (wait=True drives it in this thread): views follow from here
            if on_update is not None:
                on_update(batch)

        batch = self.client.batch(
            self.rows,
            name=self.name,
            budget=budget,
            budget_usd=budget_usd,
            concurrency=concurrency,
            wait=wait,
            on_update=updated,
        )
        tell(batch)
        return batch

    def _run_started(self, batch: Batch) -> None:
        self.batch = batch
        for listener in list(self._run_listeners):
            listener(batch)

    def add_run_listener(self, listener: Callable[[Batch], None]) -> None:
        """Call `listener(batch)` each time the grid is run (a grid view follows the batch so)."""
        self._run_listeners.append(listener)

    @property
    def view(self) -> Any:
        """The grid's view (rows × columns of song cards), made once by the factory it was given; None without."""
        if self._view is None and self._view_factory is not None:
            self._view = self._view_factory(self)
        return self._view

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        """In a notebook a grid is drawn by its view; None lets IPython fall back to the table below."""
        view = self.view
        return view._repr_mimebundle_(include=include, exclude=exclude) if view is not None else None

    # -- results -------------------------------------------------------------------------------------

    def results(self, library: Library | None = None) -> list[dict[str, Any]]:
        """A row per cell and take: its axis values, take, estimate, and (once run) ids, state and stars."""
        rows_by_index = {row.index: row for row in self.batch.rows} if self.batch is not None else {}
        found = []
        for cell in self.cells:
            row = rows_by_index.get(cell.index)
            ids = list(row.ids) if row is not None else []
            rated = [s for s in (_stars(library, i) for i in ids) if s is not None] if library is not None else []
            found.append(
                {
                    **cell.params,
                    "take": cell.take,
                    "estimate": cell.estimate,
                    "estimate_usd": cell.estimate_usd,
                    "state": row.state if row is not None else "not run",
                    "ids": ids,
                    "stars": round(sum(rated) / len(rated), 2) if rated else None,
                }
            )
        return found

    def to_pandas(self, library: Library | None = None) -> Any:
        """The results as a DataFrame whose index, `row`, counts from 1 as the list and the batch's table do."""
        import pandas as pd

        index = pd.Index([cell.index + 1 for cell in self.cells], name="row")
        return pd.DataFrame(self.results(library), index=index)

    def __repr__(self) -> str:
        axes = " × ".join(f"{field} ({len(values)})" for field, values in self.axes.items())
        usd = [c.estimate_usd for c in self.cells if c.estimate_usd is not None]
        dollars = f"; ${sum(usd):.2f} in dollars (apart, never added to credits)" if usd else ""
        lines = [f"Grid {self.name!r}: {axes} × {self.repeat} take(s) = {len(self.cells)} rows, about "
                 f"{self.estimate} credits{dollars}"]  # fmt: skip
        if self.resend_note:
            lines.append(self.resend_note)
        for cell in self.cells:  # numbered by batch row (an extended grid appends its new cells' rows)
            shown = ", ".join(f"{k}={v!r}" for k, v in cell.params.items())
            usd = f", ${cell.estimate_usd:.2f}" if cell.estimate_usd is not None else ""
            lines.append(f"  {cell.index + 1:>3}. {shown} (take {cell.take}): about {cell.estimate}{usd}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        fields = list(self.axes)
        head = "".join(
            f"<th>{html.escape(f)}</th>" for f in (*fields, "take", "credits (estimate)", "dollars (estimate)")
        )
        body = "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(str(cell.params[f]))}</td>" for f in fields)
            + f"<td>{cell.take}</td><td>~{cell.estimate}</td><td>{_usd(cell.estimate_usd)}</td></tr>"
            for cell in self.cells
        )
        usd = [c.estimate_usd for c in self.cells if c.estimate_usd is not None]
        total = (
            f"<tr><td colspan='{len(fields) + 1}'>total (estimate)</td><td>~{self.estimate}</td>"
            f"<td>{_usd(sum(usd) if usd else None)}</td></tr>"
        )
        note = f" {html.escape(self.resend_note)}" if self.resend_note else ""
        caption = f"<caption>Grid {html.escape(self.name)}: {len(self.cells)} rows.{note}</caption>"
        return f"<table class='ipymusicgen-grid'>{caption}<tr>{head}</tr>{body}{total}</table>"


def _usd(amount: Decimal | None) -> str:
    """A cell's dollars (apart from its credits), or a dash where none is known (the service's, without a rate)."""
    return f"~${amount:.2f}" if amount is not None else "—"


def _values(field: str, values: Iterable[Any]) -> list[Any]:
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise BatchError(f"{field}: an axis is a list of values, e.g. {field}=[...] (got {values!r})")
    distinct: dict[Any, None] = {}  # a value given twice is one column, not two
    for value in values:  # read lazily: an axis of a billion values is refused at its 201st, never listed whole
        distinct.setdefault(value, None)
        if len(distinct) > MAX_CELLS:
            many = f"{len(values)} values" if isinstance(values, Sized) else f"more than {MAX_CELLS} values"
            raise BatchError(
                f"{field}: {many} in one axis, more than the {MAX_CELLS} rows a grid may have; make it smaller"
            )
    found = list(distinct)
    if not found:
        raise BatchError(f"{field}: an axis needs at least one value")
    return found


def _derived_name(base: Mapping[str, Any], axes: Mapping[str, Any], repeat: int) -> str:
    spec = json.dumps({"base": base, "axes": axes, "repeat": repeat}, sort_keys=True, default=str)
    return f"grid-{hashlib.sha256(spec.encode()).hexdigest()[:12]}"


def _derived_name_and_order(
    client: MusicClient, base: Mapping[str, Any], axes: Mapping[str, list[Any]], repeat: int, hashes: list[str]
) -> tuple[str, list[int], str]:
    """The grid's batch name, each cell's row in it, and what the plan must say about rows sent again.

    The name comes from the base, the axes' fields and the repeat, not their values, so adding a value to an axis
    finds the batch the grid ran as: its recorded rows keep their places and only the new cells are added (and
    sent). A grid that is not such an extension (a value taken away or changed) gets a name from its values too:
    a batch of its own, which sends its rows again; the note says how many were sent before."""
    family = _derived_name(base, dict.fromkeys(axes), repeat)
    in_order = list(range(len(hashes)))
    try:
        store = client.wiring.batch_store(client)  # where the client's batches keep their rows
        stored = store.rows(family)
    except StorageError:  # an unreadable store: the grid's own values name it
        return _derived_name(base, axes, repeat), in_order, ""
    if not stored:
        return family, in_order, ""
    free: dict[str, list[int]] = {}
    for position, digest in enumerate(hashes):
        free.setdefault(digest, []).append(position)
    order = [-1] * len(hashes)
    for index in sorted(stored):
        places = free.get(stored[index].request_hash)
        if not places:  # a recorded row the grid no longer has: not an extension
            return _own_batch(store, base, axes, repeat, hashes, stored, family)
        order[places.pop(0)] = index
    added = len(stored)
    for position in in_order:
        if order[position] < 0:
            order[position], added = added, added + 1
    return family, order, ""


def _own_batch(
    store: Any, base: Mapping[str, Any], axes: Mapping[str, list[Any]], repeat: int, hashes: list[str],
    stored: Mapping[int, Any], family: str,
) -> tuple[str, list[int], str]:  # fmt: skip
    name = _derived_name(base, axes, repeat)
    sent = {row.request_hash for row in stored.values() if row.state not in NEVER_SENT}
    again = sum(1 for digest in hashes if digest in sent)
    ran = any(row.state not in NEVER_SENT for row in store.rows(name).values())
    note = ""
    if again and not ran:
        note = (f"Not an extension of the grid {family} (a value taken away or changed): all {len(hashes)} rows "
                f"will be sent as a new batch, {again} of them sent before there.")  # fmt: skip
    return name, list(range(len(hashes))), note


def _stars(library: Library, task_id: str) -> int | None:
    try:
        return library.song(task_id).stars
    except KeyError:  # not in this library (a sandbox's song, say)
        return None
