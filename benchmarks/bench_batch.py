"""Figure 10: batches. Wall time against the ideal, and a big batch's bookkeeping (duplicates, lost ids, CPU).

A. 100 rows at concurrency 10 on the sandbox with short stages (the sandbox's running limit set to the
   same 10, so the limit is respected, not lifted). The ideal is ceil(rows / concurrency) x one row's
   time, where one row's time is a one-row batch measured in the same run (median of a few). Goal <= 1.15x.
B. 1,000 rows at concurrency 50 with a fast sandbox clock (50x): creates counted server-side against rows
   (0 duplicates), every task id the server made found in the batch (0 lost), and the client's CPU per
   row. The client runs in its own process (journal and batch store in a temporary SQLite file, as for a
   real key), so its CPU is not mixed with the sandbox's.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from pathlib import Path

from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore

from ._common import Row, fresh_python, ratio

FIGURE = 10
TARGET = 1.15
KEY = "bench-batch-key"

CHILD = """
import json, time
from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import run_batch
client = MusicClient(max_retries=2, timeout=60)
rows = [{"style": f"bench row {n}", "mv": "MFV2.0"} for n in range(ROWS)]
wall, cpu = time.perf_counter(), time.process_time()
batch = run_batch(client, rows, name="bench", concurrency=CONCURRENCY, stall_timeout=600)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu": cpu, "wall": wall, "counts": batch.counts(), "ids": batch.ids}))
"""


class FastClock:
    """The sandbox's clock running `speed` times faster than the wall clock."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.start = time.monotonic()

    def __call__(self) -> float:
        return self.start + (time.monotonic() - self.start) * self.speed


def _wall_vs_ideal(rows: int, concurrency: int, stage: float, singles: int) -> Row:
    with Sandbox(
        stage_seconds=stage, song_seconds=4, faults="", keys={KEY: 10 * rows}, max_running=concurrency
    ) as sandbox:
        client = sandbox.client(max_retries=2, timeout=30)
        one: list[float] = []
        for n in range(singles):
            start = time.perf_counter()
            batch = run_batch(client, [{"style": f"single {n}", "mv": "MFV2.0"}], store=BatchStore(None))
            one.append(time.perf_counter() - start)
            assert batch.counts()["complete"] == 1
        per_row = statistics.median(one)
        start = time.perf_counter()
        batch = run_batch(
            client,
            [{"style": f"row {n}", "mv": "MFV2.0"} for n in range(rows)],
            concurrency=concurrency,
            store=BatchStore(None),
        )
        wall = time.perf_counter() - start
        too_many = sandbox.request_counts().get("/v1/music/generate", 0) - rows - singles
        client.close()
    ideal = math.ceil(rows / concurrency) * per_row
    value = ratio(wall, ideal)
    return Row(
        FIGURE,
        f"{rows} rows at concurrency {concurrency}: wall vs ideal",
        wall,
        "s",
        baseline=ideal,
        ratio=value,
        target=f"<= {TARGET}x",
        passed=value <= TARGET and batch.counts()["complete"] == rows,
        details={
            "one_row_s": one,
            "stage_s": stage,
            "complete": batch.counts()["complete"],
            "creates_answered_429": too_many,
        },
    )


def _big_batch(rows: int, concurrency: int) -> list[Row]:
    with (
        tempfile.TemporaryDirectory(prefix="ipymusicgen-bench-batch-") as folder,
        Sandbox(
            stage_seconds=1.0, song_seconds=4, faults="", keys={KEY: 10 * rows}, max_running=concurrency
        ) as sandbox,
    ):
        sandbox.state.clock = FastClock(50.0)
        env = {
            **sandbox.env(),
            "MUSICGEN_JOURNAL": str(Path(folder) / "journal.sqlite3"),
            "MUSICGEN_POLL_INTERVAL": "0.02",
        }
        code = CHILD.replace("ROWS", str(rows)).replace("CONCURRENCY", str(concurrency))
        result = fresh_python(code, env=env, timeout=900)
        creates = sandbox.request_counts().get("/v1/music/generate", 0)
        made = {t.id for t in sandbox.state.tasks_of(KEY)}
    ids = result["ids"]
    duplicates = len(made) // 2 - rows
    lost = len(made - set(ids))
    cpu_ms = 1000 * result["cpu"] / rows
    details = {
        "wall_s": result["wall"],
        "counts": result["counts"],
        "create_requests": creates,
        "tasks_made": len(made),
        "ids_in_batch": len(ids),
    }
    return [
        Row(
            FIGURE,
            f"{rows} rows at concurrency {concurrency}: duplicate creates",
            duplicates,
            "calls",
            target="0",
            passed=duplicates == 0,
            details=details,
        ),
        Row(
            FIGURE,
            f"{rows} rows at concurrency {concurrency}: lost ids",
            lost,
            "ids",
            target="0",
            passed=lost == 0 and len(ids) == len(set(ids)) == 2 * rows,
        ),
        Row(FIGURE, f"{rows} rows at concurrency {concurrency}: client CPU per row", cpu_ms, "ms", target="report"),
    ]


def run(quick: bool = False) -> list[Row]:
    if quick:
        return [_wall_vs_ideal(20, 5, 0.1, 2), *_big_batch(100, 20)]
    return [_wall_vs_ideal(100, 10, 0.25, 3), *_big_batch(1000, 50)]


if __name__ == "__main__":
    for row in run():
        print(row)
