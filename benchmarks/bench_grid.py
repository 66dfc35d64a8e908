"""Figure 15: what a prompt grid costs over the batch it is, on the sandbox.

- Wall time of a grid (style × mv, run as one named batch, its view following every round) against the
  same rows sent as a plain batch, alternated over rounds (ratio; target ≤ 1.15).
- Kernel CPU of one redraw of the grid view's board (cells, estimates, every song's card) for a finished
  grid of 24 rows (48 songs): reported.
"""

from __future__ import annotations

import time
import uuid

from ._common import Row, interleaved, median, ratio

FIGURE = 15
TARGET = 1.15
STYLES = ["lo-fi", "jazz", "folk", "synthwave"]
MODELS = ["MFV2.0", "MFV3.0"]


def run(*, quick: bool = False) -> list[Row]:
    from ipymusicgen.lab.grid import Grid
    from ipymusicgen.sandbox import Sandbox
    from ipymusicgen.widgets.grid import GridView

    rounds = 2 if quick else 4
    with (
        Sandbox(stage_seconds=0.1, song_seconds=4, faults="", max_running=1000) as sandbox,
        sandbox.client() as client,
    ):

        def grid_side() -> float:
            sandbox.reset()  # full credits again: every round spends some
            grid = Grid(client, {"action": "auto"}, {"style": STYLES, "mv": MODELS}, name=f"g{uuid.uuid4().hex}")
            GridView(grid)  # the view follows the run, as in a notebook
            started = time.perf_counter()
            grid.run(concurrency=4, wait=True)
            return time.perf_counter() - started

        def batch_side() -> float:
            sandbox.reset()
            rows = [{"action": "auto", "style": s, "mv": m} for s in STYLES for m in MODELS]
            started = time.perf_counter()
            client.batch(rows, name=f"b{uuid.uuid4().hex}", concurrency=4, wait=True)
            return time.perf_counter() - started

        samples = interleaved({"grid": grid_side, "batch": batch_side}, rounds)
        sandbox.reset()
        grid = Grid(client, {"action": "auto"}, {"style": STYLES * 3, "mv": MODELS}, name=f"g{uuid.uuid4().hex}")
        view = GridView(grid)
        grid.run(concurrency=8, wait=True)
        draws = []
        for _ in range(5 if quick else 20):
            started = time.process_time()
            view._draw()
            draws.append(time.process_time() - started)
    ours, theirs = median(samples["grid"]), median(samples["batch"])
    value = ratio(ours, theirs)
    return [
        Row(
            FIGURE,
            f"grid {len(STYLES)}×{len(MODELS)} (view following) vs the same rows as a batch",
            round(ours, 3),
            "s wall",
            baseline=round(theirs, 3),
            ratio=round(value, 3),
            target=f"<= {TARGET}",
            passed=value <= TARGET,
            details={"rounds": rounds, "grid_s": samples["grid"], "batch_s": samples["batch"]},
        ),
        Row(
            FIGURE,
            "grid view redraw, 24 rows / 48 songs (kernel CPU)",
            round(median(draws) * 1000, 2),
            "ms CPU",
            details={"samples": len(draws)},
        ),
    ]
