"""The network stream and backend wrappers behind `transport.bounded_transport()`: every read and write of the
sync face's streams is cut to what is left of its thread's deadline (`transport.bounded()`)."""

from __future__ import annotations

import socket
import threading
import weakref
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

import httpcore

from .deadline import left_of


class DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def wake(self) -> None:
        """Shut the socket down, so a read blocked on it in another thread returns at once (closing a socket
        from another thread does not wake such a read; shutting it down does)."""
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, left_of(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, left_of(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left_of(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner
        self._streams: weakref.WeakSet[DeadlineStream] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _kept(self, stream: DeadlineStream) -> DeadlineStream:
        with self._lock:
            self._streams.add(stream)
        return stream

    def wake_all(self) -> None:
        """Wake every read still blocked on this backend's streams (the client is closing)."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.wake()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return self._kept(DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options)))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return self._kept(DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options)))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
