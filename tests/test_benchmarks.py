"""Structural smoke test of the benchmark runner: it runs, and reports every figure as numbers.

No timing is asserted (speed belongs to `python -m benchmarks` itself); the checks are about shape:
every figure present, every row a finite number with its target and verdict, the table printed.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import __main__ as runner
from benchmarks._common import Row, interleaved
from benchmarks.bench_watcher import expected_requests

pytestmark = [
    pytest.mark.slow,  # runs the benchmarks
    # the run is bounded by its own 900 s below; pyproject's 300 s per test would cut it first (a cold run
    # beside a busy worker and a hog took over 300 s once xdist kept the module's tests on one worker)
    pytest.mark.timeout(960),
]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """`python -m benchmarks --quick` once for the module: its JSON and its printed table."""
    target = tmp_path_factory.mktemp("bench") / "benchmarks.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,  # 283 s at load 6 on two CPUs: a run that slow is still a run, not a failure
        check=False,
    )
    errors = {n: f["error"] for n, f in json.loads(target.read_text())["figures"].items()} if target.exists() else {}
    assert done.returncode == 0, ({n: e for n, e in errors.items() if e}, done.stderr[-3000:])
    return json.loads(target.read_text()), done.stdout


FIGURES = [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17]
"""1-7 the foundation's, 10 batches (issue 14), 11 the library (issue 15), 12 the front end in a browser (issue 16),
13 the agent server (issue 21), 14 audio analysis and 15 prompt grids (issue 22), 16 the team gateway (issue 31),
17 a synchronous engine's song (issue 37)."""


def test_quick_run_reports_every_figure(quick_run: tuple[dict, str]) -> None:
    document, _ = quick_run
    assert document["quick"] is True
    assert sorted(document["figures"], key=int) == [str(n) for n in FIGURES]
    for number, figure in document["figures"].items():
        assert figure["error"] is None, (number, figure["error"])
        assert figure["rows"], number
        assert all(row["figure"] == int(number) for row in figure["rows"])


def test_every_row_is_a_number_with_a_verdict(quick_run: tuple[dict, str]) -> None:
    document, _ = quick_run
    for figure in document["figures"].values():
        for row in figure["rows"]:
            assert isinstance(row["measured"], int | float) and math.isfinite(row["measured"]), row
            assert row["measured"] >= 0, row
            assert row["unit"], row
            if row["passed"] is not None:  # a target row carries its ratio or floor, or is an exact count
                assert row["target"] != "report", row
                if row["ratio"] is None:  # "0 duplicate creates": met or not, no ratio to give
                    assert row["target"].isdigit() and row["passed"] == (row["measured"] == int(row["target"])), row
                else:
                    assert math.isfinite(row["ratio"]), row


def test_figures_that_have_targets_report_pass_or_miss(quick_run: tuple[dict, str]) -> None:
    document, _ = quick_run
    judged = {int(n) for n, f in document["figures"].items() if any(r["passed"] is not None for r in f["rows"])}
    assert judged == {1, 2, 3, 4, 5, 7, 10, 11, 12, 14, 15, 16, 17}  # 6 and 13 are reported only
    watcher = document["figures"]["5"]["rows"]
    queries = [r for r in watcher if "queries per polling round" in r["name"]]
    assert [r["baseline"] for r in queries] == [1, 1]  # 10 and 100 ids fit one query


def test_table_lists_every_row(quick_run: tuple[dict, str]) -> None:
    document, table = quick_run
    rows = [row for figure in document["figures"].values() for row in figure["rows"]]
    assert "floor/baseline" in table and "ratio" in table
    for row in rows:
        assert row["name"] in table


def test_interleaved_alternates_the_order_of_the_sides() -> None:
    calls: list[str] = []
    samples = interleaved({"a": lambda: calls.append("a") or 1.0, "b": lambda: calls.append("b") or 2.0}, 4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert samples == {"a": [1.0] * 4, "b": [2.0] * 4}


def test_expected_requests_split_only_past_the_budget() -> None:
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    assert expected_requests(ids[:100]) == 1  # 100 x 37 characters fit 4000
    assert expected_requests(ids[:109]) == 2
    assert expected_requests(ids) == 10


def test_a_failing_figure_becomes_a_failed_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(number: int) -> Callable[[bool], list[Row]]:
        def run(quick: bool) -> list[Row]:
            raise RuntimeError("sandbox would not start")

        return run

    monkeypatch.setattr(runner, "_figure", broken)
    rows, info = runner.run_figure(4, quick=True)
    assert info["error"] == "RuntimeError: sandbox would not start"
    assert [(r.figure, r.passed, r.measured) for r in rows] == [(4, False, None)]
    assert "MISS" in runner.table(rows)
