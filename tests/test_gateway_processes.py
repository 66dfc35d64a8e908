"""The gateway as real `gateway serve` processes: two of them on one PostgreSQL with eight client processes racing
one team budget and one idempotency key, and a gateway killed with -9 mid-send."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayProcess, add_user, cli, paid_counts, post
from helpers import wait_until
from pg_server import PostgresServer, postgres_server  # noqa: F401  (the session fixture)

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

pytestmark = pytest.mark.slow  # starts gateway processes, client processes and a PostgreSQL server

GENERATE = {"action": "auto", "style": "lo-fi rain", "mv": "MFV3.0"}
CLIENTS = 8

RACER = """
import json, sys, time
from pathlib import Path
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.errors import InsufficientCreditsError

go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
outcomes = []
with MusicClient(timeout=30) as client:  # MUSICGEN_BASE_URL / MUSICGEN_V2_BASE_URL / MUSICGEN_API_KEY: the gateway
    for _ in range(2):
        try:
            client.generate(action="auto", style="race", mv="MFV3.0")
            outcomes.append("paid")
        except InsufficientCreditsError as exc:
            outcomes.append("over" if "team budget" in str(exc) else str(exc))
print(json.dumps(outcomes))
"""

SAME_KEY = """
import json, sys, time
from pathlib import Path
import httpx

go, url, token = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
while not go.exists():
    time.sleep(0.005)
body = {"action": "auto", "style": "once", "mv": "MFV3.0"}
answer = httpx.post(url + "/v1/music/generate", json=body, headers={"x-api-key": token, "Idempotency-Key": "the-one"},
                    timeout=60)
print(json.dumps([answer.status_code, answer.json()]))
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={CANARY_KEY: 10_000}, max_running=100) as server:
        yield server


def _clients(script: str, argv: Callable[[int], list[str]], env: Callable[[int], dict[str, str]], folder: Path) -> list:
    """Run CLIENTS processes of `script`, released together, each printing one JSON line; their outputs."""
    folder.mkdir()
    go = folder / "go"
    processes = []
    for i in range(CLIENTS):
        process_env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
        process_env.update(env(i), MUSICGEN_JOURNAL=str(folder / f"journal-{i}.sqlite3"))
        command = [sys.executable, "-c", script, str(go), *argv(i)]
        processes.append(
            subprocess.Popen(command, env=process_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    go.touch()
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]
        assert CANARY_KEY not in out + err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_two_gateways_on_one_ledger_hold_one_team_budget_and_send_one_key_once(
    upstream: Sandbox, tmp_path: Path, request: pytest.FixtureRequest, engine: str
) -> None:
    """Two gateway processes on one PostgreSQL (a team on several machines), or on one SQLite file (the default,
    processes of one machine sharing it), with eight client processes racing them."""
    upstream.reset()
    if engine == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        database = server.new_database()
    else:
        database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "racer")
    assert cli("team", "budget", "10", "--database", database)[0] == 0  # three calls at 3 credits, not four
    with (
        GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "a.log") as a,
        GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "b.log") as b,
    ):
        gateways = (a, b)

        def env(i: int) -> dict[str, str]:
            url = gateways[i % 2].url
            return {"MUSICGEN_BASE_URL": url, "MUSICGEN_V2_BASE_URL": url, "MUSICGEN_API_KEY": token}

        outcomes = [o for r in _clients(RACER, lambda i: [], env, tmp_path / "race") for o in r]
        assert sorted(set(outcomes)) == ["over", "paid"] and outcomes.count("paid") == 3
        assert paid_counts(upstream) == {"/v1/music/generate": 3}
        assert open_ledger(database).remaining("racer") == 1

        assert cli("team", "budget", "100", "--database", database)[0] == 0
        upstream.set_faults([{"kind": "slow", "path": "/v1/music/generate", "seconds": 1.0}])  # all 8 overlap it
        answers = _clients(SAME_KEY, lambda i: [gateways[i % 2].url, token], lambda i: {}, tmp_path / "once")
    assert paid_counts(upstream) == {"/v1/music/generate": 4}, "one idempotency key: one upstream send"
    paid = [body for status, body in answers if status == 200]
    doubtful = [body for status, body in answers if status == 503]
    assert len(paid) + len(doubtful) == CLIENTS and paid
    assert all(body == paid[0] for body in paid), "a repeat returns the first call's answer"
    assert all("may have been charged" in body["message"] for body in doubtful)
    for log in ("a.log", "b.log"):
        assert CANARY_KEY not in (tmp_path / log).read_text()


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_gateway_killed_mid_send_leaves_a_call_the_next_gateway_settles_from_the_upstream_and_continues(
    engine: str, upstream: Sandbox, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    upstream.reset()
    if engine == "sqlite":
        database = str(tmp_path / "gateway.sqlite3")
    else:
        database = request.getfixturevalue("postgres_server").new_database()
    token = add_user(database, "kim", budget=10)
    upstream.set_faults([{"kind": "slow", "path": "/v1/music/generate", "seconds": 30.0}])
    answers: list[object] = []
    with GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "first.log") as first:

        def send() -> None:
            try:
                answers.append(post(first.url, "/v1/music/generate", token, GENERATE, **{"Idempotency-Key": "k"}))
            except httpx.HTTPError as exc:
                answers.append(exc)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        wait_until(lambda: paid_counts(upstream).get("/v1/music/generate") == 1, "the call to reach upstream")
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
        sender.join(30)
    assert len(answers) == 1 and isinstance(answers[0], httpx.HTTPError), "the client heard nothing definite"
    upstream.clear_faults()
    with GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "second.log") as second:
        # its start reconciled the killed call: its tasks were made upstream, so it is settled and they are kim's
        repeat = post(second.url, "/v1/music/generate", token, GENERATE, **{"Idempotency-Key": "k"})
        assert repeat.status_code == 200 and len(repeat.json()["data"]["ids"]) == 2
        fresh = post(second.url, "/v1/music/generate", token, GENERATE, **{"Idempotency-Key": "k2"})
        assert fresh.json()["status"] == 200, "a restarted gateway continues"
    assert paid_counts(upstream)["/v1/music/generate"] == 2  # (and one read of the task list, by reconcile)
    _, out = cli("spend", "--database", database)
    assert out.splitlines()[1].split("\t") == ["kim", "2", "6", "-", "0"]
    assert open_ledger(database).remaining("kim") == 4, "the killed call is charged at its estimate"
    assert "reconciled: 1 settled" in (tmp_path / "second.log").read_text()
    assert CANARY_KEY not in (tmp_path / "first.log").read_text() + (tmp_path / "second.log").read_text()
