"""Runs on one key at once: where other calls on the key overlap a run, its measured spend is unknown, so its budget
counts its own accepted calls at their price (never the other run's spend), and no run says a wrong measured price.
The same grid run twice at once: a row the other run is sending is "being sent elsewhere", and the grid shows each
cell's songs once either run has them."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import ManualClock, advance_until_done, wait_until

from ipymusicgen.batch.drivers import BatchError, run_batch
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.lab.grid import Grid
from ipymusicgen.sandbox import Sandbox

GENERATE = "/v1/music/generate"
TASKS = "/v1/music/tasks"


def test_a_grid_and_a_batch_at_once_on_one_key_neither_stop_early_nor_misprice(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock
) -> None:
    plan = Grid(client, {"action": "auto", "mv": "MFV3.0"}, {"style": ["a", "b", "c", "d"]}, name="overlap-grid")
    grid_batch = plan.run(budget=plan.estimate, concurrency=1)
    wait_until(lambda: sandbox.request_counts().get(GENERATE, 0) >= 1, "the grid's first create")
    rows = [{"style": f"row {n}", "mv": "MFV3.0"} for n in range(4)]
    other = run_batch(client, rows, name="overlap-batch", budget=plan.estimate, concurrency=1, wait=False)
    advance_until_done([grid_batch, other], clock, sandbox)
    for batch in (grid_batch, other):
        assert [r.state for r in batch.rows] == ["complete"] * 4, batch.progress_line()
        assert batch.real_cost_per_call in (None, 3), batch.progress_line()
        assert "6 per call" not in batch.progress_line()
        assert "(measured)" not in batch.progress_line().split("left")[0]  # no measured spend for an overlapped run
    assert sandbox.request_counts()[GENERATE] == 8


def test_a_run_alone_still_measures_its_spend_and_price(client: MusicClient, sandbox: Sandbox) -> None:
    batch = run_batch(client, [{"style": f"alone {n}", "mv": "MFV3.0"} for n in range(2)], name="alone", wait=True)
    assert batch.real_cost_per_call == 3 and "6 credits spent (measured)" in batch.progress_line()


def test_the_same_grid_run_twice_at_once_follows_the_rows_the_other_run_sends(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.widgets.grid import GridView

    gate = threading.Event()
    real = client.generate

    def held(*args: object, **kwargs: object) -> object:
        gate.wait(30)  # the first run's creates are "being sent" until the test lets them through
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "generate", held)
    axes = {"style": ["a", "b", "c"]}
    first = Grid(client, {"action": "auto", "mv": "MFV2.0"}, axes, name="twice")
    one = first.run(concurrency=3)
    wait_until(lambda: {r.state for r in one.store.rows("twice").values()} == {"sending"}, "the first run's claims")
    second = Grid(client, {"action": "auto", "mv": "MFV2.0"}, axes, name="twice")  # the cell run again
    view = GridView(second)
    two = second.run(concurrency=3)
    assert [r.state for r in two.rows] == ["elsewhere"] * 3, two.progress_line()
    assert "3 being sent elsewhere" in two.progress_line()
    assert all("being sent elsewhere" in (r.error or "") for r in two.rows)
    assert {c["state"] for row in view.data()["rows"] for c in row["cells"]} == {"being sent elsewhere"}
    gate.set()
    advance_until_done([one, two], clock, sandbox)
    assert sandbox.request_counts()[GENERATE] == 3  # nothing sent twice
    assert [r.state for r in two.rows] == ["complete"] * 3 and [r.ids for r in two.rows] == [r.ids for r in one.rows]
    wait_until(lambda: all(len(c["songs"]) == 2 for row in view.data()["rows"] for c in row["cells"]), "songs shown")
    assert {c["state"] for row in view.data()["rows"] for c in row["cells"]} == {"complete"}
    view.close()


def test_a_row_another_kernel_is_sending_is_followed_until_it_has_songs(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, tmp_path: Path
) -> None:
    """Another live process holds the row "sending": this run says so, sends nothing, and takes the songs once that
    process records their ids."""
    from ipymusicgen.storage.batches import BatchStore
    from ipymusicgen.storage.owner import process_started

    store = BatchStore(tmp_path / "batches.sqlite3")
    rows = [{"style": "kept elsewhere", "mv": "MFV2.0"}]
    with pytest.raises(BatchError, match="budget"):
        run_batch(client, rows, name="shared", store=store, budget=0)  # records the row (refused: nothing sent)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with store._write() as db:  # "another kernel" claims it, as its own claim() would
            db.execute("UPDATE batch_rows SET state = 'sending', attempts = 1, owner_pid = ?, owner_start = ?"
                       " WHERE batch = 'shared'", (other.pid, process_started(other.pid)))  # fmt: skip
        batch = run_batch(client, rows, name="shared", store=store, wait=False)
        assert [r.state for r in batch.rows] == ["elsewhere"] and f"process {other.pid}" in (batch.rows[0].error or "")
        made = client.generate(**rows[0])  # what the other kernel sent, and then records
        store.set_state("shared", 0, "submitted", ids=list(made.ids))
        advance_until_done([batch], clock, sandbox)
        assert batch.rows[0].state == "complete" and batch.rows[0].ids == list(made.ids)
        assert sandbox.request_counts()[GENERATE] == 1  # this run sent nothing
    finally:
        other.kill()
        other.wait()
