"""A named batch killed with kill -9 mid-run, then re-run in a new process: each row sent once or listed unknown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore

GENERATE = "/v1/music/generate"
TASKS = "/v1/music/tasks"
ROWS = 6
PAID_SANDBOX = {"keys": {"not-the-demo-key": 100}, "song_seconds": 4}
"""The paid sandbox (`conftest.paid_sandbox`): a key that is not the demo key, so its clients journal."""
pytestmark = pytest.mark.slow  # kills processes mid-run

SCRIPT = """
import json, sys
from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import run_batch

client = MusicClient(max_retries=0, timeout=120)
rows = [{"style": f"album song {n}", "mv": "MFV2.0"} for n in range(ROWS)]
batch = run_batch(client, rows, name="album", concurrency=2, stall_timeout=600)
print(json.dumps([[r.index, r.state, r.ids] for r in batch.rows]))
""".replace("ROWS", str(ROWS))


def tasks_polled(sandbox: Sandbox) -> int:
    return sandbox.request_counts().get(TASKS, 0)


def start(sandbox: Sandbox, journal: Path) -> subprocess.Popen[str]:
    env = {**os.environ, **sandbox.env(), "MUSICGEN_JOURNAL": str(journal), "MUSICGEN_POLL_INTERVAL": "0.05"}
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, text=True)


def test_kill_9_mid_batch_then_rerun_in_a_new_process(service: Sandbox, tmp_path: Path) -> None:
    sandbox, clock = service, service.clock  # type: ignore[attr-defined]
    journal = tmp_path / "journal.sqlite3"
    # The first create is answered late (its work done at once, as a slow service does): in doubt at the kill.
    sandbox.set_faults([{"kind": "slow", "path": GENERATE, "seconds": 120, "count": 1}])
    first = start(sandbox, journal)
    store = BatchStore(journal)  # opened once the file exists (the child creates it)

    def stored_states() -> dict[int, str]:
        try:
            return {i: r.state for i, r in store.rows("album").items()}
        except Exception:
            return {}

    try:
        wait_until(lambda: journal.exists(), "the child's journal")
        wait_until(
            lambda: (
                sorted(stored_states().values()).count("submitted") == 1
                and sorted(stored_states().values()).count("sending") == 1
                and sandbox.request_counts().get(GENERATE, 0) == 2
            ),
            "one row submitted and one create in flight (songs frozen: no third row yet)",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL
    sending = [i for i, state in stored_states().items() if state == "sending"]
    assert len(sending) == 1

    second = start(sandbox, journal)
    try:
        while second.poll() is None:
            polls = tasks_polled(sandbox)
            clock.stages(2)
            wait_until(lambda p=polls: second.poll() is not None or tasks_polled(sandbox) > p, "a polling round")
        out, _ = second.communicate(timeout=30)
    finally:
        if second.poll() is None:
            second.kill()
    assert second.returncode == 0
    rows = {index: (state, ids) for index, state, ids in json.loads(out.strip().splitlines()[-1])}
    assert rows[sending[0]][0] == "unknown"  # may have been sent: listed, never resent
    assert all(state == "complete" for i, (state, _) in rows.items() if i != sending[0])
    assert sandbox.request_counts()[GENERATE] == ROWS  # every row's create went out exactly once
    ids = [i for _, row_ids in rows.values() for i in row_ids]
    assert len(ids) == len(set(ids)) == 2 * (ROWS - 1)
    store.close()
