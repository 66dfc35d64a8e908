"""Figure 6: the journal (SQLite, WAL) recording 10,000 task ids and resuming them, against a dict.

Recording is done the way the client does it: for each paid call, `begin()` before sending and
`submitted()` with its two ids once the answer arrives (two write transactions per call). Resuming
is `unfinished()`, which reads every unfinished task back as entries. The dict side does the same
bookkeeping in memory. Reported per task id; there is no target (the journal's worth is durability).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ipymusicgen.storage.journal import Journal

from ._common import Row, interleaved, median, ratio

HOST = "https://api.example.invalid"
PAYLOAD = {"action": "auto", "style": "lo-fi rain", "mv": "MFV2.0"}
IDS_PER_CALL = 2


def _id_pairs(count: int) -> list[list[str]]:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    return [ids[i : i + IDS_PER_CALL] for i in range(0, count, IDS_PER_CALL)]


def _journal_side(folder: Path, pairs: list[list[str]], phase: str, timings: dict[str, list[float]]) -> float:
    path = folder / f"journal-{uuid.uuid4().hex}.sqlite3"
    journal = Journal(path)
    try:
        start = time.perf_counter()
        for pair in pairs:
            attempt = journal.begin("generate", HOST, PAYLOAD)
            journal.submitted(attempt, pair)
        recorded = time.perf_counter()
        entries = journal.unfinished(HOST)
        resumed = time.perf_counter()
    finally:
        journal.close()
        for leftover in folder.glob(path.name + "*"):
            leftover.unlink()
    assert len(entries) == sum(len(p) for p in pairs)
    timings["record"].append(recorded - start)
    timings["resume"].append(resumed - recorded)
    return timings[phase][-1]


def _dict_side(pairs: list[list[str]], phase: str, timings: dict[str, list[float]]) -> float:
    start = time.perf_counter()
    attempts: dict[str, dict[str, Any]] = {}
    tasks: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        attempt = uuid.uuid4().hex
        attempts[attempt] = {"endpoint": "generate", "host": HOST, "payload": dict(PAYLOAD), "outcome": "pending"}
        attempts[attempt]["outcome"] = "submitted"
        for task_id in pair:
            tasks[task_id] = {"attempt": attempt, "host": HOST, "state": "processing", "style": PAYLOAD["style"]}
    recorded = time.perf_counter()
    entries = [(k, v) for k, v in tasks.items() if v["host"] == HOST and v["state"] not in ("complete", "failed")]
    resumed = time.perf_counter()
    assert len(entries) == sum(len(p) for p in pairs)
    timings["record"].append(recorded - start)
    timings["resume"].append(resumed - recorded)
    return timings[phase][-1]


def run(*, quick: bool = False) -> list[Row]:
    count, rounds = (1000, 3) if quick else (10_000, 3)
    pairs = _id_pairs(count)
    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-journal-"))
    journal_t: dict[str, list[float]] = {"record": [], "resume": []}
    dict_t: dict[str, list[float]] = {"record": [], "resume": []}
    try:
        sides: dict[str, Callable[[], float]] = {
            "journal": lambda: _journal_side(folder, pairs, "record", journal_t),
            "dict": lambda: _dict_side(pairs, "record", dict_t),
        }
        interleaved(sides, rounds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for phase, what in (("record", "begin + submitted"), ("resume", "unfinished()")):
        ours = median(journal_t[phase]) / count * 1e6
        theirs = median(dict_t[phase]) / count * 1e6
        rows.append(
            Row(
                6,
                f"journal {phase} {count:,} ids ({what}) vs dict",
                round(ours, 2),
                "µs/id",
                baseline=round(theirs, 3),
                ratio=round(ratio(ours, theirs), 1),
                details={
                    "journal_total_ms": round(median(journal_t[phase]) * 1e3, 1),
                    "dict_total_ms": round(median(dict_t[phase]) * 1e3, 2),
                },
            )
        )
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
