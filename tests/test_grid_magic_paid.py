"""`%%musicgen_grid` with a key that may cost money (a sandbox given its own key plays a paid service): the cell
shows its plan and cost and sends only after Run (and Confirm) in its view, unless it gives --budget or --yes; an
extended grid sends only its new cells."""

from __future__ import annotations

import pytest
from helpers import wait_until
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.lab.grid import Grid
from ipymusicgen.sandbox import Sandbox

KEY = "paid-grid-key"
PAID_SANDBOX = {"keys": {KEY: 1000}, "stage_seconds": 0.05, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`, `conftest.paid_shell`): this module's own key and credits."""
GENERATE = "/v1/music/generate"
CELL = "action: auto\nmv: MFV2.0\nstyle: lo-fi | jazz\n"


def creates(service: Sandbox) -> int:
    return service.request_counts().get(GENERATE, 0)


def test_a_paid_grid_cell_shows_its_plan_and_sends_only_after_run_in_its_view(
    paid_shell: InteractiveShell, paid_sandbox: Sandbox
) -> None:
    with capture_output() as shown:
        paid_shell.run_cell_magic("musicgen_grid", "--concurrency 2", CELL)
    plan = paid_shell.user_ns["_grid"]
    assert isinstance(plan, Grid) and plan.batch is None and creates(paid_sandbox) == 0
    assert "Not sent: 2 rows, about 4 credits (estimate). Press Run in the grid's view" in shown.stdout
    view = plan.view
    assert view.concurrency == 2 and view.board.data["can_run"]
    view.board._handle_custom_msg({"kind": "run"}, [])  # Run: the view asks, as it does for any paid grid
    assert creates(paid_sandbox) == 0 and view.asking.startswith("Send 2 rows, about 4 credits")
    view.board._handle_custom_msg({"kind": "confirm"}, [])
    assert plan.batch is not None
    plan.batch.wait(60)
    assert creates(paid_sandbox) == 2 and plan.batch.counts()["complete"] == 2
    view.close()


@pytest.mark.parametrize("option", ["--budget 10", "--yes"])
def test_a_paid_grid_cell_with_a_budget_or_yes_sends_at_once(
    paid_shell: InteractiveShell, paid_sandbox: Sandbox, option: str
) -> None:
    with capture_output() as shown:
        paid_shell.run_cell_magic("musicgen_grid", f"{option} --wait --no-watch", CELL)
    plan = paid_shell.user_ns["_grid"]
    assert "Not sent" not in shown.stdout and plan.batch is not None and plan.batch.done
    assert creates(paid_sandbox) == 2 and plan.batch.budget == (10 if "budget" in option else None)


def test_without_a_view_the_plan_says_how_to_send_it(paid_shell: InteractiveShell, paid_sandbox: Sandbox) -> None:
    with capture_output() as shown:
        paid_shell.run_cell_magic("musicgen_grid", "--no-watch -o mine", CELL)
    assert "Not sent: 2 rows, about 4 credits (estimate). Run mine.run() to send it" in shown.stdout
    assert creates(paid_sandbox) == 0 and paid_shell.user_ns["mine"].batch is None


def test_an_extended_grid_sends_only_its_new_cells(paid_shell: InteractiveShell, paid_sandbox: Sandbox) -> None:
    with capture_output():
        paid_shell.run_cell_magic("musicgen_grid", "--yes --wait --no-watch", CELL)
    first = paid_shell.user_ns["_grid"]
    assert creates(paid_sandbox) == 2
    with capture_output() as shown:
        paid_shell.run_cell_magic("musicgen_grid", "--yes --wait --no-watch", CELL.replace("jazz", "jazz | folk"))
    extended = paid_shell.user_ns["_grid"]
    assert creates(paid_sandbox) == 3, shown.stdout  # only folk was sent
    results = {r["style"]: r for r in extended.results()}
    assert all(r["state"] == "complete" and len(r["ids"]) == 2 for r in results.values())
    assert [results[s]["ids"] for s in ("lo-fi", "jazz")] == [r["ids"] for r in first.results()]
    wait_until(lambda: extended.batch.done, "the extended grid done")
