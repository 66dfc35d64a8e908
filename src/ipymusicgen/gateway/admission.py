"""What a request must pass before the gateway reads its body: its Host (before any routing), its token, its size.

Order matters: a request from a foreign Host is refused before the router could answer it anything (a redirect to
`http://<that host>/...` would hand the name to a DNS-rebinding page), and a body is read only for a caller whose
token is live, at most `Limits.max_body_bytes` of it, by its `Content-Length` and again while it streams. A
refusal before the body is read closes the connection, so a body still coming is not read into anything. The
time a request's head and then its body may take is the server's (`server.py`), with the same `Limits`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

FOREIGN_HOST = "This host name is not served here"


@dataclass(frozen=True)
class Limits:
    """How long and how much a client may take (`gateway serve` uses the defaults; tests pass small ones)."""

    head_timeout: float = 10.0
    """Seconds a connection may take to send a request's head, or sit idle between requests."""
    body_timeout: float = 15.0
    """Seconds a request's body may take once its head is in."""
    max_body_bytes: int = 1 << 20
    """The largest body taken (1 MiB: a paid body is a few KB of JSON; lyrics run to some thousands of words)."""
    max_connections: int = 1024
    """Connections held at once; past it the oldest one still sending its request is dropped for the new one."""


def refusal(status: int, detail: str) -> JSONResponse:
    """A refusal that ends the connection: the rest of a body still on its way is never read."""
    return JSONResponse({"detail": detail}, status_code=status, headers={"connection": "close"})


class HostCheck:
    """ASGI middleware: a request whose Host is not one the gateway serves is answered 403 before routing."""

    def __init__(self, app: ASGIApp, allowed: Callable[[str | None], bool]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = [v for k, v in scope.get("headers", []) if k == b"host"]
            host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
            if not self.allowed(host):
                await refusal(403, FOREIGN_HOST)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int) -> bytes | Response:
    """The body, or the refusal to send instead: too large by its `Content-Length` (nothing read) or as it streams
    (read no further), or cut off by the client or the server's body timeout."""
    declared = request.headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit()):
        return refusal(400, "Content-Length: not a number")
    if declared is not None and int(declared) > limit:
        return refusal(413, f"The body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return refusal(413, f"The body is larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        return refusal(400, "The body did not arrive")
    return b"".join(chunks)
