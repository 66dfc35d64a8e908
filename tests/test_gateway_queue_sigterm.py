"""SIGTERM of a `gateway serve --max-in-flight` replica while its queue's pump is sending a row: the replica waits for
that send's answer and records it before it exits (the call is done, its songs the caller's), instead of leaving it
pending for another replica to mark unknown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gateway_helpers import CANARY_KEY, add_user, free_port, post, wait_for_port
from helpers import wait_until
from queue_fakes import SeatCountingUpstream, data_of

from ipymusicgen.storage.ledger_engines import open_ledger

GENERATE = "/v1/music/generate"


def _states(database: str) -> list[str]:
    ledger = open_ledger(database)
    try:
        return [c["state"] for c in ledger.calls()]
    finally:
        ledger.close()


@pytest.mark.slow  # a gateway process, stopped with SIGTERM
def test_sigterm_mid_send_from_the_queue_records_the_answer_before_the_replica_exits(tmp_path: Path) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "uma")
    port = free_port()
    command = [sys.executable, "-m", "ipymusicgen", "gateway", "serve", "--database", database, "--port", str(port)]
    with SeatCountingUpstream() as upstream:
        command += ["--upstream", upstream.url, "--upstream-v2", upstream.url, "--max-in-flight", "1"]
        env = {**os.environ, "MUSICGEN_UPSTREAM_KEY": CANARY_KEY}
        with (tmp_path / "serve.log").open("wb") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_for_port(port, process)
                url = f"http://127.0.0.1:{port}"
                post(url, GENERATE, token, {"action": "auto", "style": "u1", "mv": "MFV3.0"})
                queued = data_of(post(url, GENERATE, token, {"action": "auto", "style": "u2", "mv": "MFV3.0"}))
                assert queued["state"] == "queued"
                upstream.hold = 4.0  # the queued row, once sent, is answered only after 4 s
                upstream.finish_all()  # the seat frees: the pump sends the row
                wait_until(lambda: upstream.styles() == ["u1", "u2"], "the pump sends the queued row", 60)
                process.send_signal(signal.SIGTERM)
                process.wait(60)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
    assert _states(database) == ["done", "done"], "the answer that came after SIGTERM was recorded"
    assert CANARY_KEY not in (tmp_path / "serve.log").read_text()
