"""Run the gateway under uvicorn in the foreground (the `gateway serve` command), bounded against slow clients.

uvicorn runs on uvloop's event loop and parses HTTP with httptools (both dependencies on Linux and macOS:
`uvicorn[standard]`'s fast parts): on loopback a pure-Python loop and h11 parser cost about as much per
request as the gateway's own work. Where either is missing, uvicorn's asyncio loop and h11 serve the same.

uvicorn alone waits for ever on a request's head or body: a socket that trickles its head, or a body sent slowly,
holds a connection as long as its sender likes. As the agent server (`mcp/http.py`) does, each connection has a
deadline for its request's head (and for idling between requests), then one for its body; a socket still sending
when its deadline passes is closed, and past the connection cap the oldest socket still sending makes room. The
app refuses an unauthenticated or oversized body before reading it (`admission.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from ..config import key_in_clear, url_scheme
from ..errors import InsecureTransportError, MusicGenError
from ..storage.ledger_engines import open_ledger
from .admission import Limits
from .app import Gateway, create_app
from .database_url import masked, shown_database
from .upstream import Upstream

INSECURE_OPT_IN = "MUSICGEN_ALLOW_INSECURE_HTTP"
"""The client's opt-in for plain http to another machine; the gateway honours the same one."""


class RequestDeadlines:
    """Mixed into uvicorn's HTTP protocol (httptools or h11): a deadline on each request's head, then on its body,
    and a cap on connections. Both protocols keep `cycle` (None before the first request) with `response_complete`
    and `more_body`, `connections`, `loop` and `transport`, which is all this reads."""

    limits = Limits()
    cycle: Any
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        self._deadline: asyncio.TimerHandle | None = None
        self._arm(self.limits.head_timeout)
        self._make_room()

    def awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def still_sending(self) -> bool:
        """Waiting for the client: a request's head, or the rest of its body."""
        return self.awaiting_head() or bool(self.cycle.more_body)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self.waiting_since = self.loop.time()
        self._deadline = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()  # type: ignore[union-attr]
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.still_sending():
            self._drop()

    def _drop(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        live = [c for c in self.connections if not c.transport.is_closing()]
        if len(live) <= self.limits.max_connections:
            return
        sending = [c for c in live if c is not self and isinstance(c, RequestDeadlines) and c.still_sending()]
        min(sending, key=lambda c: c.waiting_since, default=self)._drop()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)  # type: ignore[misc]
        if self.transport.is_closing():
            return
        if self.cycle is not before and not self.awaiting_head():
            self._arm(self.limits.body_timeout)  # a request's head arrived: now its body has its own deadline
        if self._deadline is not None and not self.still_sending():
            self._disarm()  # the whole request is in: the app (and its upstream's timeouts) take it from here

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing() and self.awaiting_head():
            self._arm(self.limits.head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]


def server_options() -> dict[str, str]:
    """uvicorn's loop and HTTP parser: the compiled ones where they are installed, else its pure-Python ones."""
    import importlib.util

    fast_loop = importlib.util.find_spec("uvloop") is not None
    fast_http = importlib.util.find_spec("httptools") is not None
    return {"loop": "uvloop" if fast_loop else "asyncio", "http": "httptools" if fast_http else "h11"}


def bounded_protocol(limits: Limits) -> type:
    """uvicorn's HTTP protocol class (the one `server_options` names) with `RequestDeadlines` at `limits`."""
    if server_options()["http"] == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return type(f"Bounded{base.__name__}", (RequestDeadlines, base), {"limits": limits})


def server_config(app: Any, host: str, port: int, limits: Limits | None = None, **options: Any) -> Any:
    """The uvicorn.Config `gateway serve` runs (tests run the same, with small limits)."""
    import uvicorn

    limits = limits or Limits()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",  # the app's start runs the queue's pump and the batch worker before any request
        loop=server_options()["loop"],
        http=bounded_protocol(limits),
        ws="none",
        # No limit_concurrency: uvicorn's also counts requests still receiving their body, so slow bodies would
        # turn normal clients away with 503; connections are capped by the protocol instead.
        **options,
    )


def check_upstream(*urls: str, environ: Any = None) -> None:
    """The client's rule for where the key may go: https, or http to this machine (or the same opt-in)."""
    import os

    env = os.environ if environ is None else environ
    opted_in = env.get(INSECURE_OPT_IN, "").strip().lower() in {"1", "true", "yes", "on"}
    for url in urls:
        if url_scheme(url) not in ("http", "https"):
            raise InsecureTransportError(f"the upstream must be an http(s) URL (got {url[:80]!r})")
        if key_in_clear(url) and not opted_in:
            raise InsecureTransportError(
                f"refusing to send the upstream key over plain http to {url[:80]}; use https, or opt in with "
                f"{INSECURE_OPT_IN}=1"
            )


def build(
    database: str,
    upstream: str,
    upstream_v2: str,
    key: str,
    host: str,
    allow_hosts: Iterable[str] = (),
    limits: Limits | None = None,
    max_in_flight: int | None = None,
    clock: Any = None,
    engines: Mapping[str, tuple[str, str]] | None = None,
    credit_usd: int | None = None,
) -> tuple[Gateway, Any]:
    """The app and what it holds (closed by the caller); `max_in_flight`: the queue's seats (None: no queue);
    `engines`: the synchronous engines served at their own paths, provider -> (upstream URL, the team's key);
    `credit_usd`: millionths of a dollar per service credit (`credit_rate.rate_micros`; None: no rate)."""
    check_upstream(upstream, upstream_v2, *(url for url, _key in (engines or {}).values()))
    try:
        ledger = open_ledger(database)
    except Exception as exc:  # a driver's error may repeat the URL, or a piece of it: shown masked
        reason = masked(str(exc), database).strip().splitlines()
        raise MusicGenError(
            f"could not open the ledger at {shown_database(database)}: {reason[0] if reason else type(exc).__name__}"
        ) from None
    ledger.credit_usd = credit_usd  # a dollar budget pays service calls at it (`ledger_units.pays_in_dollars`)
    gateway = Gateway(
        ledger,
        Upstream(upstream, upstream_v2, key),
        host=host,
        allow_hosts=allow_hosts,
        max_in_flight=max_in_flight,
        clock=clock,
    )
    if engines:
        from .engine_routes import recover_engine_calls
        from .engine_upstream import EngineUpstreams

        gateway.engines = EngineUpstreams(engines)
        recover_engine_calls(gateway.ledger)
    gateway.upstream_counts()  # the meter's first reading: the next paid call can be measured against it
    recovered = gateway.recover()  # `gateway reconcile`: what an earlier gateway left (kill -9, a ledger outage)
    if recovered.written or recovered.settled or recovered.released or recovered.unknown:
        print("\n".join(recovered.lines()), flush=True)
    return gateway, create_app(gateway, limits)


def run_app(app: Any, host: str, port: int, limits: Limits | None = None) -> None:
    """Serve `app` in the foreground until SIGINT/SIGTERM, as `gateway serve` does (figure 16's bare proxy too)."""
    import uvicorn

    uvicorn.Server(server_config(app, host, port, limits)).run()


def serve(
    *,
    database: str,
    host: str,
    port: int,
    upstream: str,
    upstream_v2: str,
    key: str,
    allow_hosts: Iterable[str] = (),
    max_in_flight: int | None = None,
    engines: Mapping[str, tuple[str, str]] | None = None,
    credit_usd: int | None = None,
) -> None:
    gateway, app = build(
        database,
        upstream,
        upstream_v2,
        key,
        host,
        allow_hosts,
        max_in_flight=max_in_flight,
        engines=engines,
        credit_usd=credit_usd,
    )
    served = "v1 and v2" + "".join(f", {provider}" for provider in sorted(engines or {}))  # with the engines' paths
    print(f"ipymusicgen gateway on http://{host}:{port} ({served}), ledger: {shown_database(database)}", flush=True)
    try:
        run_app(app, host, port)
    finally:
        gateway.close()
