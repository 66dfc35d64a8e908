"""The agent server over streamable HTTP, safe to leave running on a shared machine.

Anyone who can reach a port can talk to it, and its tools spend money, so: every request carries a bearer
token (from MUSICGEN_MCP_TOKEN, or made at start and printed once; only ever read from the Authorization
header, compared in constant time); the Host/Origin checks stay on whatever the bind address; and slow
or idle sockets cannot starve it (a request's head, then its body, must each arrive in HEAD_TIMEOUT_S, and
past the connection cap the oldest socket still sending its request is dropped for the new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Iterable
from typing import Any

import h11
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from .consent_page import PREFIX, ConsentPages
from .desk import AgentError

TOKEN_ENV = "MUSICGEN_MCP_TOKEN"
TOKEN_MIN_LENGTH = 24
HEAD_TIMEOUT_S = 10.0
"""How long a connection may take to send a request's head (or sit idle between requests)."""
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 256
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def http_token(environ: dict[str, str] | None = None) -> tuple[str, bool]:
    """The token requests must carry, and whether it was made here (then it is printed once at start)."""
    given = (os.environ if environ is None else environ).get(TOKEN_ENV)
    if given is None or given == "":
        return secrets.token_urlsafe(32), True
    if len(given) < TOKEN_MIN_LENGTH or given != given.strip() or not given.isprintable():
        raise AgentError(f"{TOKEN_ENV}: use at least {TOKEN_MIN_LENGTH} printable characters, no spaces around")
    return given, False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host == ""


def security_settings(host: str, allowed_hosts: Iterable[str] = ()) -> TransportSecuritySettings:
    """Host/Origin checks for any bind address: loopback names, the bind address itself (unless it is a
    wildcard such as 0.0.0.0), and the names the user allowed."""
    names = list(LOOPBACK_NAMES)
    extra = [] if is_loopback(host) or is_wildcard(host) else [host]
    for name in [*extra, *allowed_hosts]:
        shown = f"[{name}]" if ":" in name and not name.startswith("[") else name
        if shown not in names:
            names.append(shown)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names],
        allowed_origins=[f"{scheme}://{n}:*" for n in names for scheme in ("http", "https")],
    )


def bind_warning(host: str, allowed_hosts: Iterable[str] = ()) -> str | None:
    """What to tell the user when the server listens beyond this machine."""
    if is_loopback(host):
        return None
    names = ", ".join([*([] if is_wildcard(host) else [host]), *allowed_hosts]) or "none: loopback only"
    return (
        f"warning: listening on {host}, beyond this machine: anyone who can reach it and has the token can spend; "
        f"the token travels in plain HTTP; Host names accepted besides loopback: {names} (--allow-host NAME)"
    )


class BearerToken:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` is answered 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._digest = hashlib.sha256(token.encode()).digest()

    def allows(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        values = [v for k, v in headers if k.lower() == b"authorization"]
        if len(values) != 1:
            return False
        scheme, _, given = values[0].partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(hashlib.sha256(given.strip()).digest(), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.allows(scope.get("headers", [])):
            response = PlainTextResponse(
                "unauthorized: send the server's token as the header 'Authorization: Bearer <token>'",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="ipymusicgen"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def connection_cap() -> int:
    """Connections held at once: well inside this process's file-descriptor limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft // 4))


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's head and a cap on connections: a socket
    that trickles (or never sends) its head is closed, and the oldest such socket makes room for a new one."""

    cap = MAX_CONNECTIONS
    head_timeout = HEAD_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()
        self._make_room()

    def awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def still_sending(self) -> bool:
        """Waiting for the client: a request's head, or the rest of its body (a slow body holds as a slow head)."""
        return self.awaiting_head() or self.conn.their_state is h11.SEND_BODY

    def _arm(self) -> None:
        self._disarm()
        self.waiting_since = self.loop.time()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()  # type: ignore[union-attr]
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.still_sending():
            self._drop()

    def _drop(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        live = [c for c in self.connections if not c.transport.is_closing()]
        if len(live) <= self.cap:
            return
        idle = [c for c in live if c is not self and isinstance(c, BoundedH11Protocol) and c.still_sending()]
        victim = min(idle, key=lambda c: c.waiting_since, default=self)
        victim._drop()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before and not self.awaiting_head():
            self._arm()  # a request's head arrived: its body gets the same time (then the app takes it)
        if self._head_timer is not None and not self.still_sending():
            self._disarm()  # the whole request is in: the app (and its own timeouts) take it from here

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.awaiting_head():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


class WithConsentPages:
    """The one-time consent pages (`consent_page`: their unguessable path is their secret, a browser sends no
    token) beside the token-guarded MCP endpoint."""

    def __init__(self, app: ASGIApp, pages: ConsentPages) -> None:
        self.app = app
        self.pages = pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(PREFIX):
            await self.pages(scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_app(
    server: MCPServer,
    *,
    host: str,
    token: str,
    allowed_hosts: Iterable[str] = (),
    pages: ConsentPages | None = None,
) -> ASGIApp:
    """The SDK's streamable HTTP app behind the token, with Host/Origin checks for this bind address; and the
    consent pages of `pages` (URL-mode consent), with the same Host rules."""
    security = security_settings(host, allowed_hosts)
    app = server.streamable_http_app(transport_security=security, host=host)
    guarded: ASGIApp = BearerToken(app, token)
    if pages is None:
        return guarded
    pages.mount(security.allowed_hosts)
    return WithConsentPages(guarded, pages)


def run_http(
    server: MCPServer,
    *,
    host: str,
    port: int,
    token: str,
    allowed_hosts: Iterable[str] = (),
    pages: ConsentPages | None = None,
    **config: Any,
) -> None:
    """Serve until interrupted (uvicorn, h11 with the bounds above)."""
    import uvicorn

    protocol = type("BoundedH11", (BoundedH11Protocol,), {"cap": connection_cap()})
    settings = uvicorn.Config(
        http_app(server, host=host, token=token, allowed_hosts=allowed_hosts, pages=pages),
        host=host,
        port=port,
        http=protocol,
        ws="none",
        lifespan="on",
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE_S,
        # No limit_concurrency: connections are capped (one request each), and uvicorn's limit also counts
        # requests still receiving their body, so slow bodies would turn normal clients away with 503.
        **config,
    )
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(settings).run()
