"""The gateway's batch paths (the project's own, under /gateway/v1/): a notebook hands a batch over whole, follows it
by name, and may stop it; each user sees only their own batches (another's name answers as a missing one).

- `POST /gateway/v1/batches` {"name", "rows": [{"v2": bool, "body": {...}}], "concurrency", "budget",
  "stall_timeout"}: recorded (or attached to: the same name and rows send nothing twice) and run by the replicas'
  workers (`batch_worker.py`); refused whole, nothing recorded, for a bad row, a row that is not the one first
  recorded under its index, or rows that would cost more than is left. `"retry_unknown": [{"index", "attempt"}]`
  (the notebook's `retry_unknown=True`) resends those rows once if they are still unknown at that attempt.
- `GET /gateway/v1/batches?name=N`: the batch and each row's state; without `name`, the caller's batches.
- `POST /gateway/v1/batches/stop` {"name"}: rows not yet sent are skipped.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..batch.rows import BatchError, validate_rows
from ..models.costs import estimate_credits
from .admission import Limits, read_body, refusal
from .batch_store import NewRow, Submitted
from .batch_worker import BatchWorker
from .credit_rate import no_rate_answer

MAX_ROWS = 10_000
MAX_NAME = 200
BODY_BYTES = 32 << 20
"""The largest batch body taken (a row is a few hundred bytes; lyrics make some rows a few KB)."""
MISSING = "No batch of yours has that name."
PATH = "/gateway/v1/batches"


def _answer(data: Any, status: int = 200, message: str = "Success") -> JSONResponse:
    return JSONResponse({"status": status, "message": message, "data": data}, status_code=status)


def _refused(status: int, message: str) -> JSONResponse:
    return _answer(None, status, message)


class StartsWorker:
    """ASGI middleware: the replica's batch worker starts on the serving loop with its first request (or with the
    server's lifespan start, where it is on)."""

    def __init__(self, app: ASGIApp, worker: BatchWorker) -> None:
        self.app = app
        self.worker = worker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.worker.start()
        await self.app(scope, receive, send)


def _keepable(text: str) -> bool:
    """Text every ledger keeps: no NUL (PostgreSQL's text holds none), no lone surrogate (no UTF-8 for it)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _name_of(value: Any) -> str | None:
    ok = isinstance(value, str) and 1 <= len(value) <= MAX_NAME and value.strip() and _keepable(value)
    return value if ok else None


def _encodable(payload: Any) -> bool:
    """A row the upstream can be sent: its JSON as UTF-8 (a lone surrogate in a text field has none)."""
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return False
    return True


def _whole(value: Any, low: int, high: int) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return value if ok else None


def batch_parts(gateway: Any, limits: Limits, invalid_key: str) -> tuple[list[Route], Middleware]:
    """The batch routes and the middleware that starts this replica's worker (`create_app` adds both);
    `invalid_key` is the service's answer to a missing or wrong token, as every other path gives it."""
    worker = BatchWorker(gateway)
    store = worker.store

    def route(path: str, method: str, handler: Callable[[str, Request], Awaitable[Response]]) -> Route:
        async def endpoint(request: Request) -> Response:
            user = await gateway.user_of(request.headers.get("x-api-key"))
            if user is None:  # before the body: a caller without a live token gets none of it read
                return refusal(401, invalid_key)
            return await handler(user, request)

        return Route(path, endpoint, methods=[method])

    async def body_of(request: Request) -> dict[str, Any] | Response:
        raw = await read_body(request, max(BODY_BYTES, limits.max_body_bytes))
        if isinstance(raw, Response):
            return raw
        return await asyncio.to_thread(_parsed, raw)  # a 10,000-row body is not parsed on the serving loop

    async def submit(user: str, request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        # checked off the serving loop (10,000 rows take seconds): the other users' calls go on meanwhile
        checked = await asyncio.to_thread(_checked, body)
        if isinstance(checked, Response):
            return checked
        name, new, naming, concurrency, budget, stall, retry = checked
        for number, payload in naming:
            problem = await _foreign(gateway, user, payload)
            if problem:
                return _refused(422, f"The batch was refused whole, nothing was sent: row {number}: {problem}")
        decided: Submitted = await gateway.blocking(store.submit, user, name, new, concurrency, budget, stall, retry)
        if decided.kind == "conflict":
            index = (decided.index or 0) + 1
            return _refused(
                409,
                f"Row {index} of batch {name!r} is not the request first recorded under that name and row; nothing "
                "was sent. Use a new name for a changed batch (or leave the name out).",
            )
        if decided.kind == "no_rate":  # every row would be refused: so is the batch, whole, nothing recorded
            return no_rate_answer(user)
        if decided.kind == "over":
            return _answer(
                {"refused": "over", "estimate": decided.estimate, "left": decided.left, "whose": decided.whose}
            )
        worker.wake()
        return _answer(await gateway.blocking(store.status, user, name))

    async def status(user: str, request: Request) -> Response:
        name = request.query_params.get("name")
        if name is None:
            mine = await gateway.blocking(store.summaries, user)
            return _answer([{"name": s.name, "state": s.state, "rows": s.rows, **s.counts} for s in mine])
        found = await gateway.blocking(store.status, user, name) if _keepable(name) else None
        return _refused(404, MISSING) if found is None else _answer(found)

    async def stop(user: str, request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        name = body.get("name")
        if (
            not isinstance(name, str)
            or not _keepable(name)
            or not await gateway.blocking(store.stop, name, user, False)
        ):
            return _refused(404, MISSING)
        return _answer(await gateway.blocking(store.status, user, name))

    routes = [route(PATH, "POST", submit), route(PATH, "GET", status), route(PATH + "/stop", "POST", stop)]
    return routes, Middleware(StartsWorker, worker=worker)


def _parsed(raw: bytes) -> dict[str, Any] | Response:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return _refused(422, "the body is not a JSON object")
    return body if isinstance(body, dict) else _refused(422, "the body is not a JSON object")


NAMING = ("audio_url", "continue_song_id", "singer_id")
"""A row's fields that name something of someone's (checked against the caller's own: `_foreign`)."""


Checked = tuple[str, list[NewRow], list[tuple[int, Any]], int, Any, float, dict[int, int]]


def _retry_of(value: Any) -> dict[int, int] | None:
    """`retry_unknown`: [{"index", "attempt"}] (the rows the user asks to resend, at the attempt they saw), or None
    when it is not that shape."""
    if value is None:
        return {}
    if not isinstance(value, list) or len(value) > MAX_ROWS:
        return None
    asked = {}
    for item in value:
        index = _whole(item.get("index"), 0, MAX_ROWS) if isinstance(item, dict) else None
        attempt = _whole(item.get("attempt"), 0, 10**6) if isinstance(item, dict) else None
        if index is None or attempt is None:
            return None
        asked[index] = attempt
    return asked


def _checked(body: dict[str, Any]) -> Response | Checked:
    """A submission's fields and rows checked (no I/O: run off the serving loop), or its refusal: the name, the
    rows to record, the rows naming something to check as the caller's, concurrency, budget, stall timeout and the
    unknown rows to resend."""
    name = _name_of(body.get("name"))
    rows = body.get("rows")
    concurrency = _whole(body.get("concurrency", 3), 1, 1000)
    budget = body.get("budget")
    stall = body.get("stall_timeout", 900)
    if name is None:
        return _refused(422, f"name: 1 to {MAX_NAME} characters, not blank, no NUL or lone surrogate")
    if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_ROWS:
        return _refused(422, f"rows: a list of 1 to {MAX_ROWS} rows")
    if concurrency is None:
        return _refused(422, "concurrency: a whole number from 1 to 1000")
    if budget is not None and _whole(budget, 0, 10**12) is None:
        return _refused(422, "budget: a whole number of credits from 0, or null")
    if isinstance(stall, bool) or not isinstance(stall, int | float) or not 0 < stall < math.inf:
        return _refused(422, "stall_timeout: seconds, more than 0")
    retry = _retry_of(body.get("retry_unknown"))
    if retry is None:
        return _refused(422, 'retry_unknown: a list of {"index": row, "attempt": n} (as the batch\'s status shows)')
    mappings = []
    for row in rows:
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("body"), dict)
            or not isinstance(row.get("v2", False), bool)
        ):
            return _refused(422, 'rows: each row is {"v2": true|false, "body": {...}}')
        mappings.append({**row["body"], "v2": row.get("v2") is True})
    try:
        checked = validate_rows(mappings, allow_unknown_models=True)
    except BatchError as exc:
        return _refused(422, str(exc))
    new, naming = [], []
    for row in checked:
        payload = row.request.to_payload()
        if not _encodable(payload):
            return _refused(
                422, f"The batch was refused whole, nothing was sent: row {row.number}: a text field holds a lone "
                "surrogate (not UTF-8)",
            )  # fmt: skip
        if isinstance(payload, dict) and any(payload.get(field) for field in NAMING):
            naming.append((row.number, payload))
        new.append(NewRow(row.request_hash, json.dumps(payload), row.v2, estimate_credits(row.request)))
    return name, new, naming, concurrency, budget, float(stall), retry


async def _foreign(gateway: Any, user: str, payload: Any) -> str | None:
    """What a row names that is not the caller's (a song to continue, a singer, a file to upload from), as the
    paid path checks a single call's: the same words for another user's and a missing one."""
    if not isinstance(payload, dict):
        return None
    from .files import FOREIGN_FILE

    audio = payload.get("audio_url")
    if audio and not await gateway.files.allows(user, str(audio)):
        return f"audio_url: {FOREIGN_FILE}"
    song = payload.get("continue_song_id")
    if song and not await gateway.owns_song(user, str(song)):
        return "continue_song_id: not one of your songs"
    singer = payload.get("singer_id")
    if singer and not await gateway.owns_singer(user, str(singer)):
        return "singer_id: not one of your singer voices"
    return None
