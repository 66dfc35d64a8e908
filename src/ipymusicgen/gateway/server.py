"""Run the gateway under uvicorn in the foreground (the `gateway serve` command)."""

from __future__ import annotations

from collections.abc import Iterable

from ..storage.ledger_engines import open_ledger
from .app import Gateway, create_app
from .database_url import shown_database
from .upstream import Upstream


def build(database: str, upstream: str, upstream_v2: str, key: str, host: str, allow_hosts: Iterable[str] = ()):
    """The app and what it holds (closed by the caller)."""
    ledger = open_ledger(database)
    gateway = Gateway(ledger, Upstream(upstream, upstream_v2, key), host=host, allow_hosts=allow_hosts)
    gateway.upstream_counts()  # the meter's first reading: the next paid call can be measured against it
    return gateway, create_app(gateway)


def serve(
    *, database: str, host: str, port: int, upstream: str, upstream_v2: str, key: str, allow_hosts: Iterable[str] = ()
) -> None:
    import uvicorn

    gateway, app = build(database, upstream, upstream_v2, key, host, allow_hosts)
    print(f"ipymusicgen gateway on http://{host}:{port} (v1 and v2), ledger: {shown_database(database)}", flush=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    finally:
        gateway.close()
