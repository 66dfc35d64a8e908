"""ASGI layer in front of each app: counts every request, then injects the planned fault, if any.

Plain ASGI (not Starlette's BaseHTTPMiddleware) so the request runs in the server's own task, which
lets `drop` close the very connection it arrived on. The admin paths are never counted or faulted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .faults import FaultRule
from .state import SandboxState

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ADMIN_PREFIX = "/_sandbox"
DROP_EXTENSION = "ipymusicgen.drop"
"""Key in `scope["extensions"]` of a callable that closes the connection (set by the server)."""
TASK_FAIL_STATE = "sandbox_task_fail"
"""Key in `scope["state"]` (Starlette's `request.state`) of a `task_fail` rule for the handler."""


class DroppedConnection(Exception):
    """Raised when no transport can be closed (e.g. under a test client): the closest to a drop."""


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """A `receive` that hands the app a body read earlier, then reports the client gone."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return receive


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def _json(data: Any) -> bytes:
    return json.dumps(data).encode()


class SandboxMiddleware:
    """Counting and fault injection for one app (the v1 or the v2 host, or the engines' host: `engines`, where a
    fault answers in the engine's own error shape, ElevenLabs' or Google's)."""

    def __init__(self, app: ASGIApp, state: SandboxState, *, engines: bool = False) -> None:
        self.app = app
        self.state = state
        self.engines = engines

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        self.state.count(path)
        rule = self.state.faults.pick(path)
        if rule is None:
            await self.app(scope, receive, send)
            return
        if rule.kind == "task_fail":
            scope.setdefault("state", {})[TASK_FAIL_STATE] = rule
            await self.app(scope, receive, send)
            return
        if rule.kind == "slow":
            await self._slow(rule, scope, receive, send)
            return
        if rule.after:
            await self.app(scope, receive, _discard)
        else:
            await _read_body(receive)  # read it all, so answering early leaves the connection clean
        await self._fault(rule, scope, send)

    async def _slow(self, rule: FaultRule, scope: Scope, receive: Receive, send: Send) -> None:
        """The work is done at once, the answer comes late: as a slow real service that a client gives up on."""
        body = await _read_body(receive)
        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        await self.app(scope, _replay(body), hold)
        await asyncio.sleep(rule.seconds)
        for message in held:
            await send(message)  # uvicorn drops it quietly if the client has hung up

    async def _fault(self, rule: FaultRule, scope: Scope, send: Send) -> None:
        google = _is_gemini(scope.get("path", ""))
        eleven = self.engines and not google
        if rule.kind == "rate_limit":
            message = "Too many requests (sandbox fault injection)"
            body = _json(_google_error(429, message, "RESOURCE_EXHAUSTED") if google else _detail(message, eleven, 429))
            await _answer(send, 429, body, [(b"retry-after", b"1")])
        elif rule.kind == "server_error":
            message = "Internal Server Error (sandbox fault injection)"
            body = _json(_google_error(500, message, "INTERNAL") if google else _detail(message, eleven, 500))
            await _answer(send, 500, body)
        elif rule.kind == "malformed":
            await _answer(send, 200, b'{"status": 200, "message": "Success", "data": {"ids": [')
        elif rule.kind == "envelope_error":
            await _answer(send, 200, _json({"status": 500, "message": "internal error", "data": None}))
        elif rule.kind == "drop":
            drop = scope.get("extensions", {}).get(DROP_EXTENSION)
            if drop is None:
                raise DroppedConnection("sandbox fault injection: drop")
            drop()
            await asyncio.sleep(0.01)  # let the server see the connection gone, so it sends nothing


def _is_gemini(path: str) -> bool:
    """A Gemini API path (`/v1beta/models/...`, `/v1/models/...`): its faults answer in Google's error shape."""
    return path.startswith(("/v1beta/models/", "/v1/models/"))


def _detail(message: str, eleven: bool, status: int) -> dict[str, Any]:
    """The service's `{"detail": "..."}`, or ElevenLabs' `{"detail": {"status", "message"}}`: its 429 is `system_busy`
    (or `too_many_concurrent_requests`: help.elevenlabs.io, "API - Error Code 429"); a 5xx status name is not
    published, `internal_server_error` is the sandbox's."""
    if not eleven:
        return {"detail": message}
    return {"detail": {"status": "system_busy" if status == 429 else "internal_server_error", "message": message}}


def _google_error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


async def _discard(message: Message) -> None:
    """Swallow the real answer of an `after` fault: the work is done, the reply is lost."""
