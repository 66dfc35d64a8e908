"""A grid's table counts its rows from 1, as its list and the batch it runs do (docs/batches.md: rows are counted
from 1 everywhere): `grid.to_pandas()` row n is the list's 'n.' and the batch table's row n."""

from __future__ import annotations

import re

import pytest

from ipymusicgen import MusicClient


def test_a_grids_table_numbers_its_rows_as_its_list_and_its_batch(client: MusicClient) -> None:
    pytest.importorskip("pandas")
    import ipymusicgen

    plan = ipymusicgen.grid({"action": "auto", "instrumental": 1}, style=["harbour", "meadow", "ember"], client=client)
    before = plan.to_pandas()
    assert list(before.index) == [1, 2, 3] and before.index.name == "row", "planned, not run: still from 1"
    batch = plan.run(wait=True)
    table, runs = plan.to_pandas(), batch.to_pandas()
    listed = {int(line.split(".")[0]): line for line in repr(plan).splitlines()[1:4]}
    for n, style in ((1, "harbour"), (2, "meadow"), (3, "ember")):
        assert table.loc[n, "style"] == style and style in listed[n] and style in runs.loc[n, "request"]


def test_an_extended_grid_names_each_cell_by_its_batch_row(client: MusicClient) -> None:
    """A value added inside an axis keeps the recorded rows' places and appends the new cell, so grid order is not
    row order: the list, the table and the batch must still agree on which row is which."""
    pytest.importorskip("pandas")
    import ipymusicgen

    base = {"action": "auto", "instrumental": 0}  # a family of grids no other test runs (the store is shared)
    ipymusicgen.grid(base, style=["harbour", "ember"], client=client).run(wait=True)
    plan = ipymusicgen.grid(base, style=["harbour", "meadow", "ember"], client=client)
    assert [cell.index for cell in plan.cells] == [0, 2, 1], "meadow is appended as row 3"
    batch = plan.run(wait=True)
    runs, table = batch.to_pandas(), plan.to_pandas()
    listed = [line for line in repr(plan).splitlines() if re.match(r"\s+\d+\. ", line)]
    assert len(listed) == 3, repr(plan)
    for line in listed:
        number = int(line.split(".")[0])
        style = re.search(r"style='(\w+)'", line)[1]  # type: ignore[index]
        assert style in runs.loc[number, "request"] and table.loc[number, "style"] == style, (line, runs)
