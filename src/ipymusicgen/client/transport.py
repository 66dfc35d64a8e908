"""A socket-level deadline for the sync face: no read may go past the end of the exchange it belongs to.

httpx's timeouts bound each socket read, so a server that drips its status line and headers one byte
at a time keeps a blocking call alive indefinitely. The async face bounds the whole exchange with
`asyncio.wait_for`; a thread cannot be cancelled, so the sync face's own transport wraps each network
stream and cuts every read's timeout to what is left of the current thread's deadline (`bounded()`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

_current = threading.local()


@contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Reads on this thread's network streams must end within `seconds` from now."""
    previous = getattr(_current, "deadline", None)
    _current.deadline = time.monotonic() + max(seconds, 0.0)
    try:
        yield
    finally:
        _current.deadline = previous


def _left(timeout: float | None) -> float | None:
    deadline = getattr(_current, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the answer did not finish in time")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bounded_transport() -> httpx.HTTPTransport:
    """httpx's own transport, with every network stream honouring `bounded()` (plain httpx if it cannot)."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport
