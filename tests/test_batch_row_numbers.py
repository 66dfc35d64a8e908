"""One row numbering everywhere, from 1 (docs/batches.md): the batch's text and HTML tables, `to_pandas()`, its
failure message, the view's rows and a grid's run all name the same row by the same number."""

from __future__ import annotations

import re

import pytest

from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import BatchError, BatchFailedError, run_batch
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.widgets.batch import BatchView


def test_every_view_of_a_run_batch_counts_rows_from_1(client: MusicClient) -> None:
    pd = pytest.importorskip("pandas")
    rows = [{"style": f"row {n} of four", "mv": "MFV2.0"} for n in (1, 2, 3, 4)]
    batch = run_batch(client, rows, name="numbers", store=BatchStore(None))
    assert [r.state for r in batch.rows] == ["complete"] * 4
    table = batch.to_pandas()
    assert list(table.index) == [1, 2, 3, 4] and table.index.name == "row"
    assert all(f"row {n} of four" in table.loc[n, "request"] for n in (1, 2, 3, 4)), "row n holds the n-th request"
    shown = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^\s+(\d+) complete\s+'.*?row (\d) of four", repr(batch), re.M)
    }
    assert shown == {1: "1", 2: "2", 3: "3", 4: "4"}, repr(batch)
    cells = re.findall(r"<tr><td>(\d+)</td><td>complete</td><td>[^<]*row (\d) of four", batch._repr_html_())
    assert cells == [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4")]
    view = BatchView(batch)
    assert [row["index"] for row in view.data["rows"]] == [1, 2, 3, 4], "the view numbers rows as the tables do"
    assert isinstance(table, pd.DataFrame)


def test_a_failure_and_a_changed_row_are_named_by_the_same_number(client: MusicClient) -> None:
    store = BatchStore(None)
    batch = run_batch(client, [{"style": "first"}, {"style": "second"}], name="named", store=store)
    batch.rows[1].state, batch.rows[1].error = "failed", "the engine said no"
    with pytest.raises(BatchFailedError, match=r"row 2 failed: the engine said no"):
        batch.raise_for_failures()
    assert re.search(r"^\s+2 failed ", repr(batch), re.M) and "<tr><td>2</td><td>failed</td>" in batch._repr_html_()
    with pytest.raises(BatchError, match=r"Row 2 of batch 'named' is not the request first recorded"):
        run_batch(client, [{"style": "first"}, {"style": "changed"}], name="named", store=store)


def test_a_grid_run_shows_its_rows_from_1(client: MusicClient) -> None:
    import ipymusicgen

    plan = ipymusicgen.grid({"action": "auto"}, style=["lo-fi", "jazz"], client=client)
    batch = plan.run(wait=True)
    first, second = (line.split() for line in repr(plan).splitlines()[1:3])
    assert first[0] == "1." and second[0] == "2."
    assert list(batch.to_pandas().index) == [1, 2] and re.search(r"^\s+1 complete", repr(batch), re.M)
