"""For the fair-queue tests: an upstream that counts generations in flight, a clock the test moves, and replicas.

`SeatCountingUpstream` is the service's v1 shape on 127.0.0.1 (uvicorn in a thread): each generate makes two tasks
that stay running until the test finishes them, so "in flight" is exact, not timed; past `limit` running calls it
answers 429 with Retry-After, as the service does. `MovedClock` is the queue's clock: its sleeps end only when the
test moves it on. `Replica` is `gateway serve --max-in-flight N` in a thread of the test process.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from typing import Any

import uvicorn
from gateway_helpers import CANARY_KEY, START_TIMEOUT, free_port
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ipymusicgen.gateway.server import build, server_config


class SeatCountingUpstream:
    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        """Every generate that made tasks, in the order received: its style, ids, and whether it is finished."""
        self.refused_429 = 0
        self.retry_after = "40"
        self.peak = 0
        self.hold = 0.0
        """Seconds each generate waits before answering (after making its tasks: a kill mid-send)."""
        self._numbers = itertools.count(1)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(
            routes=[
                Route("/v1/music/generate", self._generate, methods=["POST"]),
                Route("/v1/music/tasks", self._tasks, methods=["GET"]),
                Route("/v1/get_api_key_info", self._info, methods=["GET"]),
                Route("/v2/submit", self._generate, methods=["POST"]),
                Route("/v2/query", self._query, methods=["GET"]),
            ]
        )
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> SeatCountingUpstream:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started:
            assert time.monotonic() < deadline, "the fake upstream did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def running(self) -> int:
        with self.lock:
            return sum(1 for c in self.calls if not c["finished"])

    def styles(self) -> list[str]:
        with self.lock:
            return [c["style"] for c in self.calls]

    def finish_all(self) -> None:
        with self.lock:
            for call in self.calls:
                call["finished"] = True

    async def _generate(self, request: Request) -> JSONResponse:
        if request.headers.get("x-api-key") != CANARY_KEY:
            return JSONResponse({"detail": "Invalid or missing API key"}, status_code=401)
        body = await request.json()
        with self.lock:
            running = sum(1 for c in self.calls if not c["finished"])
            if self.limit is not None and running >= self.limit:
                self.refused_429 += 1
                message = {"status": 429, "message": "Too many generations running at once", "data": None}
                return JSONResponse(message, status_code=429, headers={"Retry-After": self.retry_after})
            v2 = request.url.path == "/v2/submit"
            if v2:
                body = {"style": body.get("prompt")}
            if body.get("style") == "refuse me":
                return JSONResponse({"status": 400, "message": "style not allowed here", "data": None})
            song = body.get("continue_song_id")  # a song this upstream never made: as the service says it
            made = {i for c in self.calls for i in c["ids"]}
            unknown = f"Song not found: continue_song_id {song!r}" if song and song not in made else None
            if unknown and body.get("action") == "concat":  # refused at once
                return JSONResponse({"status": 400, "message": unknown, "data": None})
            number = next(self._numbers)
            ids = [f"{'v2' if v2 else 'up'}-{number}-a", f"{'v2' if v2 else 'up'}-{number}-b"]
            self.calls.append({"style": body.get("style"), "ids": ids, "finished": False, "fail_reason": unknown})
            self.peak = max(self.peak, running + 1)
        if self.hold:
            await asyncio.sleep(self.hold)
        if v2:
            songs = [{"song_id": i, "status": "RUNNING", "audio_duration": -1, "tags": body["style"]} for i in ids]
            return JSONResponse({"status": 200, "message": "Success", "data": songs})
        return JSONResponse({"status": 200, "message": "Success", "data": {"ids": ids}})

    async def _tasks(self, request: Request) -> JSONResponse:
        asked = request.query_params.get("ids")
        with self.lock:
            records = [
                {
                    "id": i,
                    "status": 3 if c["fail_reason"] else 0 if c["finished"] else 1,
                    "style": c["style"],
                    "title": None,
                    "duration": -1,
                    "fail_reason": c["fail_reason"],
                }
                for c in self.calls
                for i in c["ids"]
                if asked is None or i in asked.split(",")
            ]
        return JSONResponse({"status": 200, "message": "Success", "data": records})

    async def _query(self, request: Request) -> JSONResponse:
        asked = request.query_params.get("song_id")
        with self.lock:
            songs = [
                {"song_id": i, "status": "FINISHED" if c["finished"] else "RUNNING", "tags": c["style"]}
                for c in self.calls
                for i in c["ids"]
                if i == asked
            ]
        return JSONResponse({"status": 200, "message": "Success", "data": songs})

    async def _info(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": 200, "message": "Success", "data": {"key_music_counts": 100_000}})


class MovedClock:
    """Wall-clock seconds that move only when the test says; a sleep ends once the clock has passed its end."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.lock = threading.Lock()
        self.sleepers: list[tuple[float, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self.lock:
            self.sleepers.append((self.now + seconds, loop, future))
        await future

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds
            due = [s for s in self.sleepers if s[0] <= self.now]
            self.sleepers = [s for s in self.sleepers if s[0] > self.now]
        for _, loop, future in due:
            loop.call_soon_threadsafe(lambda f=future: f.done() or f.set_result(None))


class Replica:
    """One gateway replica with `--max-in-flight` under uvicorn in a daemon thread of this process."""

    def __init__(self, database: str, upstream: str, seats: int, clock: Any = None) -> None:
        self.gateway, app = build(
            database, upstream, upstream, CANARY_KEY, "127.0.0.1", max_in_flight=seats, clock=clock
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Replica:
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


def data_of(answer: Any) -> Any:
    return json.loads(answer.content)["data"]
