"""Figure 5: the watcher. Side by side in one run: the one-model watcher against the stock-widget one.

Two parts:

- Polling at scale (real sandbox, real HTTP): a watcher over 10, 100 and 1,000 tasks whose every task
  changes every round (the sandbox clock is moved by hand). Requests per round are counted by the
  sandbox and checked against an independent count (one query, split only past the ids budget); CPU
  per task update of the polling thread, and its growth between the smallest and largest watcher.
- Display cost (issue 16), new vs legacy (`benchmarks/_legacy_watcher.py`, the watcher as it was):
  with 1,000 tasks, rounds where 10 tasks change. The client is replaced by a replay of prepared
  records, so both sides pay the same `TaskSet.update` of 1,000 records and what differs is only the
  display: card updates, ticks, diffs and their JSON. Each message a widget publishes is serialised
  with `json.dumps` (as the kernel would), so the bytes on the wire and their CPU are counted too.
  Each side changes tasks on its own visible page (its worst case). Also counted: widget models
  after every task completed, and creation time.
- Front end: Debian's Chromium (Playwright) draws the watcher of 1,000 complete tasks with waveforms
  from the kernel's own snapshots: the first page (module load included), then every other page.
  Audio and cover URLs point at 127.0.0.1:9, where nothing listens: no traffic leaves the machine.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import comm
import ipywidgets as w

from ipymusicgen.client.faces import IDS_QUERY_BUDGET
from ipymusicgen.config import Settings
from ipymusicgen.models.schema import AutoRequest, TaskRecord
from ipymusicgen.models.tasks import TaskSet
from ipymusicgen.sandbox import DEMO_KEY, Sandbox
from ipymusicgen.sandbox.actions import create_v1
from ipymusicgen.widgets import TaskWatcher

from . import _legacy_watcher as legacy
from ._common import Row, median

TASKS_PATH = "/v1/music/tasks"
STAGE_SECONDS = 10.0
SLOPE_TARGET = 1.1
ROUND_CPU_TARGET_MS = 2.0
MODELS_TARGET = 3
CHANGED_PER_ROUND = 10


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
        watcher = TaskWatcher(ids, client=client, autostart=False)
        result.create_thread_cpu = time.thread_time() - start
        try:
            for _ in range(3):  # processing, preview, complete: every task changes every round
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


# -- display cost: new vs legacy --------------------------------------------------------------------------


class ReplayClient:
    """Stands in for the client: each `poll` hands the task set the next prepared list of records."""

    wiring = None
    """A hand-made client's wiring: no workspace archive, so the watcher keeps no songs."""

    def __init__(self, rounds: list[list[TaskRecord]]) -> None:
        self.settings = Settings(poll_interval=5.0, timeout=30.0)
        self.rounds = rounds
        self.index = 0
        self.cpu = 0.0
        """CPU spent in `poll` itself (the task set's update): the same on both sides, not the display's share."""

    def poll(self, tasks: TaskSet) -> list[TaskRecord]:
        start = time.thread_time()
        records = self.rounds[min(self.index, len(self.rounds) - 1)]
        self.index += 1
        changed = tasks.update(records)
        self.cpu += time.thread_time() - start
        return changed


class Wire:
    """Serialises every published comm message as the kernel would; counts messages and bytes."""

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0

    def publish(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None, **_keys: Any) -> None:
        self.messages += 1
        self.bytes += len(json.dumps({"msg_type": msg_type, "data": data}, default=str))
        self.bytes += sum(len(b) for b in buffers or ())


def record(task_id: str, status: int, round_number: int = 0) -> TaskRecord:
    """A record as the service sends it at a given status (2 = preview, 0 = complete)."""
    ready = status in (0, 2)
    return TaskRecord(
        id=task_id,
        status=status,
        title=f"Benchmark {task_id}",
        style="lo-fi, piano, rain",
        duration=180_000 if status == 0 else -1,
        audio_url=f"http://127.0.0.1:9/files/{task_id}-{round_number}.mp3" if ready else None,
        cover_url=f"http://127.0.0.1:9/files/{task_id}.svg" if ready else None,
        lyric="[Verse]\nla la la\n" * 8,
        song_id=f"song-{task_id}",
    )


def replay_rounds(ids: list[str], visible: list[str], rounds: int) -> list[list[TaskRecord]]:
    """Round 0: every task processing. Then each round, 10 visible tasks go to preview (a new preview URL)."""
    base = [record(i, 1) for i in ids]
    position = {task_id: index for index, task_id in enumerate(ids)}
    prepared = [base]
    current = list(base)
    for number in range(1, rounds + 1):
        start = (number - 1) * CHANGED_PER_ROUND % len(visible)
        for task_id in (visible * 2)[start : start + CHANGED_PER_ROUND]:
            current[position[task_id]] = record(task_id, 2, number)
        prepared.append(list(current))
    return prepared


@dataclass
class SideResult:
    """One watcher implementation's display costs."""

    round_cpu: list[float] = field(default_factory=list)
    """Whole polling round: the task set's update of 1,000 records plus the display."""
    display_cpu: list[float] = field(default_factory=list)
    """The display's share of a round: everything after the records are known."""
    round_messages: list[int] = field(default_factory=list)
    round_bytes: list[int] = field(default_factory=list)
    create_cpu: float = 0.0
    models: int = 0


def measure_side(
    make: Callable[[list[str], Any], Any], visible_of: Callable[[Any], list[str]], count: int, rounds: int, wire: Wire
) -> SideResult:
    ids = [f"task-{n:05d}" for n in range(count)]
    result = SideResult()
    probe = make(ids, ReplayClient([[]]))
    visible = visible_of(probe)
    probe.close()
    client = ReplayClient(replay_rounds(ids, visible, rounds))
    start = time.thread_time()
    watcher = make(ids, client)
    result.create_cpu = time.thread_time() - start
    try:
        if hasattr(watcher, "_handle_custom_msg") and isinstance(watcher, TaskWatcher):
            watcher._handle_custom_msg({"kind": "hello"}, [])  # a view is open: it holds the visible page
        watcher.poll_once()  # every task's first record (untimed)
        for _ in range(rounds):
            messages, sent, polled = wire.messages, wire.bytes, client.cpu
            start = time.thread_time()
            changed = watcher.poll_once()
            result.round_cpu.append(time.thread_time() - start)
            result.display_cpu.append(result.round_cpu[-1] - (client.cpu - polled))
            result.round_messages.append(wire.messages - messages)
            result.round_bytes.append(wire.bytes - sent)
            assert len(changed) == CHANGED_PER_ROUND, len(changed)
    finally:
        watcher.close()
    before = set(w.widget._instances)
    finished = make(ids, ReplayClient([[record(i, 0) for i in ids]]))
    try:
        finished.poll_once()  # every task complete: every card at its fullest
        result.models = len(set(w.widget._instances) - before)
    finally:
        finished.close()
    return result


def _new_watcher(ids: list[str], client: Any) -> TaskWatcher:
    return TaskWatcher(ids, client=client, autostart=False)


def _legacy_watcher(ids: list[str], client: Any) -> legacy.TaskWatcher:
    return legacy.TaskWatcher(ids, client=client, autostart=False)


def measure_display(count: int, rounds: int) -> dict[str, SideResult]:
    wire = Wire()
    original = comm.DummyComm.publish_msg
    comm.DummyComm.publish_msg = lambda _comm, *args, **kwargs: wire.publish(*args, **kwargs)  # type: ignore[method-assign]
    try:
        results: dict[str, SideResult] = {}
        for name, make, visible_of in (
            ("legacy", _legacy_watcher, lambda watcher: list(watcher.cards)),
            ("new", _new_watcher, lambda watcher: watcher.visible_ids),
            ("legacy again", _legacy_watcher, lambda watcher: list(watcher.cards)),
            ("new again", _new_watcher, lambda watcher: watcher.visible_ids),
        ):
            results[name] = measure_side(make, visible_of, count, rounds, wire)
    finally:
        comm.DummyComm.publish_msg = original  # type: ignore[method-assign]
    merged = {}
    for side in ("legacy", "new"):  # A B A B: each side's samples from both passes
        first, second = results[side], results[f"{side} again"]
        merged[side] = SideResult(
            round_cpu=first.round_cpu + second.round_cpu,
            display_cpu=first.display_cpu + second.display_cpu,
            round_messages=first.round_messages + second.round_messages,
            round_bytes=first.round_bytes + second.round_bytes,
            create_cpu=min(first.create_cpu, second.create_cpu),
            models=max(first.models, second.models),
        )
    return merged


def _display_rows(count: int, sides: dict[str, SideResult]) -> list[Row]:
    new, old = sides["new"], sides["legacy"]
    new_ms, old_ms = median(new.display_cpu) * 1e3, median(old.display_cpu) * 1e3
    new_round, old_round = median(new.round_cpu) * 1e3, median(old.round_cpu) * 1e3
    return [
        Row(
            5,
            f"{count:,} tasks, {CHANGED_PER_ROUND} changed: display CPU per polling round, new vs stock widgets",
            round(new_ms, 3),
            "ms",
            baseline=round(old_ms, 3),
            ratio=round(new_ms / old_ms, 3) if old_ms else None,
            target=f"<= {ROUND_CPU_TARGET_MS} ms",
            passed=new_ms <= ROUND_CPU_TARGET_MS,
            details={
                "new_ms": [round(v * 1e3, 3) for v in new.display_cpu],
                "legacy_ms": [round(v * 1e3, 3) for v in old.display_cpu],
                "new_messages_per_round": median(new.round_messages),
                "legacy_messages_per_round": median(old.round_messages),
            },
        ),
        Row(
            5,
            f"{count:,} tasks, {CHANGED_PER_ROUND} changed: whole round incl. task set update, new vs stock widgets",
            round(new_round, 3),
            "ms",
            baseline=round(old_round, 3),
            ratio=round(new_round / old_round, 3) if old_round else None,
            details={"task_set_update_ms": round(new_round - new_ms, 3)},
        ),
        Row(
            5,
            f"{count:,} tasks, {CHANGED_PER_ROUND} changed: bytes sent per polling round, new vs stock widgets",
            median(new.round_bytes),
            "bytes",
            baseline=median(old.round_bytes),
            ratio=round(median(new.round_bytes) / median(old.round_bytes), 3) if median(old.round_bytes) else None,
            details={"messages_new": median(new.round_messages), "messages_legacy": median(old.round_messages)},
        ),
        Row(
            5,
            f"{count:,} complete tasks: widget models, new vs stock widgets",
            new.models,
            "models",
            baseline=old.models,
            ratio=round(new.models / old.models, 4) if old.models else None,
            target=f"<= {MODELS_TARGET}",
            passed=new.models <= MODELS_TARGET,
        ),
        Row(
            5,
            f"{count:,} tasks: watcher creation, new vs stock widgets",
            round(new.create_cpu * 1e3, 2),
            "ms",
            baseline=round(old.create_cpu * 1e3, 2),
            ratio=round(new.create_cpu / old.create_cpu, 3) if old.create_cpu else None,
        ),
    ]


FRONT_END_TARGET_MS = 1000.0
CHROMIUM = "/usr/bin/chromium"
_FRONT_END = """
async ([source, styles, snapshots]) => {
  const listeners = new Set();
  const model = {
    on(event, callback) { if (event === "msg:custom") listeners.add(callback); },
    off(event, callback) { listeners.delete(callback); },
    send() {},
    get() { return undefined; },
  };
  const deliver = (message) => { for (const callback of listeners) callback(message); };
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const style = document.createElement("style");
  style.textContent = styles;
  document.head.appendChild(style);
  const el = document.createElement("div");
  document.body.appendChild(el);
  const start = performance.now();
  const module = await import(URL.createObjectURL(new Blob([source], { type: "text/javascript" })));
  module.default.render({ model, el });
  deliver(snapshots[0]);
  el.getBoundingClientRect();
  await frame();
  const first = performance.now() - start;
  const paging = performance.now();
  for (const snapshot of snapshots.slice(1)) {
    deliver(snapshot);
    el.getBoundingClientRect();
  }
  await frame();
  return { first, rest: performance.now() - paging, cards: el.querySelectorAll(".ipymusicgen-song").length };
}
"""


def measure_front_end(count: int) -> dict[str, float] | None:
    """Chromium drawing a watcher of `count` complete tasks with waveforms: first page, then every page.

    None when Playwright or Debian's Chromium is not there (the row is then left out).
    """
    import os

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not os.path.exists(CHROMIUM):
        return None
    from ipymusicgen.widgets._static import css, esm

    ids = [f"task-{n:05d}" for n in range(count)]
    watcher = TaskWatcher(ids, client=ReplayClient([[record(i, 0) for i in ids]]), autostart=False)
    try:
        watcher.poll_once()
        peaks = [[-0.5 - 0.4 * ((i * 7) % 10) / 10, 0.5 + 0.4 * ((i * 3) % 10) / 10] for i in range(256)]
        for task_id in ids:
            watcher.annotate(task_id, peaks=peaks)
        snapshots = []
        for page in range(watcher.pages):
            watcher._page = page
            snapshots.append({**watcher.snapshot(), "rev": page + 1})
    finally:
        watcher.close()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_content("<!doctype html><html><body></body></html>")
            timings = page.evaluate(_FRONT_END, [esm("watcher"), css("watcher"), snapshots])
        finally:
            browser.close()
    return {**timings, "pages": len(snapshots)}


def _front_end_row(count: int, timings: dict[str, float]) -> Row:
    return Row(
        5,
        f"front end: Chromium draws a {count:,}-task watcher (first page, waveforms)",
        round(timings["first"], 1),
        "ms",
        baseline=FRONT_END_TARGET_MS,
        ratio=round(timings["first"] / FRONT_END_TARGET_MS, 3),
        target=f"<= {FRONT_END_TARGET_MS:g} ms",
        passed=timings["first"] <= FRONT_END_TARGET_MS,
        details={
            "cards_on_page": timings["cards"],
            "all_other_pages_ms": round(timings["rest"], 1),
            "pages": timings["pages"],
        },
    )


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
                    "watcher_creation_ms": round(r.create_thread_cpu * 1e3, 2),
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
    return rows


def run(*, quick: bool = False) -> list[Row]:
    sizes = (10, 100) if quick else (10, 100, 1000)
    with Sandbox(stage_seconds=STAGE_SECONDS, song_seconds=4, faults="", keys={DEMO_KEY: 10**6}) as sandbox:
        clock = ManualClock()
        sandbox.state.clock = clock
        results = [measure_size(sandbox, clock, count) for count in sizes]
    count = 200 if quick else 1000
    rows = _rows(results)
    rows += _display_rows(count, measure_display(count, rounds=3 if quick else 10))
    timings = measure_front_end(count)
    if timings is not None:
        rows.append(_front_end_row(count, timings))
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
