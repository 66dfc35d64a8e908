"""Batches on two gateway replicas (real `gateway serve` processes) sharing one ledger (SQLite, and a real
PostgreSQL), eight users: kill -9 of the replica sending rows leaves the rows it had claimed unknown or back in the
queue, never sent twice, and the other replica finishes the rest of every user's batch."""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayProcess, add_user, cli, paid_counts
from helpers import wait_until
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

GENERATE = "/v1/music/generate"
BATCHES = "/gateway/v1/batches"
USERS = 8
ROWS = 6
pytestmark = pytest.mark.slow  # two gateway processes, one killed


@pytest.fixture
def upstream(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    monkeypatch.setenv("MUSICGEN_GATEWAY_FOLLOW_S", "0.2")  # the replicas' song polls (they copy this environment)
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 100_000}) as server:
        yield server


def rows_of(user: str) -> list[dict[str, object]]:
    return [{"v2": False, "body": {"style": f"{user} song {i}", "mv": "MFV2.0"}} for i in range(ROWS)]


def states(url: str, token: str, name: str) -> list[str]:
    answer = httpx.get(url + BATCHES, params={"name": name}, headers={"x-api-key": token}, timeout=30)
    return [r["state"] for r in answer.json()["data"]["rows"]] if answer.status_code == 200 else []


def claimed_by(database: str, pid: int, state: str) -> int:
    """Rows in `state` claimed by the replica with this process id (its pid is in its worker's name)."""
    ledger = open_ledger(database)
    try:
        with ledger._cursor(write=False) as cur:
            found = cur.all("SELECT claimed_by FROM batch_rows WHERE state = ?", (state,))
    finally:
        ledger.close()
    return sum(1 for (owner,) in found if owner and json.loads(owner).get("pid") == pid)


def test_kill_9_of_a_replica_mid_batch_sends_nothing_twice_and_the_other_finishes_eight_users_batches(
    database: str, upstream: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = {f"user{i}": add_user(database, f"user{i}", budget=1000) for i in range(USERS)}
    # Each create is answered late (its work done at once): the killed replica has creates in flight.
    upstream.set_faults([{"kind": "slow", "path": GENERATE, "seconds": 1.0, "rate": 1.0}])
    first = GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "first.log").__enter__()
    second = GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "second.log").__enter__()
    try:
        for user, token in tokens.items():  # every batch handed to the first replica
            answer = httpx.post(
                first.url + BATCHES,
                json={"name": f"{user}'s album", "rows": rows_of(user), "concurrency": 2},
                headers={"x-api-key": token},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        wait_until(lambda: claimed_by(database, first.process.pid, "sending") >= 2, "the first replica sending")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        assert first.process.returncode == -signal.SIGKILL

        def all_finished() -> bool:
            return all(
                s and all(x in ("complete", "failed", "unknown", "skipped") for x in s)
                for s in (states(second.url, t, f"{u}'s album") for u, t in tokens.items())
            )

        wait_until(all_finished, "the second replica finished every batch", timeout=240)
        found = {u: states(second.url, t, f"{u}'s album") for u, t in tokens.items()}
        every = [s for row_states in found.values() for s in row_states]
        complete, unknown = every.count("complete"), every.count("unknown")
        assert complete + unknown == USERS * ROWS, found
        assert unknown >= 1, "the killed replica's creates in flight are in doubt"
        assert all(row_states.count("complete") >= ROWS - 2 for row_states in found.values()), "every batch ran"
        upstream.clear_faults()
        # `gateway reconcile` settles the calls the killed replica left: their rows are followed to the end.
        monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
        code, out = cli(
            "reconcile", "--database", database, "--upstream", upstream.base_url, "--upstream-v2", upstream.v2_base_url
        )
        settled = int(re.search(r"reconciled: (\d+) settled", out).group(1))  # type: ignore[union-attr]
        assert settled >= 1, out

        def followed() -> bool:
            now = [s for t_u in tokens.items() for s in states(second.url, t_u[1], f"{t_u[0]}'s album")]
            return now.count("complete") >= complete + settled and now.count("unknown") <= unknown - settled

        wait_until(followed, "the settled rows' songs followed to the end", timeout=120)
        after = [s for t_u in tokens.items() for s in states(second.url, t_u[1], f"{t_u[0]}'s album")]
    finally:
        upstream.clear_faults()
        first.__exit__()
        second.__exit__()
    assert after.count("complete") + after.count("unknown") == USERS * ROWS
    creates = paid_counts(upstream)[GENERATE]
    calls = open_ledger(database).calls()
    refused = [c for c in calls if c["state"] == "refused"]  # the sandbox's 429s (at most 5 generations at once)
    accepted = creates - len(refused)
    assert after.count("complete") <= accepted <= USERS * ROWS, "every row's create accepted upstream at most once"
    per_row = Counter(c["idem_key"].rsplit("-", 1)[0] for c in calls if c["state"] != "refused")
    assert len(per_row) == USERS * ROWS and set(per_row.values()) == {1}, "one charged call per row"
    assert all(c["idem_key"].startswith("gwbatch-") for c in calls)
    code, out = cli("batches", "--database", database)
    assert code == 0 and len(out.strip().splitlines()) == 1 + USERS
