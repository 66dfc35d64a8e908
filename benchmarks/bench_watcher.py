"""Figure 5: a `TaskWatcher` over 10, 100 and 1,000 tasks: requests per polling round and CPU per update.

The sandbox's clock is driven by hand, so every task changes in every round (processing, then
preview, then complete) and each round costs a full update of every card. Requests per round are
counted by the sandbox itself (`request_counts()`); the expected count is computed independently:
one query, split only when the comma-joined ids would pass the client's URL budget. CPU is taken
two ways: `process_time` (the whole process, which includes the in-process sandbox answering) and
`thread_time` (the polling thread only: HTTP client, parsing and card updates). Growth is the
log-log slope of CPU per round between the smallest and the largest watcher (1 = linear).

A watcher builds cards only for its first `PAGE_SIZE` tasks; so that rounds still update one card per
task (as before paging, and the worst case once a user pages through everything), the rounds run on a
watcher that shows every card. The default, paged watcher's creation is measured too (its own row).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ipymusicgen.client import IDS_QUERY_BUDGET
from ipymusicgen.models import AutoRequest
from ipymusicgen.sandbox import DEMO_KEY, Sandbox
from ipymusicgen.sandbox.actions import create_v1
from ipymusicgen.widgets import TaskWatcher
from ipymusicgen.widgets.watcher import PAGE_SIZE

from ._common import Row, median

TASKS_PATH = "/v1/music/tasks"
STAGE_SECONDS = 10.0
SLOPE_TARGET = 1.1


class ManualClock:
    """A clock the benchmark moves, standing in for `time.monotonic` in the sandbox."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class SizeResult:
    """What one watcher size cost."""

    tasks: int
    expected_requests: int
    requests: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    process_cpu: list[float] = field(default_factory=list)
    thread_cpu: list[float] = field(default_factory=list)
    create_thread_cpu: float = 0.0
    """Creating a watcher with a card for every task."""
    paged_create_thread_cpu: float = 0.0
    """Creating the default watcher (cards for the first page only)."""
    paged_cards: int = 0


class AllCardsWatcher(TaskWatcher):
    """A watcher whose first page holds every task: one card per task, as a user who pages to the end has."""

    page_size = 10**9


def make_tasks(sandbox: Sandbox, count: int) -> list[str]:
    """`count` v1 tasks straight in the sandbox's state (two per generate call, as the service makes them)."""
    ids: list[str] = []
    while len(ids) < count:
        ids += [task.id for task in create_v1(sandbox.state, sandbox.api_key, AutoRequest(style="benchmark"))]
    return ids[:count]


def expected_requests(ids: list[str], budget: int = IDS_QUERY_BUDGET) -> int:
    """Fewest `?ids=` queries whose comma-joined ids fit the budget (all ids here are the same length)."""
    per_query = max(1, (budget + 1) // (len(ids[0]) + 1))
    return math.ceil(len(ids) / per_query)


def measure_size(sandbox: Sandbox, clock: ManualClock, count: int) -> SizeResult:
    sandbox.reset()
    ids = make_tasks(sandbox, count)
    result = SizeResult(count, expected_requests(ids))
    with sandbox.client(max_retries=0, timeout=60) as client:
        start = time.thread_time()
        paged = TaskWatcher(ids, client=client, autostart=False)
        result.paged_create_thread_cpu = time.thread_time() - start
        result.paged_cards = len(paged.cards)
        paged.close()
        start = time.thread_time()
        watcher = AllCardsWatcher(ids, client=client, autostart=False)
        result.create_thread_cpu = time.thread_time() - start
        try:
            for _ in range(3):  # processing, preview, complete: every card changes every round
                before = sandbox.request_counts().get(TASKS_PATH, 0)
                process_start, thread_start = time.process_time(), time.thread_time()
                changed = watcher.poll_once()
                result.thread_cpu.append(time.thread_time() - thread_start)
                result.process_cpu.append(time.process_time() - process_start)
                result.requests.append(sandbox.request_counts().get(TASKS_PATH, 0) - before)
                result.changed.append(len(changed))
                if watcher.last_error:
                    raise RuntimeError(f"polling failed: {watcher.last_error}")
                clock.advance(STAGE_SECONDS)
        finally:
            watcher.close()
    return result


def _slope(small: SizeResult, large: SizeResult, values: str) -> float:
    ratio = median(getattr(large, values)) / median(getattr(small, values))
    return math.log(ratio) / math.log(large.tasks / small.tasks)


def _rows(results: list[SizeResult]) -> list[Row]:
    rows = []
    for r in results:
        rows.append(
            Row(
                5,
                f"{r.tasks} tasks: task queries per polling round",
                max(r.requests),
                "requests",
                baseline=r.expected_requests,
                ratio=round(max(r.requests) / r.expected_requests, 3),
                target="= fewest that fit the ids budget",
                passed=all(n == r.expected_requests for n in r.requests) and all(c == r.tasks for c in r.changed),
                details={"requests_per_round": r.requests, "changed_per_round": r.changed},
            )
        )
        rows.append(
            Row(
                5,
                f"{r.tasks} tasks: CPU per task update (polling thread)",
                round(median(r.thread_cpu) / r.tasks * 1e6, 1),
                "µs/task",
                details={
                    "thread_cpu_per_round_ms": [round(v * 1e3, 2) for v in r.thread_cpu],
                    "process_cpu_per_round_ms": [round(v * 1e3, 2) for v in r.process_cpu],
                    "process_cpu_per_task_us": round(median(r.process_cpu) / r.tasks * 1e6, 1),
                    "card_creation_ms_per_task": round(r.create_thread_cpu / r.tasks * 1e3, 2),
                },
            )
        )
    small, large = results[0], results[-1]
    for values, label in (("thread_cpu", "polling thread"), ("process_cpu", "whole process")):
        slope = _slope(small, large, values)
        rows.append(
            Row(
                5,
                f"CPU per round growth {small.tasks}->{large.tasks} ({label})",
                round(slope, 3),
                "log-log slope",
                baseline=1.0,
                ratio=round(slope, 3),
                target=f"<= {SLOPE_TARGET} (linear)",
                passed=slope <= SLOPE_TARGET,
            )
        )
    create_slope = math.log(large.create_thread_cpu / small.create_thread_cpu) / math.log(large.tasks / small.tasks)
    rows.append(
        Row(
            5,
            f"watcher creation, {large.tasks} tasks, a card each (slope {create_slope:.2f})",
            round(large.create_thread_cpu / large.tasks * 1e3, 2),
            "ms/task",
            details={f"{r.tasks}": round(r.create_thread_cpu / r.tasks * 1e3, 2) for r in results},
        )
    )
    rows.append(
        Row(
            5,
            f"watcher creation, {large.tasks} tasks, default (cards for the first {PAGE_SIZE})",
            round(large.paged_create_thread_cpu * 1e3, 1),
            "ms",
            details={
                f"{r.tasks}": {"ms": round(r.paged_create_thread_cpu * 1e3, 1), "cards": r.paged_cards} for r in results
            },
        )
    )
    return rows


def run(*, quick: bool = False) -> list[Row]:
    sizes = (10, 100) if quick else (10, 100, 1000)
    with Sandbox(stage_seconds=STAGE_SECONDS, song_seconds=4, faults="", keys={DEMO_KEY: 10**6}) as sandbox:
        clock = ManualClock()
        sandbox.state.clock = clock
        results = [measure_size(sandbox, clock, count) for count in sizes]
    return _rows(results)


if __name__ == "__main__":
    for row in run():
        print(row)
