"""Prompt grids: the cross product as priced rows, one named batch (re-runs send nothing), results as a table,
and `%%musicgen_grid` in a real IPython shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen import grid
from ipymusicgen.batch.drivers import BatchError
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.lab.grid import MAX_CELLS, Grid
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal

GENERATE = "/v1/music/generate"


def test_the_cross_product_is_priced_cell_by_cell(client: MusicClient) -> None:
    plan = Grid(client, {"action": "auto"}, {"style": ["lo-fi", "jazz", "folk"], "mv": ["MFV2.0", "MFV3.0"]}, repeat=2)
    assert len(plan.cells) == 12 and len(plan.rows) == 12
    assert plan.cells[0].params == {"style": "lo-fi", "mv": "MFV2.0"} and plan.cells[1].take == 2
    assert {c.estimate for c in plan.cells if c.params["mv"] == "MFV2.0"} == {2}
    assert {c.estimate for c in plan.cells if c.params["mv"] == "MFV3.0"} == {3}
    assert plan.estimate == 6 * 2 + 6 * 3
    assert plan.name.startswith("grid-") and plan.name == Grid(client, {"action": "auto"}, plan.axes, repeat=2).name
    assert plan.name != Grid(client, {"action": "auto"}, plan.axes, repeat=1).name
    text = repr(plan)
    assert "style (3) × mv (2) × 2 take(s) = 12 rows, about 30 credits" in text
    assert "<td>~30</td>" in plan._repr_html_() and "&lt;" not in plan._repr_html_()


@pytest.mark.parametrize(
    ("base", "axes", "repeat", "words"),
    [
        ({}, {}, 1, "at least one axis"),
        ({}, {"style": "lo-fi"}, 1, "a list of values"),
        ({}, {"style": []}, 1, "at least one value"),
        ({"style": "x"}, {"style": ["a", "b"]}, 1, "both in base and as an axis"),
        ({}, {"style": ["a"]}, 0, "repeat"),
        ({}, {"style": [str(i) for i in range(MAX_CELLS + 1)]}, 1, "make it smaller"),
        ({"action": "custom"}, {"title": ["ok", "x" * 81]}, 1, "row 2: title: at most 80"),
        ({}, {"mv": ["MFV2.0", "MFV9.9"]}, 1, "row 2: mv"),
    ],
)
def test_a_bad_grid_is_refused_whole_before_anything_is_priced_or_sent(
    client: MusicClient, sandbox: Sandbox, base: dict[str, Any], axes: dict[str, Any], repeat: int, words: str
) -> None:
    with pytest.raises(BatchError, match=words.replace("(", r"\(")):
        Grid(client, base, axes, repeat=repeat)
    assert sandbox.request_counts() == {}


def test_a_grid_runs_as_one_named_batch_and_a_rerun_sends_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    axes = {"style": ["lo-fi", "jazz"], "mv": ["MFV2.0", "MFV3.0"]}
    with sandbox.client(journal=Journal(path), archive=False) as client:
        plan = Grid(client, {"action": "auto"}, axes)
        assert [r["state"] for r in plan.results()] == ["not run"] * 4
        batch = plan.run(wait=True)
        assert batch.name == plan.name and batch.counts()["complete"] == 4
        assert sandbox.request_counts()[GENERATE] == 4
        again = Grid(client, {"action": "auto"}, axes)
        again.run(wait=True)
        assert sandbox.request_counts()[GENERATE] == 4  # the same grid again: nothing sent twice
    results = plan.results()
    assert [(r["style"], r["mv"]) for r in results] == [
        ("lo-fi", "MFV2.0"), ("lo-fi", "MFV3.0"), ("jazz", "MFV2.0"), ("jazz", "MFV3.0")
    ]  # fmt: skip
    assert all(len(r["ids"]) == 2 and r["state"] == "complete" for r in results)
    with Library(path) as library:
        library.rate(results[1]["ids"][0], 5)
        library.rate(results[1]["ids"][1], 2)
        table = plan.to_pandas(library)
    assert list(table.columns[:2]) == ["style", "mv"] and table["stars"].fillna(0).tolist() == [0, 3.5, 0, 0]
    with Library(path) as library:
        assert [r["stars"] for r in plan.results(library)] == [None, 3.5, None, None]


def test_the_grid_magic_plans_runs_and_keeps_the_grid(sandbox_shell: InteractiveShell, sandbox: Sandbox) -> None:
    sandbox_shell.user_ns["third"] = "folk"
    cell = "action: auto\nstyle: lo-fi | jazz | {third}\nmv: MFV2.0\ninstrumental: 1\n"
    with capture_output() as shown:
        sandbox_shell.run_cell_magic("musicgen_grid", "--wait --no-watch --name tour", cell)
    plan = sandbox_shell.user_ns["_grid"]
    assert isinstance(plan, Grid) and plan.name == "tour" and [c.params["style"] for c in plan.cells] == [
        "lo-fi", "jazz", "folk"
    ]  # fmt: skip
    assert all(c.request["instrumental"] == 1 for c in plan.cells)
    assert "3 rows, about 6 credits" in shown.stdout or any("about 6 credits" in str(o.data) for o in shown.outputs)
    assert sandbox.request_counts()[GENERATE] == 3 and plan.batch is not None and plan.batch.done
    for bad, words in (
        ("style lo-fi | jazz", "field: value"),
        ("style: lo-fi\nmv: MFV2.0", "at least one axis"),
        ("style: a | b\nstyle: c | d", "given twice"),
        ("style: a | ", "empty value"),
        ("action: custom\ntitle: ok | " + "x" * 81, "title: at most 80"),
    ):
        with pytest.raises(UsageError, match=words):
            sandbox_shell.run_cell_magic("musicgen_grid", "--no-watch", bad)
    assert sandbox.request_counts()[GENERATE] == 3


def test_the_package_offers_grid_on_the_shared_client() -> None:
    import ipymusicgen

    assert ipymusicgen.grid is grid and "grid" in ipymusicgen.__all__
