"""A team gateway for tests: served in-process by uvicorn on 127.0.0.1 (or as a real `gateway serve` process),
in front of a keyed sandbox; users made through the real command line."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from helpers import wait_until

from ipymusicgen.__main__ import main
from ipymusicgen.gateway.admission import Limits
from ipymusicgen.gateway.server import build, server_config
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

CANARY_KEY = "upstream-canary-7f3a9c1e5b"
"""The upstream key every gateway test uses: searched for in every answer, log, row and file."""
START_TIMEOUT = 90.0  # a gateway process starting beside a CPU hog (load 12) took over 30 s


def cli(*args: str) -> tuple[int, str]:
    """Run `python -m ipymusicgen gateway ...` in this process; (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["gateway", *args])
    return code, out.getvalue()


def add_user(database: str, name: str, budget: int | None = None) -> str:
    """A new user's token: the last line of `user add`."""
    extra = ["--budget", str(budget)] if budget is not None else []
    code, out = cli("user", "add", name, *extra, "--database", database)
    assert code == 0, out
    return out.strip().splitlines()[-1]


def paid_counts(upstream: Sandbox) -> dict[str, int]:
    """Requests the sandbox received, less the key-info reads the gateway's meter makes in the background."""
    return {path: n for path, n in upstream.request_counts().items() if path != "/v1/get_api_key_info"}


def settled(database: str) -> None:
    """Wait until the gateway's meter has looked at every answered call (each test sends one at a time): measured
    it, or noted why not (a reading below the estimate keeps the estimate)."""

    def measured() -> bool:
        ledger = open_ledger(database)
        try:
            return all(c["measured"] is not None or c["note"] for c in ledger.calls() if c["state"] == "done")
        finally:
            ledger.close()

    wait_until(measured, "every answered call measured")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the gateway exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port}")


class GatewayThread:
    """The gateway app under uvicorn in a daemon thread of this process."""

    def __init__(
        self,
        database: str,
        upstream: str,
        upstream_v2: str,
        key: str = CANARY_KEY,
        limits: Limits | None = None,
        engines: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        import uvicorn

        self.gateway, app = build(database, upstream, upstream_v2, key, "127.0.0.1", limits=limits, engines=engines)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port, limits))  # as `gateway serve` runs
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> GatewayThread:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.gateway.close()

    def env(self, token: str) -> dict[str, str]:
        return {"MUSICGEN_BASE_URL": self.url, "MUSICGEN_V2_BASE_URL": self.url, "MUSICGEN_API_KEY": token}


class GatewayProcess:
    """`python -m ipymusicgen gateway serve` as a real process (killable with -9)."""

    def __init__(self, database: str, upstream: str, upstream_v2: str, log: Path, key: str = CANARY_KEY) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MUSICGEN_UPSTREAM_KEY": key}
        command = [sys.executable, "-m", "ipymusicgen", "gateway", "serve", "--database", database]
        command += ["--port", str(self.port), "--upstream", upstream, "--upstream-v2", upstream_v2]
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(command, env=env, stdout=self._log_file, stderr=subprocess.STDOUT)

    def __enter__(self) -> GatewayProcess:
        try:
            wait_for_port(self.port, self.process)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log_file.close()


def post(url: str, path: str, token: str, body: object, **headers: str) -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"x-api-key": token, **headers}, timeout=30)


# -- the engine paths (ElevenLabs, Lyria) -------------------------------------------------------------------


def dollar_user(database: str, name: str, dollars: str) -> str:
    """A user whose budget is `dollars` US dollars (engine calls are priced in dollars): their token."""
    token = add_user(database, name)
    assert cli("user", "budget-usd", name, dollars, "--database", database)[0] == 0
    return token


def engine_calls(database: str) -> list[dict[str, Any]]:
    """The ledger's engine calls, as `ledger_dollars.calls` lists them."""
    from ipymusicgen.storage import ledger_dollars

    ledger = open_ledger(database)
    try:
        return ledger_dollars.calls(ledger)
    finally:
        ledger.close()


@contextlib.contextmanager
def engines_gateway_over(database: str, upstream: Sandbox) -> Iterator[GatewayThread]:
    """A gateway in a thread serving the service and both engines of `upstream` (a fresh sandbox state)."""
    upstream.reset()
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY), "lyria": (upstream.engines_base_url, CANARY_KEY)}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        yield running
