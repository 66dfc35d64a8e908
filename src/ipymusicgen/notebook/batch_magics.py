"""`%%musicgen_batch`: many songs from a cell of `%musicgen` lines, or from a list or DataFrame variable.

Each body line is what you would type after `%musicgen` (options and text, `{var}` included), parsed by
the `%musicgen` magic's own parser, so a batch line means exactly what the single line means. Problems are
one-line `UsageError`s naming the line; nothing is sent until every row is valid (the batch engine checks
again, with the budget). The batch runs in the background; its progress view shows above the songs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from IPython.utils.process import arg_split

from ..client.waiting import archive_notes
from ..errors import MusicGenError, dashed_option, one_line, unknown_option
from ..models.dollar_prices import budget_option
from ..workspace import session
from .args import unregister_magics
from .batch_lines import parse_grid, parse_lines, rows_from_variable
from .display import text as one_line_text

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..batch.drivers import Batch

REGISTRY_NAME = "BatchMagics"


def _parse_line(magic: Any, line: str) -> Any:
    """The magic's own options (it takes no text): a typo (`--concurency`, `—budget`) is named with the closest
    option, not listed by argparse as 'unrecognized arguments' with its value."""
    parser = magic.parser
    args, extra = parser.parse_known_args(arg_split(line))  # as parse_argstring splits
    if extra:
        typed = next((t.split("=", 1)[0] for t in extra if t.startswith("-") or dashed_option(t)), None)
        options = [name for action in parser._actions for name in action.option_strings]
        said = unknown_option(typed, options) if typed else f"unexpected text on the magic line: {' '.join(extra)}"
        raise UsageError(said)
    return args


@magics_class
class BatchMagics(Magics):
    """The `%%musicgen_batch` magic (registered by `%load_ext ipymusicgen` next to `%musicgen`)."""

    @no_var_expand
    @line_cell_magic
    @magic_arguments()
    @argument("--name", help="the batch's name: re-running with it sends only rows never sent")
    @argument("--concurrency", type=int, default=3, help="rows in flight at once (default 3)")
    @argument("--budget", type=budget_option, default=None, help="most the batch may spend: credits, or dollars ('$5')")
    @argument("--yes", action="store_true", help="send without asking, even with a key that may cost money")
    @argument("--from", dest="source", metavar="VAR", help="a DataFrame or list of dicts, one row a request")
    @argument("--no-watch", action="store_true", help="no song cards (the progress view still shows)")
    @argument("--wait", action="store_true", help="block until every row is done")
    @argument("-o", "--out", metavar="VAR", help="keep the Batch in this variable")
    def musicgen_batch(self, line: str, cell: str | None = None) -> Batch | None:
        """Make many songs: one `%musicgen` line per row, or `--from VAR` (a DataFrame or list of dicts).

        %%musicgen_batch --name album --concurrency 3 --budget 30
        --style "lo-fi" rain on the window
        --title "Dawn" --style "folk" {verse}

        Every row is validated first (a bad one refuses the batch, naming its line); the estimate is
        checked against --budget and the credits left; then at most --concurrency rows run at once.
        With a key that may cost money the cell only shows its rows and cost: Send in its view
        (`_batch_view`) sends them (asking once more, as every paid control does), unless the cell
        gives --budget or --yes. Re-running the same cell (same --name, or none: derived from the
        rows) sends only rows never sent, follows the submitted ones and lists doubtful ones without
        resending them.
        """
        try:
            args = _parse_line(self.musicgen_batch, line)
        except ValueError as exc:  # shlex: "No closing quotation"
            raise UsageError(f"%%musicgen_batch: {one_line(exc)} (close the quote you opened)") from None
        if args.source and cell and cell.strip():
            raise UsageError("use either --from VARIABLE or lines in the cell, not both")
        if args.source:
            requests = rows_from_variable(args.source, self.shell.user_ns)
        else:
            requests = parse_lines(cell or "", self.shell)
        from ..batch.drivers import run_batch

        if self._planned(requests, args):
            return None

        def start(client: Any, on_update: Any) -> Batch:
            return run_batch(
                client, requests, name=args.name, concurrency=args.concurrency, budget=args.budget, wait=False,
                on_update=on_update,
            )  # fmt: skip

        batch = self._start(start, args)
        if args.out:
            self.shell.user_ns[args.out] = batch
        self._finish(batch, args)
        return batch if cell is None else None

    @no_var_expand
    @line_cell_magic
    @magic_arguments()
    @argument("--name", help="the grid's batch name: re-running with it sends only rows never sent")
    @argument("--repeat", type=int, default=1, help="takes of each cell (default 1)")
    @argument("--concurrency", type=int, default=3, help="rows in flight at once (default 3)")
    @argument("--budget", type=budget_option, default=None, help="most the grid may spend: credits, or dollars ('$5')")
    @argument("--yes", action="store_true", help="send without asking, even with a key that may cost money")
    @argument("--no-watch", action="store_true", help="no song cards (the progress view still shows)")
    @argument("--wait", action="store_true", help="block until every row is done")
    @argument("-o", "--out", metavar="VAR", help="keep the Grid in this variable (default: _grid)")
    def musicgen_grid(self, line: str, cell: str | None = None) -> None:
        """A prompt grid: every combination of the `|` choices, each `--repeat` times, as one named batch.

        %%musicgen_grid --repeat 2 --budget 40
        action: auto
        style: lo-fi | jazz | folk
        mv: MFV2.0 | MFV3.0

        The plan shows each cell's estimate and the total first. With a key that may cost money the cell only
        shows the plan: Run in its view sends it (asking once more, as the view does), unless the cell gives
        --budget or --yes; the budget and the credits left are checked as for any batch. Re-running the cell
        sends nothing twice. `_grid.to_pandas()` gives the results (cell, take, ids, state, stars).
        """
        try:
            args = _parse_line(self.musicgen_grid, line)
        except ValueError as exc:
            raise UsageError(f"%%musicgen_grid: {one_line(exc)} (close the quote you opened)") from None
        base, axes = parse_grid(cell or "", self.shell.user_ns)
        try:
            view = None if args.no_watch else _grid_view  # the plan is drawn as its grid view (cards in cells)
            plan = session.current_workspace().grid(base, repeat=args.repeat, name=args.name, view=view, **axes)
        except MusicGenError as exc:
            raise UsageError(one_line(exc)) from None
        out = args.out or "_grid"
        self.shell.user_ns[out] = plan
        from ..config import PaidAsk

        cell = PaidAsk.of(plan.client.settings, False if args.yes or args.budget is not None else None)
        if not cell.press("cell", (plan.name, plan.estimate), lambda _changed: "not sent"):  # the batch cell's rule
            view = plan.view if not args.no_watch else None
            if view is not None:  # its Run sends what the cell planned, with the cell's options
                view.concurrency = args.concurrency
            display(plan)
            how = "Press Run in the grid's view to send it" if view is not None else f"Run {out}.run() to send it"
            if plan.resend_note:
                print(plan.resend_note, flush=True)
            print(f"Not sent: {len(plan.cells)} rows, about {plan.estimate} credits (estimate). {how}, or give the "
                  "cell --budget N or --yes.", flush=True)  # fmt: skip
            return
        display(plan)
        batch = self._start(
            lambda _client, on_update: plan.run(budget=args.budget, concurrency=args.concurrency, on_update=on_update),
            args,
            watch=False,  # the grid view shows the songs in their cells
        )
        self._finish(batch, args)

    def _planned(self, requests: Any, args: Any) -> bool:
        """With a key that may cost money and neither --budget nor --yes (the `PaidAsk` rule, the grid cell's
        too): show the rows and their cost unsent in a batch view whose Send asks, then sends; True when shown."""
        from ..batch.drivers import run_batch, validate_rows
        from ..config import PaidAsk
        from ..models import costs
        from ..widgets.batch import PricedBatch

        try:
            client = session.get_client()
            rows = validate_rows(requests, allow_unknown_models=client.settings.allow_unknown_models)
            total = costs.estimate_total(r.request for r in rows)
        except (MusicGenError, costs.CostTableError) as exc:
            raise UsageError(one_line(exc)) from None
        priced = PricedBatch(tuple(rows), total, None, args.name, args.concurrency)
        cell = PaidAsk.of(client.settings, False if args.yes or args.budget is not None else None)
        said = f"Not sent: {priced.rows_words}, about {total} credits (estimate)"
        if cell.press("cell", priced.to_payload(), lambda _changed: said):
            return False
        watcher = None if args.no_watch else _watcher(client)
        view = _view(watcher)

        def start() -> Batch:
            return run_batch(
                client, [r.request for r in priced.rows], name=priced.name, concurrency=priced.concurrency,
                wait=False, on_update=view.update,
            )  # fmt: skip

        view.plan(priced, client, start)
        self.shell.user_ns["_batch_view"] = view
        display(view)
        if watcher is not None:
            display(watcher)
        print(f"{said}. Press Send in the batch's view (_batch_view) to send it, or give the cell --budget N or "
              "--yes.", flush=True)  # fmt: skip
        return True

    def _start(self, run: Callable[[Any, Any], Batch], args: Any, *, watch: bool = True) -> Batch:
        """Start a batch in the background with its progress view and song cards shown; errors as UsageError."""
        view = None
        try:
            client = session.get_client()
            watcher = None if args.no_watch or not watch else _watcher(client)
            view = _view(watcher)
            batch = run(client, view.update if view is not None else None)
        except MusicGenError as exc:
            raise UsageError(one_line(exc)) from None
        if view is not None:
            view.update(batch)
            display(view)
        if watcher is not None:
            display(watcher)
        return batch

    @staticmethod
    def _finish(batch: Batch, args: Any) -> None:
        """With --wait: block until the batch ends, then print its progress line once (the view above shows it
        live, with the ETA; the printed line is what a saved notebook or a text-only front end keeps)."""
        if args.wait:
            batch.wait()
            print(batch.progress_line(), flush=True)
            if batch.client is not None:  # and their archive (bounded), so waveform(id) in the next cell finds it
                for note in archive_notes(batch.client, batch.records, None, time.monotonic()):
                    print(one_line_text(note), flush=True)


def _watcher(client: Any) -> Any:
    from ..widgets.ui import UI

    return UI().watcher(client=client)  # a lone watcher: its card's Extend opens a studio


def _view(watcher: Any) -> Any:
    from ..widgets.ui import UI

    return UI().batch_view(watcher)


def register(ipython: InteractiveShell) -> None:
    """Register `%%musicgen_batch` once (called by `ipymusicgen.notebook.magics.load_ipython_extension`)."""
    if not isinstance(ipython.magics_manager.registry.get(REGISTRY_NAME), BatchMagics):
        ipython.register_magics(BatchMagics(shell=ipython))


def unregister(ipython: InteractiveShell) -> None:
    """Remove `%%musicgen_batch` (on `%unload_ext ipymusicgen`)."""
    unregister_magics(ipython, BatchMagics)


def _grid_view(plan: Any) -> Any:
    from ..widgets.ui import grid_view

    return grid_view(plan)
