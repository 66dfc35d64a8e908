"""A gateway with no batches pays nothing for its batch worker: an idle round is a read (no write lock), so another
process holding SQLite's write lock (a replica reserving, a `gateway user add`) never makes it wait, and it never
makes a paid create wait behind it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from gateway_helpers import CANARY_KEY, add_user
from queue_fakes import SeatCountingUpstream

from ipymusicgen.gateway.batch_worker import BatchWorker
from ipymusicgen.gateway.server import build


def test_an_idle_batch_round_reads_only_and_never_waits_for_the_write_lock(tmp_path: Path) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    add_user(database, "ida")
    with SeatCountingUpstream() as upstream:
        gateway, _ = build(database, upstream.url, upstream.url, CANARY_KEY, "127.0.0.1")
        worker = BatchWorker(gateway)
        holder = sqlite3.connect(database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's write, held for the whole round
        try:
            rounds = asyncio.run(asyncio.wait_for(_rounds(worker, 3), 10))  # a write would wait 30 s (busy timeout)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            gateway.close()
    assert rounds == [False, False, False], "idle: nothing to do, and nothing written"


async def _rounds(worker: BatchWorker, count: int) -> list[bool]:
    return [await worker.round() for _ in range(count)]
