"""`GET /gateway/v1/info`: what a notebook pointed at a gateway may know of it (the project's own path).

Answered to a live user token only: the gateway's version and its limits (seats for paid creates, body cap, request
deadlines), so a client can tell it talks to a gateway and plan its batches, and the synchronous engines it serves
at their own paths (`engines`: provider ids only), where a repeat of an `Idempotency-Key` gets the kept answer, so a
notebook's `resume()` may ask again for a song whose answer it lost (`client.engine_recovery`). Nothing of the
upstreams: not their addresses, not their keys or any piece of them (the admin's business, and the team's secret).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

from .admission import Limits

if TYPE_CHECKING:
    from .app import Gateway

INFO_PATH = "/gateway/v1/info"


def _version() -> str:
    try:
        return version("ipymusicgen")
    except PackageNotFoundError:
        return "unknown"


async def gateway_info(gateway: Gateway, limits: Limits) -> JSONResponse:
    queue = gateway.queue
    return JSONResponse(
        {
            "gateway": "ipymusicgen",
            "version": _version(),
            "engines": sorted(gateway.engines.by_provider) if gateway.engines is not None else [],
            "limits": {
                "max_in_flight": queue.most if queue is not None else None,
                "queue": queue is not None,
                "max_body_bytes": limits.max_body_bytes,
                "head_timeout_s": limits.head_timeout,
                "body_timeout_s": limits.body_timeout,
                "max_connections": limits.max_connections,
            },
        }
    )
