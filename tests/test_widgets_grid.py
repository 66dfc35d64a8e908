"""The grid view over a real sandbox: rows × columns priced, Run (asked first when paid, sends what it showed),
the songs drawn in their cells as the batch cooks, two picked songs compared blind, a grid shown by IPython."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from helpers import ManualClock, advance_until_done, wait_until
from IPython.core.interactiveshell import InteractiveShell

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.lab.grid import Grid
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.compare import CompareView
from ipymusicgen.widgets.grid import GridView

GENERATE = "/v1/music/generate"


def plan(client: MusicClient) -> Grid:
    axes = {"style": ["lo-fi", "jazz"], "mv": ["MFV2.0", "MFV3.0"]}
    return Grid(client, {"action": "auto"}, axes, name=f"g{uuid.uuid4().hex[:8]}")


def finish(view: GridView, clock: ManualClock, sandbox: Sandbox) -> None:
    """Move the frozen sandbox clock on, a song's time at a time, each time the grid's batch has polled."""
    batch = view.grid.batch
    assert batch is not None
    advance_until_done(batch, clock, sandbox)
    wait_until(lambda: not view.board.data["running"], "the board drawn after the last round")


@pytest.fixture
def library(tmp_path) -> Iterator[Library]:  # type: ignore[no-untyped-def]
    opened = Library(tmp_path / "journal.sqlite3")
    yield opened
    opened.close()


def test_the_board_prices_each_cell_and_the_total_as_rows_by_columns(client: MusicClient, sandbox: Sandbox) -> None:
    view = GridView(plan(client))
    data = view.board.data
    assert data["row_axis"] == "style" and data["column_axis"] == "mv" and data["columns"] == ["MFV2.0", "MFV3.0"]
    assert [row["label"] for row in data["rows"]] == ["lo-fi", "jazz"]
    assert [[cell["estimate"] for cell in row["cells"]] for row in data["rows"]] == [[2, 3], [2, 3]]
    assert data["total"] == "4 rows, about 10 credits in all (estimate)"
    assert data["status"] == "Not run yet." and data["can_run"] and not data["can_compare"]
    assert sandbox.request_counts() == {}  # a plan sends nothing


def test_run_fills_the_cells_and_two_picked_songs_are_compared_blind(
    sandbox: Sandbox, clock: ManualClock, library: Library
) -> None:
    client = sandbox.client(journal=Journal(library.path))  # its songs journalled: the library keeps the vote
    view = GridView(plan(client), library=library)
    view.board._handle_custom_msg({"kind": "run"}, [])  # the free sandbox: the press is the decision
    batch = view.grid.batch
    assert batch is not None
    finish(view, clock, sandbox)
    assert batch.counts()["complete"] == 4 and sandbox.request_counts()[GENERATE] == 4
    cells = [cell for row in view.board.data["rows"] for cell in row["cells"]]
    assert all(cell["state"] == "complete" and len(cell["songs"]) == 2 for cell in cells)
    assert all(song["audio_url"].startswith("http://127.0.0.1") for cell in cells for song in cell["songs"])
    first, second = cells[0]["songs"][0]["id"], cells[3]["songs"][1]["id"]
    view.board._handle_custom_msg({"kind": "pick", "id": first}, [])
    view.board._handle_custom_msg({"kind": "pick", "id": "not-on-the-board"}, [])  # a forged id is ignored
    assert view.board.data["picked"] == [first] and not view.board.data["can_compare"]
    view.board._handle_custom_msg({"kind": "pick", "id": second}, [])
    assert view.board.data["can_compare"]
    view.board._handle_custom_msg({"kind": "compare"}, [])
    comparison = view.comparison
    assert isinstance(comparison, CompareView) and view.board.comparison is comparison
    assert view.board.get_state()["comparison"] == f"anywidget:{comparison.model_id}"  # drawn by the board itself
    assert {take.id for take in comparison.order} == {first, second}
    assert "title" not in str(comparison.data["players"])  # blind until the vote
    comparison.pick("A")
    assert [(r["winner"], r["loser"]) for r in library.compare_results()] == [
        (comparison.order[0].id, comparison.order[1].id)
    ]
    assert len(view.to_pandas()) == 4
    client.close()


def test_a_vote_on_songs_the_library_never_kept_is_said_not_kept(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, library: Library
) -> None:
    view = GridView(plan(client), library=library)  # the free sandbox: its songs stay out of the library
    view.run()
    finish(view, clock, sandbox)
    for cell in view.board.data["rows"][0]["cells"]:
        view.pick(cell["songs"][0]["id"])
    comparison = view.compare()
    assert comparison is not None
    assert comparison.pick("B")["recorded"] is False and "not kept" in comparison.data["note"]
    assert list(library.compare_results()) == []


def test_a_paid_run_asks_first_and_sends_only_on_confirm(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock
) -> None:
    view = GridView(plan(client), confirm=True)  # as with a real key
    view.board._handle_custom_msg({"kind": "confirm"}, [])  # a confirm nobody was asked for sends nothing
    view.board._handle_custom_msg({"kind": "run"}, [])
    asking = view.board.data["asking"]
    assert asking.startswith("Send 4 rows, about 10 credits (estimate); ") and "left (measured)" in asking
    assert sandbox.request_counts().get(GENERATE, 0) == 0
    view.board._handle_custom_msg({"kind": "cancel"}, [])
    assert view.board.data["asking"] == "" and view.grid.batch is None
    view.board._handle_custom_msg({"kind": "run"}, [])
    view.board._handle_custom_msg({"kind": "confirm"}, [])
    assert view.grid.batch is not None and view.board.data["asking"] == ""
    finish(view, clock, sandbox)
    assert sandbox.request_counts()[GENERATE] == 4


def test_a_budget_refusal_is_said_on_the_board_and_nothing_is_sent(client: MusicClient, sandbox: Sandbox) -> None:
    view = GridView(plan(client), budget=3)
    view.board._handle_custom_msg({"kind": "run"}, [])
    assert "budget" in view.board.data["note"].lower() and view.grid.batch is None
    assert sandbox.request_counts().get(GENERATE, 0) == 0


def test_a_run_from_code_is_followed_by_the_view(client: MusicClient, sandbox: Sandbox, clock: ManualClock) -> None:
    grid = plan(client)
    view = GridView(grid)
    grid.run()
    assert view.board.data["running"] or grid.batch.done
    finish(view, clock, sandbox)
    assert view.board.data["status"] == grid.batch.progress_line() and "4/4 done" in view.board.data["status"]


def test_ipython_draws_a_grid_as_its_view(sandbox_shell: InteractiveShell) -> None:
    import ipymusicgen

    grid = ipymusicgen.grid({"action": "auto"}, style=["lo-fi", "jazz"], name=f"g{uuid.uuid4().hex[:8]}")
    bundle, _ = sandbox_shell.display_formatter.format(grid)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert isinstance(grid.view, GridView) and grid.view.grid is grid
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == grid.view.model_id
    assert "2 rows, about" in bundle["text/plain"]
