"""Figure 16, batches: a 1,000-row batch handed to the gateway whole vs the same batch run from the notebook.

Both sides as a team would run them, on loopback: the upstream (a keyed sandbox) in its own process, the gateway a
`python -m ipymusicgen gateway serve` process (SQLite ledger in a temporary folder), and the notebook this process.
"From the notebook": `client.batch(rows)` straight to the upstream, the notebook's own engine sending every create
and polling every song (journalled). "At the gateway": the same call with the client pointed at the gateway, which
takes the batch whole, sends the rows from its worker and follows their songs; the notebook only follows it by
name. Each side runs the same rows (a fresh batch name each round) at the same concurrency; the wall time until
every row is complete is compared (ratio gateway / notebook), and the notebook process's CPU time per row is given
for each side (what the hand-off saves the kernel). Reported, no target: the gateway adds a hop and a ledger write
per row, and follows songs every `MUSICGEN_GATEWAY_FOLLOW_S` (0.2 s here, the notebook's poll interval too).
"""

from __future__ import annotations

import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from ._common import Row, median, ratio, spread
from .bench_gateway import KEY, UPSTREAM_KEY_ENV, _Process

ROWS, QUICK_ROWS = 1000, 20
CONCURRENCY = 50
POLL_S = 0.2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _deployment(folder: Path) -> Iterator[tuple[str, str, str]]:
    """(upstream URL, gateway URL, a user's token), each server its own process."""
    from ipymusicgen.gateway.tokens import new_token, token_hash
    from ipymusicgen.storage.ledger_engines import open_ledger

    database = str(folder / "gateway.sqlite3")
    token = new_token()
    with open_ledger(database) as ledger:
        ledger.add_user("bench", token_hash(token), None)
    port, v2_port, gateway_port = (_free_port() for _ in range(3))
    upstream, upstream_v2 = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{v2_port}"
    env = {UPSTREAM_KEY_ENV: KEY, "MUSICGEN_GATEWAY_FOLLOW_S": str(POLL_S)}
    with ExitStack() as stack:
        serve_upstream = ["-m", "benchmarks.bench_gateway", "upstream", str(port), str(v2_port)]
        upstream_process = _Process("upstream", serve_upstream, [port, v2_port], folder, env)
        stack.callback(upstream_process.stop)
        upstream_process.ready()
        serve = ["-m", "ipymusicgen", "gateway", "serve", "--database", database, "--port", str(gateway_port)]
        serve += ["--upstream", upstream, "--upstream-v2", upstream_v2]
        gateway = _Process("gateway", serve, [gateway_port], folder, env)
        stack.callback(gateway.stop)
        gateway.ready()
        yield upstream, f"http://127.0.0.1:{gateway_port}", token


def _run_batch(url: str, key: str, rows: list[dict[str, Any]], folder: Path) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) for one batch to complete through `url`."""
    from ipymusicgen.client.faces import MusicClient
    from ipymusicgen.config import Settings
    from ipymusicgen.storage.journal import Journal

    journal = Journal(folder / f"journal-{uuid.uuid4().hex[:8]}.sqlite3")
    settings = Settings().with_changes(poll_interval=POLL_S, min_poll_interval=POLL_S, timeout=60.0)
    with MusicClient(key, base_url=url, v2_base_url=url, settings=settings, journal=journal, archive=False) as client:
        wall, cpu = time.perf_counter(), time.process_time()
        batch = client.batch(rows, name=f"bench-{uuid.uuid4().hex[:8]}", concurrency=CONCURRENCY, stall_timeout=300)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if batch.counts()["complete"] != len(rows):
        raise RuntimeError(f"the batch did not complete: {batch.progress_line()}")
    return wall, cpu


def run(quick: bool = False) -> list[Row]:
    count, rounds = (QUICK_ROWS, 1) if quick else (ROWS, 2)
    rows = [{"style": f"bench row {n}", "mv": "MFV3.0"} for n in range(count)]
    walls: dict[str, list[float]] = {"notebook": [], "gateway": []}
    cpus: dict[str, list[float]] = {"notebook": [], "gateway": []}
    with tempfile.TemporaryDirectory() as tmp, _deployment(Path(tmp)) as (upstream, gateway, token):
        for url, key in ((upstream, KEY), (gateway, token)):  # warm both paths (models built, worker started)
            _run_batch(url, key, rows[:3], Path(tmp))
        for round_ in range(rounds):  # sides alternate (A B, then B A)
            order = [("notebook", upstream, KEY), ("gateway", gateway, token)]
            for side, url, key in order if round_ % 2 == 0 else reversed(order):
                wall, cpu = _run_batch(url, key, rows, Path(tmp))
                walls[side].append(wall)
                cpus[side].append(cpu)
    at_gateway, in_notebook = median(walls["gateway"]), median(walls["notebook"])
    return [
        Row(
            16,
            f"a {count:,}-row batch at the gateway vs the same batch run from the notebook (wall to all complete)",
            round(at_gateway, 2),
            "s",
            baseline=round(in_notebook, 2),
            ratio=round(ratio(at_gateway, in_notebook), 2),
            details={
                "wall_s": {side: spread(values) for side, values in walls.items()},
                "notebook_cpu_ms_per_row": {side: round(median(v) * 1e3 / count, 3) for side, v in cpus.items()},
                "rows": count,
                "concurrency": CONCURRENCY,
                "poll_s": POLL_S,
                "processes": "notebook | gateway (SQLite ledger) | upstream",
            },
        )
    ]
