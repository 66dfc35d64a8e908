"""The host closes the agent server the ordinary way (stdin closed, then SIGTERM after 2 s) while a paid answer's
ids wait in memory because the journal is locked: they end in the journal or in a spill file beside it, never
lost. A real server process over stdio, the SDK's client, a service that answers only once another connection
holds the journal's write lock."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.storage.journal import Journal

pytestmark = pytest.mark.slow

KEY = "k-agent-shutdown-9c2e"
IDS = ("held-1", "held-2")
START_WAIT = 60.0


class Holder:
    """Another connection holding the journal's write lock (BEGIN EXCLUSIVE), as another kernel might."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.held = threading.Event()

    def hold(self) -> None:
        self.db.execute("BEGIN EXCLUSIVE")
        self.held.set()

    def close(self) -> None:
        if self.held.is_set():
            self.db.execute("COMMIT")
        self.db.close()


def service(holder: Holder) -> HostileServer:
    """Credits on a key-info read; a generate answered with IDS once the journal is held."""

    def answer(request: RawRequest, sock: object) -> None:
        if request.method == "GET" and request.path.endswith("get_api_key_info"):
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 100}})  # type: ignore[arg-type]
        elif request.method == "POST" and request.path == "/v1/music/generate":
            holder.hold()
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"ids": list(IDS)}})  # type: ignore[arg-type]
        else:
            respond(sock, 404, {"status": 404, "message": "not here"})  # type: ignore[arg-type]

    return HostileServer(answer)


def _rpc(method: str, params: dict, ident: int | None = None) -> bytes:
    message: dict = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        message["id"] = ident
    return (json.dumps(message) + "\n").encode()


def _answer(stdout: object, ident: int) -> dict:
    while True:
        line = stdout.readline()  # type: ignore[attr-defined]
        assert line, "the server closed its stdout before answering"
        message = json.loads(line)
        if message.get("id") == ident:
            return message


def _kept(path: Path) -> set[str]:
    """Every task id the journal holds once it has taken any spill file (opening it does)."""
    with Journal(path) as journal:
        return {e.id for e in journal.unfinished()} | {e.id for e in journal.history(limit=100)}


def test_ids_waiting_in_memory_survive_the_hosts_ordinary_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    holder = Holder(path)
    server = service(holder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(MUSICGEN_API_KEY=KEY, MUSICGEN_BASE_URL=server.url, MUSICGEN_V2_BASE_URL=server.url)
    env.update(MUSICGEN_JOURNAL=str(path), MUSICGEN_ARCHIVE="off", MUSICGEN_ANALYZE="off")
    process = subprocess.Popen(
        [sys.executable, "-m", "ipymusicgen", "mcp"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
        process.stdin.write(_rpc("initialize", hello, 1))
        process.stdin.flush()
        _answer(process.stdout, 1)
        process.stdin.write(_rpc("notifications/initialized", {}))
        arguments = {"action": "custom", "title": "Held", "style": "locked", "lyrics": "la", "max_credits": 5}
        process.stdin.write(_rpc("tools/call", {"name": "generate_song", "arguments": arguments}, 2))
        process.stdin.flush()
        assert holder.held.wait(START_WAIT), "the paid call never reached the service"
        # The answer is in the server now and its journal write waits on the lock: the host closes it.
        process.stdin.close()
        try:
            process.wait(2)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(START_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError("the server did not end after SIGTERM") from None
    finally:
        holder.close()
        server.close()
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    spills = [p.name for p in tmp_path.iterdir() if ".unsaved-" in p.name]
    assert not [name for name in spills if name.endswith(".part")], spills
    assert set(IDS) <= _kept(path), f"the ids were lost; spills: {spills}; stderr: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-2000:]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_while_serving_ends_the_server_as_sigint_does(tmp_path: Path, signum: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env["MUSICGEN_JOURNAL"] = str(tmp_path / "journal.sqlite3")
    process = subprocess.Popen(
        [sys.executable, "-m", "ipymusicgen", "mcp"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
    process.stdin.write(_rpc("initialize", hello, 1))
    process.stdin.flush()
    _answer(process.stdout, 1)  # it is serving now
    process.send_signal(signum)
    try:
        code = process.wait(START_WAIT)
    finally:
        process.kill()
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    assert code == 0, f"exit {code}: {signal.Signals(signum).name} did not end it cleanly"
    assert "Traceback" not in stderr, stderr[-2000:]
