"""`GridView`: a prompt grid as rows × columns of compact song cards, priced, run, and compared blind.

The first axis makes the rows, the others the columns. Each cell says its estimate (and the grid its total),
then its takes' songs as they cook. Run sends the grid as its one named batch: with a key that may cost
money the first press only asks ("Send 6 rows, about 12 credits?"), the second sends what was shown (a grid
never changes once made, so what was priced is what is sent). Pick any two songs, then "Compare blind" opens
a `CompareView` of them under the grid.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets as w
import traitlets

from ..config import PaidAsk
from ..errors import MusicGenError, one_line
from ..lab.grid import Grid, GridCell
from ..models.tasks import TaskState
from ._static import front_end
from .card_audio import CardAudio
from .compare import CompareView
from .offered import Offers, allows, card_offers, controls, target_of
from .song_data import Record, plain, song_card
from .text import TextRepr

if TYPE_CHECKING:
    from ..batch.drivers import Batch
    from ..song_library import Library

PICKS = 2
ELSEWHERE = "being sent elsewhere"
"""A cell whose row another run of the same grid is sending: its songs show here once that run has them."""


class GridBoard(anywidget.AnyWidget):
    """The grid's one front-end model: the table in plain data in, intents (run, confirm, pick, compare) out.

    `data` is synced whole only when the board's shape is new (or the front end asks again, "resync"); after that
    each update sends only what changed, as a versioned patch (a custom message: `{"kind": "patch", "version",
    "set": top-level fields, "cells": [[row, column, cell], ...]}`), applied to `data` here in place so a front end
    that connects later still gets the whole current board. A 200-row board is about 750 KiB; a patch, a cell.
    """

    _esm, _css = front_end("grid")
    data = traitlets.Dict().tag(sync=True)
    comparison = anywidget.WidgetTrait().tag(sync=True)
    """The blind comparison of two picked songs, drawn under the grid by the board itself (a child view), so a
    front end that shows one anywidget (marimo's `mo.ui.anywidget(view.board)`) shows both."""


class GridView(TextRepr, w.VBox):
    """The grid's board, and under it the blind comparison of two picked songs when asked for."""

    def __init__(
        self,
        grid: Grid,
        *,
        library: Library | None = None,
        confirm: bool | None = None,
        budget: int | None = None,
        concurrency: int = 3,
    ) -> None:
        self.grid = grid
        self.library = library
        self.ask = PaidAsk.of(grid.client.settings, confirm)
        """The question a paid Run showed ("Send ...?"); the next Run (or Confirm) sends what it priced."""
        self.budget = budget
        self.concurrency = concurrency
        self.board = GridBoard()
        self.audio = CardAudio(self.board)
        """Where each card's player reads (the watcher's and the library's rule): a URL, else the kernel's bytes."""
        self._comparer = CompareView(library=library)  # made now: marimo cannot make a widget from a message
        self.picked: list[str] = []
        self.note = ""
        self._lock = threading.RLock()
        self._drawing = threading.Lock()
        """Held while the board is compared with what the front end has and patched: one patch at a time, in order."""
        self._records: dict[str, Record] = {}
        self.board.on_msg(self._on_msg)
        grid.add_run_listener(self._follow)
        if grid.batch is not None:
            self._follow(grid.batch)
        super().__init__([self.board])
        self.add_class("ipymusicgen-grid-view")
        self._draw()

    # -- the Python API ------------------------------------------------------------------------------

    @property
    def confirm_required(self) -> bool:
        """Whether a Run asks first (the caller's `confirm` choice, else the key's rule); settable."""
        return self.ask.needed

    @confirm_required.setter
    def confirm_required(self, value: bool) -> None:
        self.ask.forced = value

    @property
    def asking(self) -> str:
        """The question a paid Run showed ("" when none)."""
        return self.ask.question

    def _question(self, changed: bool) -> str:
        left = self._credits_left()  # a network read: never under the lock the batch's thread draws under
        again = "The grid changed since it was priced. " if changed else ""
        return (
            f"{again}Send {len(self.grid.cells)} rows, about {self.grid.estimate} credits (estimate){left}? "
            "Press Confirm to send."
        )

    def _snapshot(self) -> Any:
        return (self.grid.name, len(self.grid.cells), self.grid.estimate)

    def run(self, *, confirmed: bool = True) -> Batch | None:
        """Send the grid (its one named batch). From code the call is the decision; the button passes
        `confirmed=False`, and then a key that may cost money is asked first."""
        if self.grid.batch is not None and not self.grid.batch.done:
            return self.grid.batch
        if not confirmed and not self.ask.press_again("run", self._snapshot(), self._question):
            self._draw()
            return None
        self.ask.cancel()
        self.note = ""
        try:
            return self.grid.run(budget=self.budget, concurrency=self.concurrency)
        except Exception as exc:  # a budget or credits refusal: said on the board, nothing sent
            self.note = one_line(exc)[:400]
            self._draw()
            if confirmed:
                raise
            return None

    def cancel(self) -> None:
        """Drop the question a paid Run asked; nothing is sent."""
        self.ask.cancel()
        self._draw()

    def pick(self, task_id: str) -> list[str]:
        """Pick a song for a blind comparison (again to unpick); the two latest picks are kept."""
        with self._lock:
            if task_id not in self._records:
                return self.picked
            if task_id in self.picked:
                self.picked.remove(task_id)
            else:
                self.picked = [*self.picked, task_id][-PICKS:]
        self._draw()
        return self.picked

    def compare(self, *, seed: int | None = None) -> CompareView | None:
        """Open a blind comparison of the two picked songs under the grid (None until two are picked)."""
        songs = [self._records[task_id] for task_id in self.picked if task_id in self._records]
        if len(songs) != PICKS:
            return None
        try:
            self._comparer.load(songs, seed=seed)
        except ValueError as exc:  # a song with nothing to play yet
            self.note = str(exc)
            self._draw()
            return None
        self.board.comparison = self._comparer
        self.note = "Comparing the two picked songs blind: below."
        self._draw()
        return self._comparer

    @property
    def comparison(self) -> CompareView | None:
        """The blind comparison opened from two picks (None until then): what the board draws under the grid."""
        return self.board.comparison

    def results(self) -> list[dict[str, Any]]:
        return self.grid.results(self.library)

    def to_pandas(self) -> Any:
        return self.grid.to_pandas(self.library)

    # -- following the run ---------------------------------------------------------------------------

    def _follow(self, batch: Batch) -> None:
        batch.add_listener(self._batch_moved)
        batch.add_record_listener(self._records_came)
        self._records_came(batch.records)
        self._batch_moved(batch)

    def _records_came(self, records: Any) -> None:
        with self._lock:
            for record in records:
                self._records[record.id] = record

    def _batch_moved(self, _batch: Batch) -> None:
        self._draw()

    # -- the board -----------------------------------------------------------------------------------

    def _credits_left(self) -> str:
        try:
            left = self.grid.client.key_info().key_music_counts
        except Exception:  # the question still stands without it; the batch checks the credits itself
            return ""
        return f"; {left} left (measured)" if left is not None else ""

    def data(self) -> dict[str, Any]:
        """What the board draws: plain text, numbers and card dicts only."""
        with self._lock:
            grid, batch = self.grid, self.grid.batch
            fields = list(grid.axes)
            row_field, column_fields = fields[0], fields[1:]
            rows_by_index = {row.index: row for row in batch.rows} if batch is not None else {}
            columns: list[tuple[Any, ...]] = []
            table: dict[Any, dict[tuple[Any, ...], list[GridCell]]] = {}
            for cell in grid.cells:
                column = tuple(cell.params[f] for f in column_fields)
                if column not in columns:
                    columns.append(column)
                table.setdefault(cell.params[row_field], {}).setdefault(column, []).append(cell)
            rows = []
            for value, by_column in table.items():
                cells = []
                for column in columns:
                    takes = by_column.get(column, [])
                    songs, states = [], []
                    for cell in takes:
                        row = rows_by_index.get(cell.index)
                        states.append(row.state if row is not None else "not run")
                        for take, task_id in enumerate(row.ids if row is not None else (), 1):
                            songs.append(self._card(task_id, cell, take))
                    errors = [
                        r.error
                        for c in takes
                        if (r := rows_by_index.get(c.index)) is not None and r.error and r.state != "elsewhere"
                    ]  # a row another run is sending is no error: the cell's state says it
                    cells.append(
                        {
                            "estimate": sum(c.estimate for c in takes),
                            "state": _cell_state(states),
                            "error": plain(errors[0] if errors else "", 300),
                            "songs": songs,
                        }
                    )
                rows.append({"label": plain(value, 120), "cells": cells})
            return {
                "name": plain(grid.name, 120),
                "row_axis": plain(row_field, 40),
                "column_axis": plain(" · ".join(column_fields), 80),
                "columns": [plain(" · ".join(str(v) for v in column), 120) for column in columns] or ["songs"],
                "rows": rows,
                "total": f"{len(grid.cells)} rows, about {grid.estimate} credits in all (estimate)"
                + (f". {plain(grid.resend_note, 300)}" if grid.resend_note and batch is None else ""),
                "status": batch.progress_line() if batch is not None else "Not run yet.",
                "running": batch is not None and not batch.done,
                "can_run": batch is None or (batch.done and any(r.state == "skipped" for r in batch.rows)),
                "asking": self.asking,
                "picked": list(self.picked),
                "can_compare": len(self.picked) == PICKS,
                "note": plain(self.note, 400),
            }

    def _card(self, task_id: str, cell: GridCell, take: int) -> dict[str, Any]:
        """A compact card: the call's two songs are Take 1 and 2 (a repeated cell's rows follow each other)."""
        record = self._records.get(task_id)
        where = {}
        if record is not None and record.state is not TaskState.FAILED:
            where = self.audio.fields(task_id, path=self._archived_path(task_id), url=record.audio_url)
        card = song_card(record, id=task_id, call=f"row-{cell.index}", take=take, actions=[], **where)
        card["picked"] = task_id in self.picked
        return card

    def _archived_path(self, task_id: str) -> str | None:
        """The song's archived file, where this view's library keeps one (its player may then read it)."""
        if self.library is None:
            return None
        try:
            found = self.library.archived_path(task_id)
        except (KeyError, OSError, MusicGenError):  # a library closed or unreadable: the URL, or nothing
            return None
        return str(found) if found else None

    def close(self) -> None:
        """Close the board and the comparison with the view (the grid and its batch go on)."""
        self.audio.close()  # the players' names answer no more
        self._comparer.close()
        self.board.close()
        super().close()

    def _draw(self) -> None:
        """Send the front end what changed on the board since the last draw (the whole board the first time)."""
        board = self.data()
        drawn = [song["id"] for row in board["rows"] for cell in row["cells"] for song in cell["songs"]]
        self.audio.show(drawn)  # only the players of songs on the board answer
        with self._drawing:
            shown = self.board.data
            version = int(shown.get("version", 0)) + 1
            if not shown or _shape(shown) != _shape(board):
                self.board.data = {**board, "version": version}
                return
            changed = {k: v for k, v in board.items() if k != "rows" and shown.get(k) != v}
            cells = [
                [r, c, cell]
                for r, row in enumerate(board["rows"])
                for c, cell in enumerate(row["cells"])
                if shown["rows"][r]["cells"][c] != cell
            ]
            if not changed and not cells:
                return
            shown.update(changed)  # in place: what a front end connecting later is sent whole
            for r, c, cell in cells:
                shown["rows"][r]["cells"][c] = cell
            shown["version"] = version
            self.board.send({"kind": "patch", "version": version, "set": changed, "cells": cells})

    def offers(self) -> Offers:
        """What the board shows now (`offered`): a Pick on every song drawn, Run while it can run and asks nothing,
        Confirm and Cancel while it asks, Compare once two are picked; a resync always."""
        with self._drawing:
            shown = self.board.data
            cards = [song for row in shown.get("rows", ()) for cell in row["cells"] for song in cell["songs"]]
            found = card_offers(cards, lambda _card: ["pick"]) | controls("resync")
            if shown.get("asking"):
                found |= controls("confirm", "cancel")
            elif shown.get("can_run"):
                found |= controls("run")
            if shown.get("can_compare"):
                found |= controls("compare")
        return found

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Intents from the board: run, confirm, cancel, pick (an id shown on it), compare: only what it shows."""
        if not isinstance(content, dict) or self.audio.handle(content):  # a player asking the kernel for bytes
            return
        kind = content.get("kind")
        if not allows(self.offers(), kind, target_of(content)):  # not on the board now: nothing done
            return
        if kind == "run":
            self.run(confirmed=False)
        elif kind == "confirm" and self.asking:  # only a question the board showed
            self._confirmed()
        elif kind == "cancel":
            self.cancel()
        elif kind == "pick" and isinstance(content.get("id"), str):
            self.pick(content["id"])
        elif kind == "compare":
            self.compare()
        elif kind == "resync":  # the front end missed a patch (no view was drawn when it came): the whole board
            with self._drawing:
                self.board.send_state("data")

    def _confirmed(self) -> None:
        if not self.ask.confirm("run", self._snapshot(), self._question):  # changed since: asked again
            self._draw()
            return
        try:
            self.run(confirmed=True)
        except Exception:  # said on the board by run()
            return

    def __repr__(self) -> str:
        batch = self.grid.batch
        status = batch.progress_line() if batch is not None else "not run yet"
        return f"{self.grid!r}\n{status}"


def _shape(board: dict[str, Any]) -> Any:
    """What a patch cannot change: the axes, the columns and each row's label and cell count."""
    rows = [(row["label"], len(row["cells"])) for row in board.get("rows", [])]
    return (board.get("row_axis"), board.get("column_axis"), board.get("columns"), rows)


def _cell_state(states: list[str]) -> str:
    """One word for a cell's takes: the least finished of them."""
    for state in ("not run", "pending", "elsewhere", "submitted", "unknown", "failed", "skipped"):
        if state in states:
            return ELSEWHERE if state == "elsewhere" else state
    return "complete" if states else "not run"


def grid_view(grid: Grid) -> GridView:
    """How a grid shown in a notebook is drawn (given as `Grid(view=...)` by `ipymusicgen.grid()` and the grid
    magic): its library keeps the votes."""
    from ..workspace.session import library

    try:
        opened = library()
    except Exception:  # no library to keep votes in: the comparison says so after the vote
        opened = None
    return GridView(grid, library=opened)


__all__ = ["GridBoard", "GridView", "grid_view"]
