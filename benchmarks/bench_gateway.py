"""Figure 16: the team gateway's cost: a task query and a paid create through it vs straight to the upstream.

Measured as a team runs it: the gateway is its own process (`python -m ipymusicgen gateway serve`, SQLite ledger
in a temporary folder), the upstream (a keyed sandbox) is another, and this process only times the calls, so no
side pays for another's GIL. Each side uses one keep-alive httpx client on loopback; sides alternate in rounds
and medians are compared (goal <= 1.5x). Throughput: 200 task queries sent at once through the gateway, next to
the same 200 straight to the upstream.

The floor: a bare pass-through proxy (Starlette, served by the same `run_app` as the gateway in a process of its
own, one keep-alive aiohttp session on the event loop like the gateway's upstream face, forwarding path, query
and body with nothing checked or recorded) measured in the same rounds. Its ratio is what a second loopback hop
alone costs here; the gateway's own work is what it adds above that (`*_floor_ratio`, `*_over_floor_ms`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from ._common import ROOT, Row, child_env, interleaved, median, ratio, spread

KEY = "k-bench-gateway-01"
GOAL = 1.5
CONCURRENT, QUICK_CONCURRENT = 200, 50
"""Task queries sent at once for the throughput row (`--quick`: fewer; the loaded test machine spent most of the
quick figure's time on three bursts of 200)."""
QUEUE_AHEAD, QUICK_QUEUE_AHEAD = 20, 3
"""Creates sent to the one-seat gateway before its queued creates are timed (it sends at most one per 2 s, and each
timed create joins the line too, so a few ahead keep it from ever emptying)."""
BODY = {"action": "auto", "style": "bench", "mv": "MFV3.0"}
START_SECONDS = 60
UPSTREAM_KEY_ENV = "MUSICGEN_UPSTREAM_KEY"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Process:
    """A server process (its output in `folder`/`name`.log), started at once; `ready` waits until every port
    accepts, `stop` ends it."""

    def __init__(self, name: str, argv: list[str], ports: list[int], folder: Path, env: dict[str, str]) -> None:
        self.name, self.ports, self.log = name, ports, folder / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, *argv], cwd=ROOT, env=child_env(env), stdout=out, stderr=subprocess.STDOUT
            )

    def ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        waiting = list(self.ports)
        while waiting:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the {self.name} exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {self.name} did not start in {START_SECONDS} s:\n{self.log.read_text()[-3000:]}"
                )
            try:
                socket.create_connection(("127.0.0.1", waiting[0]), timeout=1).close()
                waiting.pop(0)
            except OSError:
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


# -- the child processes: `python -m benchmarks.bench_gateway upstream|bare ...` --------------------------------


def _serve_upstream(port: int, v2_port: int) -> None:
    """The keyed sandbox on fixed ports, until this process is ended."""
    import threading

    from ipymusicgen.sandbox import Sandbox

    keys = {os.environ[UPSTREAM_KEY_ENV]: 10**9}
    with Sandbox(
        stage_seconds=0.05, song_seconds=2, keys=keys, faults="", max_running=10**6, port=port, v2_port=v2_port
    ):
        threading.Event().wait()


def _bare_proxy(upstream: str, key: str) -> Any:
    """An app forwarding every request to `upstream` under `key`, nothing more: the gateway's stack (Starlette on
    the event loop, one keep-alive aiohttp session) with nothing checked or recorded."""
    import aiohttp
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    sessions: list[aiohttp.ClientSession] = []

    async def endpoint(request: Request) -> Response:
        if not sessions:
            sessions.append(aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()))
        body = await request.body()
        headers = {"x-api-key": key, "content-type": "application/json"}
        async with sessions[0].request(
            request.method, upstream + request.url.path, params=dict(request.query_params), data=body, headers=headers
        ) as answer:
            return Response(await answer.read(), answer.status, media_type="application/json")

    paths = ("/v1/music/tasks", "/v1/music/generate")
    return Starlette(routes=[Route(p, endpoint, methods=["GET", "POST"]) for p in paths])


def _serve_bare(upstream: str, port: int) -> None:
    from ipymusicgen.gateway.server import run_app

    run_app(_bare_proxy(upstream, os.environ[UPSTREAM_KEY_ENV]), "127.0.0.1", port)


# -- the timing side ----------------------------------------------------------------------------------------------


@contextmanager
def _deployment(folder: Path) -> Iterator[tuple[str, str, str, str, str, str]]:
    """(upstream URL, gateway URL, bare proxy URL, a user's token, the one-seat gateway's URL, its user's token):
    the upstream and the bare proxy start at once, both gateways together as soon as the upstream listens (each
    reads the credits left as it starts). The one-seat gateway (`--max-in-flight 1`) has a ledger of its own: once
    its seat is taken and a row waits, every create is answered queued at once (its pump sends one every few
    seconds)."""
    from ipymusicgen.gateway.tokens import new_token, token_hash
    from ipymusicgen.storage.ledger_engines import open_ledger

    databases = str(folder / "gateway.sqlite3"), str(folder / "queued.sqlite3")
    tokens = new_token(), new_token()
    for database, token in zip(databases, tokens, strict=True):
        with open_ledger(database) as ledger:  # the admin's `gateway user add`, before the gateway opens it
            ledger.add_user("bench", token_hash(token), None)
    port, v2_port, gateway_port, bare_port, queue_port = (_free_port() for _ in range(5))
    upstream, upstream_v2 = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{v2_port}"
    env = {UPSTREAM_KEY_ENV: KEY}
    with ExitStack() as stack:
        serve_upstream = ["-m", "benchmarks.bench_gateway", "upstream", str(port), str(v2_port)]
        upstream_process = _Process("upstream", serve_upstream, [port, v2_port], folder, env)
        stack.callback(upstream_process.stop)
        bare = _Process(
            "bare proxy", ["-m", "benchmarks.bench_gateway", "bare", upstream, str(bare_port)], [bare_port], folder, env
        )
        stack.callback(bare.stop)
        upstream_process.ready()
        serve = ["-m", "ipymusicgen", "gateway", "serve", "--database", databases[0], "--port", str(gateway_port)]
        serve += ["--upstream", upstream, "--upstream-v2", upstream_v2]
        gateway = _Process("gateway", serve, [gateway_port], folder, env)
        stack.callback(gateway.stop)
        queued = ["-m", "ipymusicgen", "gateway", "serve", "--database", databases[1], "--port", str(queue_port)]
        queued += ["--upstream", upstream, "--upstream-v2", upstream, "--max-in-flight", "1"]
        queue = _Process("queued gateway", queued, [queue_port], folder, env)
        stack.callback(queue.stop)
        for process in (bare, gateway, queue):
            process.ready()
        yield (
            upstream,
            f"http://127.0.0.1:{gateway_port}",
            f"http://127.0.0.1:{bare_port}",
            tokens[0],
            f"http://127.0.0.1:{queue_port}",
            tokens[1],
        )


def _timed(call: Any, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - start) / count


async def _burst(url: str, key: str, ids: str, concurrent: int = CONCURRENT) -> float:
    """Seconds for `concurrent` task queries sent at once."""
    limits = httpx.Limits(max_connections=concurrent, max_keepalive_connections=concurrent)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(
                client.get(url + "/v1/music/tasks", params={"ids": ids}, headers={"x-api-key": key})
                for _ in range(concurrent)
            )
        )
        took = time.perf_counter() - start
    if any(a.status_code != 200 for a in answers):
        raise RuntimeError("a task query failed during the burst")
    return took


SMALL_LEDGER, LARGE_LEDGER = 100, 100_000
"""Prior calls in the two ledgers a reservation is timed on (figure 16 details: goal about 1x)."""


def _ledger_with_calls(path: Path, calls: int) -> Any:
    """A SQLite ledger holding `calls` prior calls of one user under a user and a team budget (both checked)."""
    import sqlite3

    from ipymusicgen.storage.ledger_engines import open_ledger

    ledger = open_ledger(str(path))
    ledger.add_user("ann", "hash-ann", 10**12)
    ledger.set_team_budget(10**12)
    ledger.close()
    with sqlite3.connect(path) as db:  # written in one transaction: 100,000 reservations one by one take minutes
        db.executemany(
            "INSERT INTO calls (user_name, idem_key, endpoint, model, estimated, measured, state, created_at, day) "
            "VALUES ('ann', ?, '/v1/music/generate', 'MFV3.0', 3, 2, 'done', 0, '2026-01-01')",
            ((f"prior-{n}",) for n in range(calls)),
        )
    return open_ledger(str(path))


def _reservation_scaling(folder: Path, rounds: int, count: int) -> Row:
    """One reservation's time (claiming a new key and checking both budgets) on a ledger of 100,000 prior calls
    against one of 100, in one run; each reservation is released again, so the ledgers keep their sizes."""
    small = _ledger_with_calls(folder / "small.sqlite3", SMALL_LEDGER)
    large = _ledger_with_calls(folder / "large.sqlite3", LARGE_LEDGER)

    def reserve(ledger: Any) -> float:
        took = 0.0
        for _ in range(count):
            start = time.perf_counter()
            made = ledger.reserve("ann", uuid.uuid4().hex, "/v1/music/generate", "MFV3.0", 3)
            took += time.perf_counter() - start
            ledger.finish(made.call_id, "refused", 400, b"{}")
        return took / count

    try:
        for ledger in (small, large):
            reserve(ledger)  # warm
        samples = interleaved({"small": lambda: reserve(small), "large": lambda: reserve(large)}, rounds)
    finally:
        small.close()
        large.close()
    at_small, at_large = median(samples["small"]), median(samples["large"])
    return Row(
        16,
        f"a reservation at {LARGE_LEDGER:,} prior calls vs at {SMALL_LEDGER} (SQLite ledger)",
        round(at_large * 1e3, 3),
        "ms/call",
        baseline=round(at_small * 1e3, 3),
        ratio=round(ratio(at_large, at_small), 2),
        target="about 1x (report)",
        details={name: spread([v * 1e3 for v in values]) for name, values in samples.items()},
    )


def run(quick: bool = False) -> list[Row]:
    rounds, count = (3, 5) if quick else (9, 30)
    concurrent, ahead = (QUICK_CONCURRENT, QUICK_QUEUE_AHEAD) if quick else (CONCURRENT, QUEUE_AHEAD)
    with tempfile.TemporaryDirectory() as tmp:
        scaling = _reservation_scaling(Path(tmp), rounds, count * 4)
    with (
        tempfile.TemporaryDirectory() as tmp,
        _deployment(Path(tmp)) as (upstream, gateway, bare, token, queue, queue_token),
    ):
        with httpx.Client(timeout=30) as http:

            def create(url: str, key: str) -> httpx.Response:
                headers = {"x-api-key": key, "Idempotency-Key": uuid.uuid4().hex}
                answer = http.post(url + "/v1/music/generate", json=BODY, headers=headers)
                if answer.status_code != 200 or answer.json().get("status") != 200:
                    raise RuntimeError(f"a create failed: {answer.status_code}")
                return answer

            ids = ",".join(create(gateway, token).json()["data"]["ids"])  # the user's own tasks
            for _ in range(ahead):  # the first takes the one seat, the rest wait: the line never empties (its
                create(queue, queue_token)  # pump sends one row each time a seat's songs are seen finished)

            def queued(url: str, key: str) -> None:
                if create(url, key).json()["data"].get("state") != "queued":
                    raise RuntimeError("a create meant to wait in line was sent at once")

            def query(url: str, key: str) -> None:
                answer = http.get(url + "/v1/music/tasks", params={"ids": ids}, headers={"x-api-key": key})
                if answer.status_code != 200:
                    raise RuntimeError("a task query failed")

            sides = {
                "query_direct": lambda: _timed(lambda: query(upstream, KEY), count),
                "query_gateway": lambda: _timed(lambda: query(gateway, token), count),
                "query_floor": lambda: _timed(lambda: query(bare, "unused"), count),
                "create_direct": lambda: _timed(lambda: create(upstream, KEY), count),
                "create_gateway": lambda: _timed(lambda: create(gateway, token), count),
                "create_floor": lambda: _timed(lambda: create(bare, "unused"), count),
                "create_queued": lambda: _timed(lambda: queued(queue, queue_token), count),
            }
            for side in sides.values():
                side()  # warm every path
            samples = interleaved(sides, rounds)
        burst_direct = asyncio.run(_burst(upstream, KEY, ids, concurrent))
        burst_gateway = asyncio.run(_burst(gateway, token, ids, concurrent))
        burst_floor = asyncio.run(_burst(bare, "unused", ids, concurrent))
    from ipymusicgen.gateway.server import server_options

    medians = {name: median(values) for name, values in samples.items()}
    details: dict[str, Any] = {name: spread([v * 1e3 for v in values]) for name, values in samples.items()}
    details.update(
        calls_per_sample=count,
        cpus=os.cpu_count(),
        ledger="sqlite",
        processes="client | gateway | upstream",
        server=server_options(),
        burst_floor_per_s=round(concurrent / burst_floor, 1),
    )
    rows = []
    for what, label in (("query", "task query"), ("create", "paid create")):
        through, direct = medians[f"{what}_gateway"], medians[f"{what}_direct"]
        value = ratio(through, direct)
        details[f"{what}_floor_ratio"] = round(ratio(medians[f"{what}_floor"], direct), 2)
        details[f"{what}_over_floor_ms"] = round((through - medians[f"{what}_floor"]) * 1e3, 2)
        rows.append(
            Row(
                16,
                f"{label} through the gateway vs straight to the upstream",
                round(through * 1e3, 2),
                "ms/call",
                baseline=round(direct * 1e3, 2),
                ratio=round(value, 2),
                target=f"<= {GOAL}x",
                passed=value <= GOAL,
                details=details if what == "query" else {},
            )
        )
    queued_ratio = ratio(medians["create_queued"], medians["create_gateway"])
    rows.append(
        Row(
            16,
            "paid create queued by the gateway (--max-in-flight 1, its seat taken) vs one it sends at once",
            round(medians["create_queued"] * 1e3, 2),
            "ms/call",
            baseline=round(medians["create_gateway"] * 1e3, 2),
            ratio=round(queued_ratio, 2),
            target=f"<= {GOAL}x",
            passed=queued_ratio <= GOAL,
            details={"vs_upstream_ratio": round(ratio(medians["create_queued"], medians["create_direct"]), 2)},
        )
    )
    rows.append(
        Row(
            16,
            f"{concurrent} concurrent task queries through the gateway",
            round(concurrent / burst_gateway, 1),
            "queries/s",
            baseline=round(concurrent / burst_direct, 1),
            ratio=round(ratio(burst_gateway, burst_direct), 2),
        )
    )
    rows.append(scaling)
    return rows


def main(argv: list[str]) -> int:
    """The child processes' entry: `upstream PORT V2_PORT` or `bare UPSTREAM_URL PORT`."""
    if argv[:1] == ["upstream"] and len(argv) == 3:
        _serve_upstream(int(argv[1]), int(argv[2]))
    elif argv[:1] == ["bare"] and len(argv) == 3:
        _serve_bare(argv[1], int(argv[2]))
    else:
        print(
            "usage: python -m benchmarks.bench_gateway upstream PORT V2_PORT | bare UPSTREAM_URL PORT", file=sys.stderr
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
