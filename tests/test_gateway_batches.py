"""Batches that outlive the notebook (issue 39): a batch sent through a gateway is handed over whole and runs there,
on both ledgers (SQLite, and a real PostgreSQL the tests start). Re-running it attaches and sends nothing twice;
kill -9 of the notebook's process stops nothing; a budget that runs out mid-batch skips the rest; an admin stops one;
a user never sees or stops another's; `gateway batches` lists them with their names escaped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gateway_batch_world import BATCHES, GENERATE, fast_gateway, rows_of, upstream_sandbox
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, free_port, paid_counts
from helpers import ManualClock, wait_until
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.batch.rows import BatchError
from ipymusicgen.client.faces import AsyncMusicClient, MusicClient
from ipymusicgen.gateway.server import build, server_config
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.ledger_engines import open_ledger

pytestmark = pytest.mark.slow  # a gateway, its worker and songs in real time (seconds)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with upstream_sandbox() as server:
        yield server


@pytest.fixture
def gateway(
    database: str, upstream: Sandbox, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GatewayThread]:
    with fast_gateway(database, upstream, monkeypatch) as running:
        yield running


def client_for(gateway: GatewayThread, token: str, tmp_path: Path) -> MusicClient:
    journal = Journal(tmp_path / f"journal-{token[-6:]}.sqlite3")
    return MusicClient(token, base_url=gateway.url, v2_base_url=gateway.url, journal=journal, timeout=20)


def status(gateway: GatewayThread, token: str, name: str) -> httpx.Response:
    return httpx.get(gateway.url + BATCHES, params={"name": name}, headers={"x-api-key": token}, timeout=20)


def row_states(gateway: GatewayThread, token: str, name: str) -> list[str]:
    answer = status(gateway, token, name)
    return [r["state"] for r in answer.json()["data"]["rows"]] if answer.status_code == 200 else []


def test_a_batch_through_a_gateway_runs_there_and_a_rerun_attaches_without_sending_twice(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    token = add_user(database, "ada", budget=100)
    name = "night drive ✓ «5»"
    with client_for(gateway, token, tmp_path) as client:
        first = client.batch(rows_of(5), name=name, concurrency=2, stall_timeout=60)
        assert first.counts()["complete"] == 5 and len(first.records) == 10, first.progress_line()
        assert paid_counts(upstream)[GENERATE] == 5
        again = client.batch(rows_of(5), name=name, concurrency=2, stall_timeout=60)
        assert again.counts()["complete"] == 5 and [r.ids for r in again.rows] == [r.ids for r in first.rows]
        with pytest.raises(BatchError, match=r"Row 3 of batch .* is not the request first recorded"):
            client.batch([*rows_of(2), {"style": "changed", "mv": "MFV2.0"}], name=name)
    assert paid_counts(upstream)[GENERATE] == 5, "the rerun and the refused change sent nothing"
    calls = open_ledger(database).calls()
    assert len(calls) == 5 and all(c["idem_key"].startswith("gwbatch-") and c["user"] == "ada" for c in calls)
    assert {c["state"] for c in calls} == {"done"}, "each row's budget reserved and settled by the gateway"


def test_an_async_client_hands_its_batch_over_too(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    import asyncio

    token = add_user(database, "abe", budget=100)

    async def run() -> list[str]:
        async with AsyncMusicClient(token, base_url=gateway.url, v2_base_url=gateway.url, timeout=20) as client:
            batch = await client.batch(
                rows_of(3, "async"), name=f"async one {tmp_path.name}", concurrency=3, wait=False
            )
            await batch
            return [r.state for r in batch.rows]

    assert asyncio.run(run()) == ["complete"] * 3
    assert paid_counts(upstream)[GENERATE] == 3
    assert all(c["idem_key"].startswith("gwbatch-") for c in open_ledger(database).calls())


def test_a_user_can_neither_see_nor_stop_another_users_batch(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    alice, bob = add_user(database, "alice", budget=50), add_user(database, "bob", budget=50)
    with client_for(gateway, alice, tmp_path) as client:
        client.batch(rows_of(2, "alice's"), name="shared name", concurrency=2)
    missing = status(gateway, bob, "never made")
    theirs = status(gateway, bob, "shared name")
    assert theirs.status_code == missing.status_code == 404 and theirs.content == missing.content
    stop = [
        httpx.post(gateway.url + BATCHES + "/stop", json={"name": n}, headers={"x-api-key": bob}, timeout=20)
        for n in ("shared name", "never made")
    ]
    assert stop[0].status_code == stop[1].status_code == 404 and stop[0].content == stop[1].content
    mine = httpx.get(gateway.url + BATCHES, headers={"x-api-key": bob}, timeout=20).json()["data"]
    assert mine == []
    assert row_states(gateway, alice, "shared name") == ["complete", "complete"], "alice's batch untouched"
    for token in ("", "not-a-token"):
        assert httpx.get(gateway.url + BATCHES, headers={"x-api-key": token}).status_code == 401


def test_gateway_batches_lists_each_users_batches_and_escapes_their_names(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    hostile = "\x1b[2J\x1b]0;pwned\x07 tab\there\nnew line \u202eevil"
    eve, fay = add_user(database, "eve", budget=50), add_user(database, "fay", budget=50)
    with client_for(gateway, eve, tmp_path) as client:
        client.batch(rows_of(3, "eve"), name=hostile, concurrency=3)
    with client_for(gateway, fay, tmp_path) as client:
        client.batch(rows_of(1, "fay"), name="fay's", concurrency=1)
    code, out = cli("batches", "--database", database)
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\there" not in out
    lines = out.strip().splitlines()
    assert lines[0].split("\t")[:5] == ["user", "batch", "state", "rows", "done"]
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert rows["eve"][1] == json.dumps(hostile) and rows["eve"][2:5] == ["done", "3", "3"]
    assert rows["eve"][-1] == "6", "credits its sent rows hold"
    assert rows["fay"][1] == "fay's" and rows["fay"][3:5] == ["1", "1"]
    code, out = cli("batches", "--user", "fay", "--database", database)
    assert code == 0 and [line.split("\t")[0] for line in out.strip().splitlines()[1:]] == ["fay"]


class Frozen:
    """The sandbox's song clock held still (a row's songs stay unfinished, so a batch of concurrency 1 holds its next
    row back) until `thaw()` gives it the wall clock again."""

    def __init__(self, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
        self.upstream, self.monkeypatch, self.real = upstream, monkeypatch, upstream.state.clock
        monkeypatch.setattr(upstream.state, "clock", ManualClock(0.05))

    def thaw(self) -> None:
        self.monkeypatch.setattr(self.upstream.state, "clock", self.real)


def test_an_admin_stops_a_batch_and_the_users_rerun_does_not_restart_it(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = add_user(database, "gus", budget=100)
    frozen = Frozen(upstream, monkeypatch)
    with client_for(gateway, token, tmp_path) as client:
        batch = client.batch(rows_of(8, "gus"), name="long one", concurrency=1, wait=False)
        wait_until(lambda: row_states(gateway, token, "long one") == ["sent"] + ["queued"] * 7, "row 1 sent")
        assert cli("batches", "stop", "no such batch", "--user", "gus", "--database", database)[0] == 2
        code, out = cli("batches", "--database", database, "stop", "long one", "--user", "gus")  # either order
        assert code == 0 and "stopped gus's batch" in out
        frozen.thaw()
        batch.wait(60)
        assert batch.counts()["complete"] == 1 and batch.counts()["skipped"] == 7, batch.progress_line()
        assert paid_counts(upstream)[GENERATE] == 1
        rerun = client.batch(rows_of(8, "gus"), name="long one", concurrency=1)
        assert rerun.counts()["skipped"] == 7, "an admin's stop stands"
    assert paid_counts(upstream)[GENERATE] == 1
    _, out = cli("batches", "--database", database)
    assert "stopped by the gateway's admin" in out


def test_a_budget_that_runs_out_mid_batch_skips_the_rest_and_a_rerun_sends_only_those(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = add_user(database, "hal", budget=20)  # 7 rows x 2 credits = 14: the batch is taken whole
    frozen = Frozen(upstream, monkeypatch)
    with client_for(gateway, token, tmp_path) as client:
        batch = client.batch(rows_of(7, "hal"), name="budgeted", concurrency=1, wait=False)
        wait_until(lambda: row_states(gateway, token, "budgeted") == ["sent"] + ["queued"] * 6, "row 1 sent")
        assert cli("user", "budget", "hal", "3", "--database", database)[0] == 0  # mid-batch: 1 credit left
        frozen.thaw()
        batch.wait(60)
        assert batch.counts()["complete"] == 1 and batch.counts()["skipped"] == 6, batch.progress_line()
        assert all("Insufficient credits" in (r.error or "") for r in batch.rows[1:])
        assert paid_counts(upstream)[GENERATE] == 1
        assert open_ledger(database).totals()["hal"] == 2, "nothing reserved past the budget"
        assert cli("user", "budget", "hal", "100", "--database", database)[0] == 0
        rerun = client.batch(rows_of(7, "hal"), name="budgeted", concurrency=2)
        assert rerun.counts()["complete"] == 7, rerun.progress_line()
    assert paid_counts(upstream)[GENERATE] == 7, "the rerun sent only the skipped rows"


KILLED_CLIENT = """
import sys
from ipymusicgen import MusicClient

client = MusicClient(sys.argv[1], base_url=sys.argv[2], v2_base_url=sys.argv[2], timeout=20)
rows = [{"style": f"kill {i}", "mv": "MFV2.0"} for i in range(8)]
client.batch(rows, name="outlives its kernel", concurrency=2, stall_timeout=60)
print("finished in the notebook: the kill came too late")
"""


def test_kill_9_of_the_notebooks_process_stops_nothing_and_a_rerun_attaches(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = add_user(database, "ivy", budget=100)
    frozen = Frozen(upstream, monkeypatch)
    env = {**os.environ, "MUSICGEN_JOURNAL": str(tmp_path / "kernel-journal.sqlite3")}
    kernel = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, token, gateway.url], env=env, text=True)
    try:
        wait_until(
            lambda: row_states(gateway, token, "outlives its kernel") == ["sent"] * 2 + ["queued"] * 6, "2 rows sent"
        )
    finally:
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
    assert kernel.returncode == -signal.SIGKILL
    frozen.thaw()
    wait_until(
        lambda: row_states(gateway, token, "outlives its kernel") == ["complete"] * 8, "the gateway finished it alone"
    )
    with client_for(gateway, token, tmp_path) as client:
        rerun = client.batch(
            [{"style": f"kill {i}", "mv": "MFV2.0"} for i in range(8)], name="outlives its kernel", concurrency=2
        )
    assert rerun.counts()["complete"] == 8 and len(rerun.records) == 16
    assert paid_counts(upstream)[GENERATE] == 8, "every row sent once: nothing by the rerun"


class QueuedGateway(GatewayThread):
    """`GatewayThread` with the fair queue on (`gateway serve --max-in-flight seats`)."""

    def __init__(self, database: str, upstream: Sandbox, seats: int) -> None:
        import threading

        import uvicorn

        self.gateway, app = build(
            database, upstream.base_url, upstream.v2_base_url, CANARY_KEY, "127.0.0.1", max_in_flight=seats
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port))
        self.thread = threading.Thread(target=self.server.run, daemon=True)


def test_a_batch_keeps_to_the_fair_queues_seats(
    database: str, upstream: Sandbox, tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
    monkeypatch.setenv("MUSICGEN_POLL_INTERVAL", "0.05")
    monkeypatch.setenv("MUSICGEN_GATEWAY_FOLLOW_S", "0.1")
    upstream.reset()
    token = add_user(database, "jo", budget=100)
    with QueuedGateway(database, upstream, seats=2) as gateway, client_for(gateway, token, tmp_path) as client:
        batch = client.batch(rows_of(8, "seated"), name="eight rows, two seats", concurrency=8, stall_timeout=120)
    assert batch.counts()["complete"] == 8, batch.progress_line()
    assert paid_counts(upstream)[GENERATE] == 8, "each row sent once"
    calls = open_ledger(database).calls()
    assert [c["state"] for c in calls] == ["done"] * 8, "no 429: never more than the two seats upstream at once"


def test_the_batch_magic_hands_its_batch_to_the_gateway_v2_rows_too(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from ipymusicgen.workspace import session

    token = add_user(database, "kit", budget=100)
    for name, value in gateway.env(token).items():  # the notebook's three variables, nothing else
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MUSICGEN_JOURNAL", str(tmp_path / "journal.sqlite3"))
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    monkeypatch.setenv("MUSICGEN_ANALYZE", "off")
    session.shutdown()
    ip = InteractiveShell.instance()
    names = set(ip.user_ns)
    try:
        with capture_output():
            ip.run_line_magic("load_ext", "ipymusicgen")
        body = '--style "lo-fi" --title "First" la la la\n--v2 synthwave drive at night\n'
        with capture_output() as out:
            ip.run_cell_magic("musicgen_batch", "--name magic-made --no-watch --wait --yes -o made", body)
        assert "made" in ip.user_ns, out.stdout + out.stderr
        batch = ip.user_ns["made"]
        assert [r.state for r in batch.rows] == ["complete", "complete"], out.stdout
        assert "batch magic-made: 2/2 done" in out.stdout
    finally:
        ip.run_line_magic("unload_ext", "ipymusicgen")
        for name in set(ip.user_ns) - names:
            ip.user_ns.pop(name, None)
        session.shutdown()
    counts = paid_counts(upstream)
    assert counts.get(GENERATE) == 1 and counts.get("/v2/submit") == 1
    calls = open_ledger(database).calls()
    assert sorted(c["endpoint"] for c in calls) == [GENERATE, "/v2/submit"]
    assert all(c["idem_key"].startswith("gwbatch-") for c in calls), "sent by the gateway's worker"


def test_the_notebooks_own_stop_stops_the_batch_at_the_gateway_and_a_rerun_sends_the_rest(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = add_user(database, "lou", budget=100)
    frozen = Frozen(upstream, monkeypatch)
    with client_for(gateway, token, tmp_path) as client:
        batch = client.batch(rows_of(6, "lou"), name="stop me", concurrency=1, wait=False)
        wait_until(lambda: row_states(gateway, token, "stop me") == ["sent"] + ["queued"] * 5, "row 1 sent")
        batch.stop()
        wait_until(lambda: row_states(gateway, token, "stop me") == ["sent"] + ["skipped"] * 5, "stopped there")
        frozen.thaw()
        batch.wait(60)
        assert batch.counts()["complete"] == 1 and batch.counts()["skipped"] == 5, batch.progress_line()
        assert paid_counts(upstream)[GENERATE] == 1
        rerun = client.batch(rows_of(6, "lou"), name="stop me", concurrency=3)
        assert rerun.counts()["complete"] == 6, "a user's own stop does not stand against their rerun"
    assert paid_counts(upstream)[GENERATE] == 6


def test_the_agents_run_batch_hands_its_batch_to_the_gateway(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    import anyio
    from mcp import types
    from mcp.client import Client

    from ipymusicgen.mcp import AgentDesk, build_server

    token = add_user(database, "mia", budget=100)
    questions: list[str] = []

    async def consent(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"send": True})

    with client_for(gateway, token, tmp_path) as client:
        desk = AgentDesk(client)

        async def tool(name: str, arguments: dict[str, object]) -> dict[str, object]:
            async with Client(build_server(desk), elicitation_callback=consent) as mcp:
                result = await mcp.call_tool(name, arguments)
            assert not result.is_error, result.content[0].text
            return json.loads(result.content[0].text)

        rows = [{"style": "agent one", "mv": "MFV2.0"}, {"style": "agent two", "mv": "MFV2.0"}]
        started = anyio.run(tool, "run_batch", {"rows": rows, "name": "agent batch"})
        assert started["state"] == "started" and questions, started
        wait_until(lambda: anyio.run(tool, "batch_status", {"name": "agent batch"})["running"] is False, "it ends")
        status = anyio.run(tool, "batch_status", {"name": "agent batch"})
    assert len(status["ids"]) == 4 and status["complete"] == 2, status
    assert paid_counts(upstream)[GENERATE] == 2
    assert all(c["idem_key"].startswith("gwbatch-") for c in open_ledger(database).calls()), "sent by the gateway"
