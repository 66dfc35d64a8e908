"""A replica's queue pump (and batch worker) start with `gateway serve`, before its first request: after kill -9 of
the replica that served, the rows it left waiting are sent by one that never received a request."""

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
from gateway_helpers import CANARY_KEY, add_user, free_port, post, wait_for_port
from helpers import wait_until
from pg_server import PostgresServer, postgres_server  # noqa: F401  (the session fixture)
from queue_fakes import SeatCountingUpstream, data_of

GENERATE = "/v1/music/generate"


def _serve(database: str, upstream: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "ipymusicgen", "gateway", "serve", "--database", database, "--port", str(port)]
    command += ["--upstream", upstream, "--upstream-v2", upstream, "--max-in-flight", "1"]
    env = {**os.environ, "MUSICGEN_UPSTREAM_KEY": CANARY_KEY}
    return subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _quietly(url: str, token: str, style: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # its gateway is killed before it answers
        post(url, GENERATE, token, {"action": "auto", "style": style, "mv": "MFV3.0"})


@pytest.mark.slow  # two gateway processes, one killed with -9, a PostgreSQL server
def test_a_replica_that_never_got_a_request_sends_the_rows_a_killed_one_left_waiting(
    postgres_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    database = postgres_server.new_database()
    token = add_user(database, "noa")
    with SeatCountingUpstream() as upstream:
        upstream.hold = 60.0  # the seated create is made upstream, then answered only after a minute
        ports = free_port(), free_port()
        serving = _serve(database, upstream.url, ports[0], tmp_path / "a.log")
        idle = _serve(database, upstream.url, ports[1], tmp_path / "b.log")
        try:
            wait_for_port(ports[0], serving)
            wait_for_port(ports[1], idle)  # a connect only: no HTTP request ever reaches the second replica
            url = f"http://127.0.0.1:{ports[0]}"
            threading.Thread(target=_quietly, args=(url, token, "n1"), daemon=True).start()
            wait_until(lambda: upstream.styles() == ["n1"], "the first create sent")
            waiting = [data_of(post(url, GENERATE, token, {"action": "auto", "style": s, "mv": "MFV3.0"}))
                       for s in ("n2", "n3")]  # fmt: skip
            assert [w["state"] for w in waiting] == ["queued", "queued"]
            os.kill(serving.pid, signal.SIGKILL)
            serving.wait(10)
            upstream.hold = 0.0
            upstream.finish_all()
            wait_until(lambda: len(upstream.styles()) >= 2, "the idle replica sends a row left waiting")
            upstream.finish_all()
            wait_until(lambda: len(upstream.styles()) == 3, "and the next once the seat frees")
        finally:
            for process in (serving, idle):
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
    assert upstream.styles() == ["n1", "n2", "n3"], "each row sent once, in order"
    assert upstream.peak == 1
