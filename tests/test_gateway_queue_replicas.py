"""The fair queue when a replica dies: kill -9 of `gateway serve --max-in-flight` holding claimed rows, another replica
on the same PostgreSQL going on; and what `GET /gateway/v1/info` tells a notebook (no upstream detail)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, free_port, post, wait_for_port
from helpers import wait_until
from pg_server import PostgresServer, postgres_server  # noqa: F401  (the session fixture)
from queue_fakes import Replica, SeatCountingUpstream, data_of

from ipymusicgen.storage.ledger_engines import open_ledger

GENERATE = "/v1/music/generate"


def body(style: str) -> dict[str, str]:
    return {"action": "auto", "style": style, "mv": "MFV3.0"}


@pytest.mark.slow  # a gateway process killed with -9, a PostgreSQL server
def test_a_replica_killed_holding_claimed_rows_leaves_them_unknown_never_sent_twice_and_the_other_goes_on(
    postgres_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    database = postgres_server.new_database()
    token = add_user(database, "kim")
    with SeatCountingUpstream() as upstream:
        upstream.hold = 60.0  # each create is made upstream, then answered only after a minute: killed mid-send
        port = free_port()
        command = [sys.executable, "-m", "ipymusicgen", "gateway", "serve", "--database", database, "--port", str(port)]
        command += ["--upstream", upstream.url, "--upstream-v2", upstream.url, "--max-in-flight", "2"]
        log = (tmp_path / "a.log").open("wb")
        env = {**os.environ, "MUSICGEN_UPSTREAM_KEY": CANARY_KEY}
        first = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(port, first)
            url = f"http://127.0.0.1:{port}"
            with Replica(database, upstream.url, 2) as other:
                httpx.get(f"{other.url}/v1/music/tasks", params={"ids": "x"}, headers={"x-api-key": token})
                for style in ("k1", "k2"):
                    threading.Thread(target=_quietly, args=(url, token, style), daemon=True).start()
                wait_until(lambda: sorted(upstream.styles()) == ["k1", "k2"], "both sent")
                waiting = [data_of(post(url, GENERATE, token, body(s))) for s in ("k3", "k4")]
                assert [w["state"] for w in waiting] == ["queued", "queued"]
                os.kill(first.pid, signal.SIGKILL)
                first.wait(10)
                upstream.hold = 0.0
                wait_until(lambda: len(upstream.styles()) == 4, "the other replica sends the rows still waiting")
                wait_until(
                    lambda: _states(database) == ["unknown", "unknown", "done", "done"], "their answers recorded"
                )
                polled = httpx.get(
                    f"{other.url}/v1/music/tasks", params={"ids": waiting[0]["ids"][0]}, headers={"x-api-key": token}
                )
                calls = {c["id"]: c for c in open_ledger(database).calls()}
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(10)
            log.close()
        assert sorted(upstream.styles()) == ["k1", "k2", "k3", "k4"], "each row sent once, the killed ones never again"
        states = [calls[i]["state"] for i in sorted(calls)]
        assert states == ["unknown", "unknown", "done", "done"]
        assert all("stopped" in calls[i]["note"] for i in sorted(calls)[:2])
        assert data_of(polled)[0]["id"] == waiting[0]["ids"][0] and data_of(polled)[0]["style"] == "k3"
        monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
        code, out = cli("reconcile", "--database", database, "--upstream", upstream.url, "--upstream-v2", upstream.url)
    assert code == 0 and "reconciled: 2 settled" in out, out
    assert sorted(c["state"] for c in open_ledger(database).calls()) == ["done"] * 4
    assert CANARY_KEY not in (tmp_path / "a.log").read_text()


def _states(database: str) -> list[str]:
    ledger = open_ledger(database)
    try:
        return [c["state"] for c in ledger.calls()]
    finally:
        ledger.close()


def _quietly(url: str, token: str, style: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # its gateway is killed before it answers
        post(url, GENERATE, token, body(style))


def test_the_info_route_tells_a_user_the_version_and_limits_and_nothing_of_the_upstream(tmp_path: Path) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "lee")
    with SeatCountingUpstream() as upstream, Replica(database, upstream.url, 3) as queued:
        plain = GatewayThread(database, upstream.url, upstream.url)
        with plain:
            answers = [httpx.get(f"{g.url}/gateway/v1/info", headers={"x-api-key": token}) for g in (queued, plain)]
            refused = [httpx.get(f"{queued.url}/gateway/v1/info", headers=h) for h in ({}, {"x-api-key": "nope"})]
    assert [a.status_code for a in answers] == [200, 200] and [r.status_code for r in refused] == [401, 401]
    info = answers[0].json()
    assert info["gateway"] == "ipymusicgen" and info["version"]
    assert info["limits"]["max_in_flight"] == 3 and answers[1].json()["limits"]["max_in_flight"] is None
    assert info["limits"]["max_body_bytes"] > 0 and info["limits"]["head_timeout_s"] > 0
    assert set(info) == {"gateway", "version", "limits", "engines"} and info["engines"] == []  # none served here
    for answer in answers:
        text = answer.text + str(answer.headers)
        assert upstream.url not in text and f":{upstream.port}" not in text and "upstream" not in text.lower()
        assert not any(CANARY_KEY[i : i + 5] in text for i in range(len(CANARY_KEY) - 4)), "no piece of the key"


@pytest.mark.parametrize("seats", ["0", "-1", "1.5", "NaN", "١", "10001", ""])
def test_max_in_flight_takes_a_whole_number_of_seats_or_refuses_in_one_line(
    seats: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli("serve", "--max-in-flight", seats)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "whole number of seats from 1 to 10000" in err
