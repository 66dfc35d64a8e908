"""A socket-level deadline for the sync face: no read may go past the end of the exchange it belongs to.

httpx's timeouts bound each socket read, so a server that drips its status line and headers one byte
at a time keeps a blocking call alive indefinitely. The async face bounds the whole exchange with
`asyncio.wait_for`; a thread cannot be cancelled, so the sync face's own transport wraps each network
stream and cuts every read's timeout to what is left of the current thread's deadline (`bounded()`).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from .deadline import bounded

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = ["bounded", "bounded_transport", "trust_store"]


def trust_store() -> ssl.SSLContext:
    """The TLS context the package's clients verify servers with: httpx's own default (certifi's bundle, or the
    `SSL_CERT_FILE` / `SSL_CERT_DIR` set now), loaded once per setting. httpx loads it anew for each client it makes,
    20-45 ms each here; its docs advise sharing one. No client here speaks HTTP/2, so the one setting httpcore changes
    on a context per connection (ALPN) is the same for all."""
    return _trust_store(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _trust_store(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """One context per trust setting (the arguments are the cache's key: httpx reads the same variables)."""
    import httpx

    return httpx.create_ssl_context()


def bounded_transport() -> httpx.HTTPTransport:
    """httpx's own transport, with every network stream honouring `bounded()` (plain httpx if it cannot).

    httpcore (and the wrapped streams) load here, when the first client is made, not at import: `%load_ext`
    makes no client."""
    import httpcore
    import httpx

    from .deadline_streams import DeadlineBackend

    transport = httpx.HTTPTransport(verify=trust_store())
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport
