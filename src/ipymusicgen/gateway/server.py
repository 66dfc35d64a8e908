"""Run the gateway under uvicorn in the foreground (the `gateway serve` command).

uvicorn runs on uvloop's event loop and parses HTTP with httptools (both dependencies on Linux and macOS:
`uvicorn[standard]`'s fast parts): on loopback a pure-Python loop and h11 parser cost about as much per
request as the gateway's own work. Where either is missing, uvicorn's asyncio loop and h11 serve the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..storage.ledger_engines import open_ledger
from .app import Gateway, create_app
from .database_url import shown_database
from .upstream import Upstream


def build(database: str, upstream: str, upstream_v2: str, key: str, host: str, allow_hosts: Iterable[str] = ()):
    """The app and what it holds (closed by the caller)."""
    ledger = open_ledger(database)
    gateway = Gateway(ledger, Upstream(upstream, upstream_v2, key), host=host, allow_hosts=allow_hosts)
    gateway.upstream_counts()  # the meter's first reading: the next paid call can be measured against it
    recovered = gateway.recover()  # `gateway reconcile`: what an earlier gateway left (kill -9, a ledger outage)
    if recovered.written or recovered.settled or recovered.released or recovered.unknown:
        print("\n".join(recovered.lines()), flush=True)
    return gateway, create_app(gateway)


def server_options() -> dict[str, str]:
    """uvicorn's loop and HTTP parser: the compiled ones where they are installed, else its pure-Python ones."""
    import importlib.util

    fast_loop = importlib.util.find_spec("uvloop") is not None
    fast_http = importlib.util.find_spec("httptools") is not None
    return {"loop": "uvloop" if fast_loop else "asyncio", "http": "httptools" if fast_http else "h11"}


def run_app(app: Any, host: str, port: int) -> None:
    """Serve `app` in the foreground until SIGINT/SIGTERM, as `gateway serve` does (figure 16's bare proxy too)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off", **server_options())


def serve(
    *, database: str, host: str, port: int, upstream: str, upstream_v2: str, key: str, allow_hosts: Iterable[str] = ()
) -> None:
    gateway, app = build(database, upstream, upstream_v2, key, host, allow_hosts)
    print(f"ipymusicgen gateway on http://{host}:{port} (v1 and v2), ledger: {shown_database(database)}", flush=True)
    try:
        run_app(app, host, port)
    finally:
        gateway.close()
