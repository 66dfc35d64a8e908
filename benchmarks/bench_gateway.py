"""Figure 16: the team gateway's cost: a task query and a paid create through it vs straight to the upstream.

One keyed sandbox in this process plays the upstream; the gateway (SQLite ledger in a temporary folder) is
served by uvicorn in a thread of this process, as `gateway serve` would serve it. Both sides use one keep-alive
httpx client on loopback; sides alternate in rounds and medians are compared (goal <= 1.5x). Throughput: 200
task queries sent at once through the gateway, next to the same 200 straight to the upstream.

The floor: a bare pass-through proxy (the same Starlette, uvicorn and one keep-alive httpx client, forwarding
path, query and body with nothing checked or recorded) measured in the same rounds. Its ratio is what a second
loopback hop alone costs here; the gateway's own work is what it adds above that (`floor_ratio` in details).
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from ipymusicgen.gateway.server import build
from ipymusicgen.gateway.tokens import new_token, token_hash
from ipymusicgen.sandbox import Sandbox

from ._common import Row, interleaved, median, ratio, spread

KEY = "k-bench-gateway-01"
GOAL = 1.5
CONCURRENT = 200
BODY = {"action": "auto", "style": "bench", "mv": "MFV3.0"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Served:
    """The gateway app under uvicorn in a daemon thread."""

    def __init__(self, database: str, sandbox: Sandbox) -> None:
        import uvicorn

        self.gateway, app = build(database, sandbox.base_url, sandbox.v2_base_url, KEY, "127.0.0.1")
        self.url = f"http://127.0.0.1:{_free_port()}"
        port = int(self.url.rsplit(":", 1)[1])
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.gateway.close()


def _bare_proxy(upstream: str, key: str) -> tuple[object, object]:
    """(app, its upstream client): forwards every request to `upstream` under `key`, nothing more."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    http = httpx.Client(timeout=30)

    def forward(method: str, path: str, params: dict[str, str], body: bytes) -> Response:
        headers = {"x-api-key": key, "content-type": "application/json"}
        answer = http.request(method, upstream + path, params=params, content=body, headers=headers)
        return Response(answer.content, answer.status_code, media_type="application/json")

    async def endpoint(request: Request) -> Response:
        body = await request.body()
        return await run_in_threadpool(forward, request.method, request.url.path, dict(request.query_params), body)

    paths = ("/v1/music/tasks", "/v1/music/generate")
    return Starlette(routes=[Route(p, endpoint, methods=["GET", "POST"]) for p in paths]), http


class _Bare:
    """The bare proxy under uvicorn in a daemon thread, served exactly as the gateway is."""

    def __init__(self, sandbox: Sandbox) -> None:
        import uvicorn

        app, self.http = _bare_proxy(sandbox.base_url, KEY)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Bare:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the bare proxy did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.http.close()  # type: ignore[attr-defined]


def _timed(call: object, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        call()  # type: ignore[operator]
    return (time.perf_counter() - start) / count


async def _burst(url: str, key: str, ids: str) -> float:
    """Seconds for CONCURRENT task queries sent at once."""
    limits = httpx.Limits(max_connections=CONCURRENT, max_keepalive_connections=CONCURRENT)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(
                client.get(url + "/v1/music/tasks", params={"ids": ids}, headers={"x-api-key": key})
                for _ in range(CONCURRENT)
            )
        )
        took = time.perf_counter() - start
    if any(a.status_code != 200 for a in answers):
        raise RuntimeError("a task query failed during the burst")
    return took


def run(quick: bool = False) -> list[Row]:
    rounds, count = (3, 5) if quick else (9, 30)
    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, keys={KEY: 10**9}, faults="", max_running=10**6) as sandbox,
        tempfile.TemporaryDirectory() as tmp,
    ):
        database = str(Path(tmp) / "gateway.sqlite3")
        token = new_token()
        with _Served(database, sandbox) as served, _Bare(sandbox) as bare:
            served.gateway.ledger.add_user("bench", token_hash(token), None)
            with httpx.Client(timeout=30) as http:

                def create(url: str, key: str) -> httpx.Response:
                    headers = {"x-api-key": key, "Idempotency-Key": uuid.uuid4().hex}
                    answer = http.post(url + "/v1/music/generate", json=BODY, headers=headers)
                    if answer.status_code != 200 or answer.json().get("status") != 200:
                        raise RuntimeError(f"a create failed: {answer.status_code}")
                    return answer

                ids = ",".join(create(served.url, token).json()["data"]["ids"])  # the user's own tasks

                def query(url: str, key: str) -> None:
                    if (
                        http.get(url + "/v1/music/tasks", params={"ids": ids}, headers={"x-api-key": key}).status_code
                        != 200
                    ):
                        raise RuntimeError("a task query failed")

                sides = {
                    "query_direct": lambda: _timed(lambda: query(sandbox.base_url, KEY), count),
                    "query_gateway": lambda: _timed(lambda: query(served.url, token), count),
                    "query_floor": lambda: _timed(lambda: query(bare.url, "unused"), count),
                    "create_direct": lambda: _timed(lambda: create(sandbox.base_url, KEY), count),
                    "create_gateway": lambda: _timed(lambda: create(served.url, token), count),
                    "create_floor": lambda: _timed(lambda: create(bare.url, "unused"), count),
                }
                for side in sides.values():
                    side()  # warm both paths
                samples = interleaved(sides, rounds)
            burst_direct = asyncio.run(_burst(sandbox.base_url, KEY, ids))
            burst_gateway = asyncio.run(_burst(served.url, token, ids))
    medians = {name: median(values) for name, values in samples.items()}
    details = {name: spread([v * 1e3 for v in values]) for name, values in samples.items()}
    details.update(calls_per_sample=count, cpus=os.cpu_count(), ledger="sqlite")
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
    rows.append(
        Row(
            16,
            f"{CONCURRENT} concurrent task queries through the gateway",
            round(CONCURRENT / burst_gateway, 1),
            "queries/s",
            baseline=round(CONCURRENT / burst_direct, 1),
            ratio=round(ratio(burst_gateway, burst_direct), 2),
        )
    )
    return rows
