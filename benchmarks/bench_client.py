"""Figure 1: what `MusicClient` / `AsyncMusicClient` add over a bare httpx client, against one real sandbox.

Both sides send the same task query (`GET /v1/music/tasks?ids=a,b` with the key header) to the same
in-process sandbox and read the JSON; the client also checks the envelope and parses `TaskRecord`s,
which is the overhead being measured. Sides alternate in rounds; the medians of wall time per query
are compared (the sandbox shares the process, so this is end to end). The calling thread's own CPU
per query (client work only, the sandbox's thread excluded) is in the details of the sync row.
The batch size adapts to the sandbox's latency so a round stays near a fixed time budget.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from ipymusicgen import AsyncMusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

from ._common import Row, interleaved, median, ratio, spread

TARGET = 1.05
"""Sync `tasks()` against a bare httpx call on loopback (the floor before the hardening)."""
JOURNALLED_TARGET = 1.10
"""The same with a journal, polling finished songs: a poll that changes nothing writes nothing (issue 29 item 19;
it was 1.17-1.23 when every poll ran a write transaction)."""
ASYNC_TARGET = 1.10
CONCURRENCY = 50


def _bare_headers(sandbox: Sandbox) -> dict[str, str]:
    return {"x-api-key": sandbox.api_key, "Accept": "application/json"}


def _batch_size(one_call: Callable[[], object], budget: float, lowest: int, highest: int) -> int:
    """How many calls fit in `budget` seconds, from a short trial."""
    start = time.perf_counter()
    for _ in range(3):
        one_call()
    each = (time.perf_counter() - start) / 3
    return max(lowest, min(highest, int(budget / max(each, 1e-6))))


def _sync_rows(sandbox: Sandbox, ids: list[str], rounds: int, budget: float) -> Row:
    url = f"{sandbox.base_url}/v1/music/tasks"
    params = {"ids": ",".join(ids)}
    with sandbox.client(max_retries=0, timeout=30) as client, httpx.Client(timeout=30) as bare:
        headers = _bare_headers(sandbox)

        def ours() -> object:
            return client.tasks(ids)

        def theirs() -> object:
            response = bare.get(url, params=params, headers=headers)
            response.raise_for_status()
            return response.json()

        count = _batch_size(ours, budget, 3, 400)
        cpu: dict[str, list[float]] = {"MusicClient": [], "httpx.Client": []}

        def timed(name: str, call: Callable[[], object]) -> Callable[[], float]:
            def sample() -> float:
                start, cpu_start = time.perf_counter(), time.thread_time()
                for _ in range(count):
                    call()
                cpu[name].append((time.thread_time() - cpu_start) / count)
                return (time.perf_counter() - start) / count

            return sample

        theirs()
        samples = interleaved(
            {"MusicClient": timed("MusicClient", ours), "httpx.Client": timed("httpx.Client", theirs)}, rounds
        )
    ours_s, theirs_s = median(samples["MusicClient"]), median(samples["httpx.Client"])
    ours_cpu, theirs_cpu = median(cpu["MusicClient"]), median(cpu["httpx.Client"])
    value = ratio(ours_s, theirs_s)
    return Row(
        1,
        "MusicClient.tasks vs bare httpx.Client",
        round(ours_s * 1e6, 1),
        "µs/query",
        baseline=round(theirs_s * 1e6, 1),
        ratio=round(value, 3),
        target=f"<= {TARGET}",
        passed=value <= TARGET,
        details={
            "queries_per_sample": count,
            "rounds": rounds,
            "client_thread_cpu_us": {
                "MusicClient": round(ours_cpu * 1e6, 1),
                "httpx.Client": round(theirs_cpu * 1e6, 1),
            },
            "client_thread_cpu_ratio": round(ratio(ours_cpu, theirs_cpu), 3),
            **{name: spread([v * 1e6 for v in values]) for name, values in samples.items()},
        },
    )


async def _gather(call: Callable[[], object], batches: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        await asyncio.gather(*(call() for _ in range(CONCURRENCY)))  # type: ignore[misc]
    return (time.perf_counter() - start) / batches


def _async_rows(sandbox: Sandbox, ids: list[str], rounds: int, budget: float) -> Row:
    url = f"{sandbox.base_url}/v1/music/tasks"
    params = {"ids": ",".join(ids)}
    headers = _bare_headers(sandbox)

    async def measure() -> dict[str, list[float]]:
        client: AsyncMusicClient = sandbox.async_client(max_retries=0, timeout=30)
        bare = httpx.AsyncClient(timeout=30)

        async def ours() -> object:
            return await client.tasks(ids)

        async def theirs() -> object:
            response = await bare.get(url, params=params, headers=headers)
            response.raise_for_status()
            return response.json()

        samples: dict[str, list[float]] = {"AsyncMusicClient": [], "httpx.AsyncClient": []}
        sides = [("AsyncMusicClient", ours), ("httpx.AsyncClient", theirs)]
        try:
            for _name, call in sides:  # warm-up: open the pools' connections
                each = await _gather(call, 1)
            batches = max(1, min(20, int(budget / max(each, 1e-6))))
            used["batches"] = batches
            for index in range(rounds):
                for name, call in sides if index % 2 == 0 else reversed(sides):
                    samples[name].append(await _gather(call, batches))
        finally:
            await client.aclose()
            await bare.aclose()
        return samples

    used: dict[str, int] = {}
    samples = asyncio.run(measure())
    ours_s, theirs_s = median(samples["AsyncMusicClient"]), median(samples["httpx.AsyncClient"])
    value = ratio(ours_s, theirs_s)
    return Row(
        1,
        f"AsyncMusicClient.tasks x{CONCURRENCY} concurrent vs httpx.AsyncClient",
        round(ours_s * 1e3, 2),
        f"ms/{CONCURRENCY} queries",
        baseline=round(theirs_s * 1e3, 2),
        ratio=round(value, 3),
        target=f"<= {ASYNC_TARGET}",
        passed=value <= ASYNC_TARGET,
        details={
            "batches_per_sample": used["batches"],
            "rounds": rounds,
            **{name: spread([v * 1e3 for v in values]) for name, values in samples.items()},
        },
    )


def run(*, quick: bool = False) -> list[Row]:
    """Sync then async overhead ratios against one sandbox with two tasks (one generate call)."""
    rounds = 2 if quick else 7
    budget = 0.1 if quick else 0.5
    with Sandbox(stage_seconds=60, song_seconds=4, faults="") as sandbox:
        with sandbox.client() as setup:
            ids = setup.generate(action="auto", style="benchmark").ids
        sync_row = _sync_rows(sandbox, ids, rounds, budget)
        async_row = _async_rows(sandbox, ids, rounds, budget)
    return [sync_row, _journalled_row(rounds, budget), async_row]


def _journalled_row(rounds: int, budget: float) -> Row:
    """The journalled client polling two finished songs it made (their ids, titles and state in its journal),
    the journal-less client and bare httpx, interleaved against one sandbox: every poll is observed by the
    journal, and one that changes nothing must write nothing."""
    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-client-"))
    journal = Journal(folder / "journal.sqlite3")
    try:
        with Sandbox(stage_seconds=0.01, song_seconds=2, faults="") as sandbox:
            with sandbox.client(journal=journal, archive=False) as setup:
                ids = setup.generate(action="auto", style="benchmark").ids
                setup.wait(ids, timeout=60, interval=0.02)
                setup.tasks(ids)  # the last answer with anything new for the journal
            url = f"{sandbox.base_url}/v1/music/tasks"
            params, headers = {"ids": ",".join(ids)}, _bare_headers(sandbox)
            with (
                sandbox.client(max_retries=0, timeout=30, journal=journal, archive=False) as journalled,
                sandbox.client(max_retries=0, timeout=30, journal=False) as plain,
                httpx.Client(timeout=30) as bare,
            ):

                def theirs() -> object:
                    response = bare.get(url, params=params, headers=headers)
                    response.raise_for_status()
                    return response.json()

                calls: dict[str, Callable[[], object]] = {
                    "journalled MusicClient": lambda: journalled.tasks(ids),
                    "MusicClient": lambda: plain.tasks(ids),
                    "httpx.Client": theirs,
                }
                count = _batch_size(calls["journalled MusicClient"], budget, 3, 400)
                changes_before = journal._db.total_changes

                def timed(call: Callable[[], object]) -> Callable[[], float]:
                    def sample() -> float:
                        start = time.perf_counter()
                        for _ in range(count):
                            call()
                        return (time.perf_counter() - start) / count

                    return sample

                theirs()
                samples = interleaved({name: timed(call) for name, call in calls.items()}, rounds)
                rows_written = journal._db.total_changes - changes_before
    finally:
        journal.close()
        shutil.rmtree(folder, ignore_errors=True)
    medians = {name: median(values) for name, values in samples.items()}
    value = ratio(medians["journalled MusicClient"], medians["httpx.Client"])
    return Row(
        1,
        "MusicClient.tasks with a journal (finished songs) vs bare httpx.Client",
        round(medians["journalled MusicClient"] * 1e6, 1),
        "µs/query",
        baseline=round(medians["httpx.Client"] * 1e6, 1),
        ratio=round(value, 3),
        target=f"<= {JOURNALLED_TARGET}",
        passed=value <= JOURNALLED_TARGET,
        details={
            "queries_per_sample": count,
            "rounds": rounds,
            "journal_less_ratio_same_run": round(ratio(medians["MusicClient"], medians["httpx.Client"]), 3),
            "fastest_samples_ratio": round(
                ratio(min(samples["journalled MusicClient"]), min(samples["httpx.Client"])), 3
            ),  # less moved by a busy machine than the medians
            "journal_rows_written_by_polls": rows_written,
            **{name: spread([v * 1e6 for v in values]) for name, values in samples.items()},
        },
    )
