"""Grids and batches at the edges of their values: 0 is a value, NaN is refused outside DataFrames, a huge grid is
refused from its axis lengths before any cross product is built."""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.batch.drivers import BatchError, validate_rows
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.lab.grid import MAX_CELLS, Grid
from ipymusicgen.notebook.batch_lines import parse_grid
from ipymusicgen.sandbox import Sandbox

GENERATE = "/v1/music/generate"
NAN = float("nan")


# -- 10. a 0 is a value ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field", "values"),
    [
        ("instrumental: 0 | 1", "instrumental", [0, 1]),
        ("is_auto: 1 | 0", "is_auto", [1, 0]),
        ("continue_at: 0 | 30", "continue_at", [0, 30]),
        ("continue_at: 0.0 | 1.5", "continue_at", [0.0, 1.5]),
    ],
)
def test_a_grid_value_of_0_is_a_value_not_empty(line: str, field: str, values: list[Any]) -> None:
    base, axes = parse_grid(line, {})
    assert base == {} and axes == {field: values}


def test_an_on_off_axis_runs_through_the_magic(sandbox_shell: InteractiveShell, sandbox: Sandbox) -> None:
    cell = "action: auto\nstyle: lo-fi\nmv: MFV2.0\ninstrumental: 0 | 1\n"
    with capture_output():
        sandbox_shell.run_cell_magic("musicgen_grid", "--wait --no-watch --name on-off", cell)
    plan = sandbox_shell.user_ns["_grid"]
    assert [c.request["instrumental"] for c in plan.cells] == [0, 1]
    assert sandbox.request_counts()[GENERATE] == 2 and plan.batch.counts()["complete"] == 2


def test_a_v2_is_auto_axis_and_a_continue_at_axis_of_0_are_priced(client: MusicClient) -> None:
    auto = Grid(client, {"model_version": "v4.5", "prompt": "rain"}, {"is_auto": [1, 0]})
    assert [c.request["is_auto"] for c in auto.cells] == [1, 0]
    extend = Grid(client, {"action": "extend", "continue_song_id": "abc", "style": "x"}, {"continue_at": [0, 30]})
    assert [c.request["continue_at"] for c in extend.cells] == [0, 30]


def test_an_empty_grid_value_is_still_refused() -> None:
    from IPython.core.error import UsageError

    for text in ("style: a | ", "instrumental: | 1", "continue_at: 0 ||"):
        with pytest.raises(UsageError, match="empty value"):
            parse_grid(text, {})


# -- 11. NaN is refused outside a DataFrame ---------------------------------------------------------------


def test_a_nan_grid_cell_is_refused_naming_its_field(client: MusicClient, sandbox: Sandbox) -> None:
    base = {"action": "extend", "continue_song_id": "abc", "style": "x"}
    with pytest.raises(BatchError, match="row 1: continue_at"):
        Grid(client, base, {"continue_at": [NAN, 30]})
    with pytest.raises(BatchError, match="continue_at"):
        Grid(client, {**base, "continue_at": NAN}, {"title": ["a", "b"]})
    assert sandbox.request_counts() == {}


@pytest.mark.parametrize(
    "row",
    [
        {"action": "extend", "continue_song_id": "abc", "continue_at": NAN},
        {"action": "auto", "style": "x", "instrumental": NAN},
        {"v2": True, "is_auto": 1, "model_version": "v4.5", "prompt": "p", "continue_at": NAN},
    ],
)
def test_a_nan_in_a_list_of_dicts_is_refused_as_a_single_call_refuses_it(row: dict[str, Any]) -> None:
    field = next(k for k, v in row.items() if isinstance(v, float) and math.isnan(v))
    with pytest.raises(BatchError, match=f"row 2: {field}"):
        validate_rows([{"action": "auto", "style": "ok"}, row])


def test_a_numpy_nan_in_a_list_of_dicts_is_refused_too() -> None:
    import numpy as np

    with pytest.raises(BatchError, match="row 1: continue_at"):
        validate_rows([{"action": "extend", "continue_song_id": "abc", "continue_at": np.float64("nan")}])


def test_nan_in_a_dataframe_still_means_not_given() -> None:
    import pandas as pd

    frame = pd.DataFrame([{"action": "auto", "style": "a", "instrumental": 1}, {"action": "auto", "style": "b"}])
    frame["mv"] = ["MFV3.0", None]
    rows = validate_rows(frame)  # row 2's instrumental is NaN (a float column), its mv None: both not given
    assert rows[0].request.to_payload()["instrumental"] == 1
    assert rows[1].request.to_payload() == validate_rows([{"action": "auto", "style": "b"}])[0].request.to_payload()
    zero = validate_rows(pd.DataFrame([{"action": "auto", "style": "a", "instrumental": 0}]))
    assert zero[0].request.to_payload()["instrumental"] == 0  # a 0 in a DataFrame is a value too


# -- 12. a huge grid is refused from its axis lengths -------------------------------------------------------


def test_two_10000_value_axes_are_refused_at_once_without_building_the_product(client: MusicClient) -> None:
    styles = [f"s{i}" for i in range(10_000)]
    titles = [f"t{i}" for i in range(10_000)]
    tracemalloc.start()
    try:
        with pytest.raises(BatchError, match=f"style: 10000 values in one axis, more than the {MAX_CELLS} rows"):
            Grid(client, {"action": "custom"}, {"style": styles, "title": titles})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"refusing the grid allocated {peak} bytes"


def test_a_huge_lazy_axis_is_refused_without_reading_it_all(client: MusicClient) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(BatchError, match=f"style: more than {MAX_CELLS} values in one axis"):
            Grid(client, {"action": "auto"}, {"style": (f"s{i}" for i in range(10**9))})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


def test_axes_each_under_the_cap_are_refused_from_their_lengths(client: MusicClient) -> None:
    axes = {"style": [f"s{i}" for i in range(150)], "title": [f"t{i}" for i in range(150)], "mv": ["MFV2.0"] * 3}
    with pytest.raises(BatchError, match=f"22500 rows, more than {MAX_CELLS}"):
        Grid(client, {"action": "custom"}, axes)


def test_repeat_counts_in_the_size_check(client: MusicClient) -> None:
    with pytest.raises(BatchError, match=f"{MAX_CELLS + 20} rows"):
        Grid(client, {"action": "auto"}, {"style": [f"s{i}" for i in range(11)], "mv": ["MFV2.0", "MFV3.0"]},
             repeat=10)  # fmt: skip


def test_the_magic_refuses_a_huge_grid_as_a_usage_error(sandbox_shell: InteractiveShell, sandbox: Sandbox) -> None:
    from IPython.core.error import UsageError

    sandbox_shell.user_ns["many"] = " | ".join(f"s{i}" for i in range(300))
    cell = "action: auto\nstyle: " + " | ".join(f"s{i}" for i in range(300)) + "\nmv: MFV2.0 | MFV3.0\n"
    with pytest.raises(UsageError, match="more than"):
        sandbox_shell.run_cell_magic("musicgen_grid", "--no-watch", cell)
    assert sandbox.request_counts() == {}


# -- 16. an extended grid keeps its batch ------------------------------------------------------------------


def test_an_extended_grid_keeps_its_rows_and_a_shrunk_one_is_a_new_batch(client: MusicClient, sandbox: Sandbox) -> None:
    import uuid

    base = {"action": "auto", "mv": "MFV2.0", "gender": "female", "instrumental": 0}
    axis = [f"{uuid.uuid4().hex[:6]} {n}" for n in range(3)]
    first = Grid(client, base, {"style": axis[:2]}, repeat=2)
    first.run(wait=True)
    assert sandbox.request_counts()[GENERATE] == 4
    grown = Grid(client, base, {"style": [axis[2], *axis[:2]]}, repeat=2)  # a value added, first
    assert grown.name == first.name
    assert [c.index for c in grown.cells] == [4, 5, 0, 1, 2, 3]  # recorded rows keep their places
    assert grown.rows[:4] == first.rows
    batch = grown.run(wait=True)
    assert sandbox.request_counts()[GENERATE] == 6 and batch.counts()["complete"] == 6
    assert [r["ids"] for r in grown.results()][2:] == [r["ids"] for r in first.results()]
    shrunk = Grid(client, base, {"style": axis[:1]}, repeat=2)
    assert shrunk.name != first.name  # not an extension: its own batch, every row sent
    assert Grid(client, base, {"style": axis[:2]}, repeat=1).name != first.name  # the repeat is part of the name


@pytest.mark.parametrize("typed", ["nan", "inf", "-inf"])
def test_a_nan_or_infinite_typed_in_a_grid_cell_is_refused_naming_its_field(
    sandbox_shell: InteractiveShell, sandbox: Sandbox, typed: str
) -> None:
    from IPython.core.error import UsageError

    cell = f"action: extend\ncontinue_song_id: abc\nstyle: x\ncontinue_at: {typed} | 30\n"
    with pytest.raises(UsageError, match="row 1: continue_at"):
        sandbox_shell.run_cell_magic("musicgen_grid", "--no-watch", cell)
    assert sandbox.request_counts() == {}


def test_a_grid_that_is_not_an_extension_says_in_its_plan_that_its_rows_are_sent_again(
    client: MusicClient, sandbox: Sandbox
) -> None:
    import uuid

    from ipymusicgen.widgets.grid import GridView

    base = {"action": "auto", "mv": "MFV2.0", "gender": "male"}
    axis = [f"{uuid.uuid4().hex[:6]} {n}" for n in range(3)]
    Grid(client, base, {"style": axis[:2]}).run(wait=True)
    grown = Grid(client, base, {"style": axis})
    assert grown.resend_note == ""  # an extension: only the new cell is sent
    changed = Grid(client, base, {"style": [axis[0], axis[2]]})  # axis[1] taken away
    note = "all 2 rows will be sent as a new batch, 1 of them sent before there"
    assert note in changed.resend_note and note in repr(changed) and note in changed._repr_html_()
    assert note in GridView(changed).board.data["total"]
    changed.run(wait=True)
    assert sandbox.request_counts()[GENERATE] == 4  # 2, then 2 again: as the plan said
    assert Grid(client, base, {"style": [axis[0], axis[2]]}).resend_note == ""  # its own batch ran: nothing again
