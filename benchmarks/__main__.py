"""`python -m benchmarks`: the seven figures of issue 9 as a table and as JSON.

Every figure is measured side by side in this one run (the machines are shared and noisy), so the
ratios mean more than the absolute numbers. `--quick` runs a small version of everything (for the
smoke test); `--only 1,5` runs some figures; `--json PATH` says where the JSON goes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._common import ROOT, Row

TITLES = {
    1: "client overhead vs bare httpx",
    2: "request validation cost",
    3: "extension load time",
    4: "sandbox synthesis speed",
    5: "watcher scaling",
    6: "journal vs in-memory dict",
    7: "memory (RSS)",
    10: "batches: wall vs ideal, duplicates, lost ids, CPU per row",
    11: "library: waveform speed, search 10,000 vs 100, archive vs download",
    12: "front end in JupyterLab: 1,000-task watcher drawn, studio validation round trip",
    13: "agent server: get_songs round trip vs the same client.tasks call direct",
    14: "audio analysis: speed (x real time) and peak memory",
    15: "prompt grid: wall vs the same rows as a batch, view redraw cost",
    16: "team gateway: task query and paid create vs straight to the upstream, 200 concurrent queries",
    17: "synchronous engine: an ElevenLabs song through the client vs the raw POST",
}
DEFAULT_JSON = ROOT / "artifacts" / "benchmarks.json"


def _figure(number: int) -> Callable[..., list[Row]]:
    """The `run` of a figure's module, imported only when that figure runs."""
    if number == 1:
        from .bench_client import run
    elif number == 2:
        from .bench_validation import run
    elif number == 3:
        from .bench_load import run as load_run

        return lambda quick: load_run(rounds=1 if quick else 5)
    elif number == 4:
        from .bench_synthesis import run
    elif number == 5:
        from .bench_watcher import run
    elif number == 6:
        from .bench_journal import run
    elif number == 11:
        from .bench_library import run
    elif number == 10:
        from .bench_batch import run
    elif number == 12:
        from .bench_frontend import run
    elif number == 13:
        from .bench_mcp import run
    elif number == 14:
        from .bench_analysis import run
    elif number == 15:
        from .bench_grid import run
    elif number == 16:
        from .bench_gateway import run as gateway_run
        from .bench_gateway_batch import run as batch_run  # a 1,000-row batch at the gateway vs in the notebook

        return lambda quick: [*gateway_run(quick=quick), *batch_run(quick=quick)]
    elif number == 17:
        from .bench_engines import run
    else:
        from .bench_memory import run
    return lambda quick: run(quick=quick)


def run_figure(number: int, quick: bool) -> tuple[list[Row], dict[str, Any]]:
    """A figure's rows, or one failed row saying why; plus how long it took and the load around it."""
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    try:
        rows = _figure(number)(quick)
        error = None
    except Exception as exc:  # one broken figure must not hide the other six
        rows = [Row(number, f"{TITLES[number]}: did not run", None, "", passed=False)]
        error = f"{type(exc).__name__}: {exc}"
        rows[0].details = {"error": error, "traceback": traceback.format_exc()[-4000:]}
    info = {
        "title": TITLES[number],
        "seconds": round(time.perf_counter() - started, 2),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "error": error,
    }
    return rows, info


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _verdict(row: Row) -> str:
    return "report" if row.passed is None else ("pass" if row.passed else "MISS")


def table(rows: Sequence[Row]) -> str:
    """A plain-text table: figure, what, measured, floor/baseline, ratio, target, pass/miss."""
    header = ("fig", "figure", "measured", "floor/baseline", "ratio", "target", "result")
    lines = [header]
    for row in rows:
        measured = f"{_number(row.measured)} {row.unit}".strip()
        unit = row.baseline_unit or row.unit
        baseline = f"{_number(row.baseline)} {unit}".strip() if row.baseline is not None else "-"
        lines.append((str(row.figure), row.name, measured, baseline, _number(row.ratio), row.target, _verdict(row)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def report(rows: list[Row], infos: dict[int, dict[str, Any]], quick: bool, seconds: float) -> dict[str, Any]:
    """The JSON document: machine, run and every figure's rows."""
    return {
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "seconds": round(seconds, 1),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_end": [round(v, 2) for v in os.getloadavg()],
        },
        "figures": {
            str(number): {**info, "rows": [r.as_dict() for r in rows if r.figure == number]}
            for number, info in infos.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast version of every figure")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"where to write JSON (default {DEFAULT_JSON})")
    parser.add_argument("--only", default="", help="comma-separated figure numbers, e.g. 1,5")
    args = parser.parse_args(argv)
    figures = sorted({int(n) for n in args.only.split(",") if n.strip()} or TITLES)
    started = time.perf_counter()
    rows: list[Row] = []
    infos: dict[int, dict[str, Any]] = {}
    for number in figures:
        print(f"figure {number}: {TITLES[number]} ...", file=sys.stderr, flush=True)
        figure_rows, infos[number] = run_figure(number, args.quick)
        rows += figure_rows
    seconds = time.perf_counter() - started
    document = report(rows, infos, args.quick, seconds)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    print(table(rows))
    print(
        f"\n{len(figures)} figure(s) in {seconds:.1f} s on {os.cpu_count()} CPUs; load average now "
        f"{os.getloadavg()[0]:.2f} (shared machine: expect noise). JSON: {args.json}"
    )
    return 1 if any(info["error"] for info in infos.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
