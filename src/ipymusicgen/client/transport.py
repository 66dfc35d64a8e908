"""A socket-level deadline for the sync face: no read may go past the end of the exchange it belongs to.

httpx's timeouts bound each socket read, so a server that drips its status line and headers one byte
at a time keeps a blocking call alive indefinitely. The async face bounds the whole exchange with
`asyncio.wait_for`; a thread cannot be cancelled, so the sync face's own transport wraps each network
stream and cuts every read's timeout to what is left of the current thread's deadline (`bounded()`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .deadline import bounded

if TYPE_CHECKING:
    import httpx

__all__ = ["bounded", "bounded_transport"]


def bounded_transport() -> httpx.HTTPTransport:
    """httpx's own transport, with every network stream honouring `bounded()` (plain httpx if it cannot).

    httpcore (and the wrapped streams) load here, when the first client is made, not at import: `%load_ext`
    makes no client."""
    import httpcore
    import httpx

    from .deadline_streams import DeadlineBackend

    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport
