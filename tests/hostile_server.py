"""A tiny hostile HTTP server on 127.0.0.1 for hardening tests: it answers however the test says, byte by byte.

Each connection's request is read (head and body) and handed to `handler(request, sock)`, which writes
whatever raw bytes it likes: a drip-fed body, a redirect, a huge or nested body, an echo of the key.
Requests are recorded so a test can assert what was sent (and that nothing was). Two ready-made ones
for the journal tests: `SilentServer` never answers a paid call, `AnsweringServer` runs a hook (say,
locking the journal) before it answers a generate with ids.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RawRequest:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    raw: bytes
    """The request as it came: head, blank line, body."""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


Handler = Callable[[RawRequest, socket.socket], None]


def respond(
    sock: socket.socket, status: int = 200, body: Any = None, headers: dict[str, str] | None = None, raw: bytes = b""
) -> None:
    """Write one complete response: JSON (`body`) or `raw` bytes, with a Content-Length."""
    payload = raw if body is None else json.dumps(body).encode()
    head = {"Content-Type": "application/json", "Content-Length": str(len(payload)), "Connection": "close"}
    head.update(headers or {})
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    sock.sendall(f"HTTP/1.1 {status} X\r\n{lines}\r\n".encode() + payload)


@dataclass
class HostileServer:
    handler: Handler
    requests: list[RawRequest] = field(default_factory=list)
    received: threading.Event = field(default_factory=threading.Event)
    dripped: list[int] = field(default_factory=list)
    """Per drip-fed connection, how many body bytes went out before the client hung up (or all)."""
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            pairs = (line.split(":", 1) for line in lines[1:] if ":" in line)
            headers = {k.strip().lower(): v.strip() for k, v in pairs}
            length = int(headers.get("content-length", "0"))
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            request = RawRequest(method, target, headers, body, head + b"\r\n\r\n" + body)
            self.requests.append(request)
            self.received.set()
            self.handler(request, conn)
        except OSError:
            pass
        finally:
            conn.close()

    def drip(self, sock: socket.socket, content: bytes, every: float = 0.2) -> None:
        """Send headers at once, then the body one byte at a time (until stopped or the client hangs up)."""
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(content)}\r\nConnection: close\r\n\r\n".encode()
        )
        self._one_byte_at_a_time(sock, content, every)

    def drip_head(self, sock: socket.socket, content: bytes, every: float = 0.1) -> None:
        """The status line and headers themselves one byte at a time (a socket read never times out)."""
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(content)}\r\nX-Padding: {'p' * 200}\r\n\r\n".encode()
        )
        self._one_byte_at_a_time(sock, head + content, every)

    def _one_byte_at_a_time(self, sock: socket.socket, data: bytes, every: float) -> None:
        """Counted in `dripped`, one slot per connection."""
        self.dripped.append(0)
        slot = len(self.dripped) - 1
        for byte in data:
            if self.stop.wait(every):
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return
            self.dripped[slot] += 1

    def hold(self, sock: socket.socket) -> None:
        """Never answer (until the test ends or the client hangs up)."""
        while not self.stop.wait(0.1):
            try:
                sock.settimeout(0.01)
                if sock.recv(1) == b"":
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):  # wake the accept() at once rather than at its next 0.2 s timeout
            self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(2)
        self._sock.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SilentServer:
    """Reads each request and never answers: a paid call hangs in flight. `requests` are the raw bytes."""

    def __init__(self) -> None:
        self._server = HostileServer(lambda _request, sock: self._server.hold(sock))
        self.url = self._server.url

    @property
    def requests(self) -> list[bytes]:
        return [request.raw for request in self._server.requests]

    def close(self) -> None:
        self._server.close()


class AnsweringServer:
    """Answers a generate with two ids, after running `before_answer` (which may lock the journal)."""

    def __init__(self, before_answer: Callable[[], None] = lambda: None, ids: tuple[str, ...] = ("t1", "t2")) -> None:
        self.posts = 0

        def answer(request: RawRequest, sock: socket.socket) -> None:
            if request.method != "POST":
                respond(sock, 501, {"message": "only POST"})
                return
            self.posts += 1
            before_answer()
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"ids": list(ids)}})

        self._server = HostileServer(answer)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()


def wait_for(event: threading.Event, what: str, timeout: float = 20.0) -> None:
    if not event.wait(timeout):
        raise AssertionError(f"gave up waiting for: {what}")


def elapsed(start: float) -> float:
    return time.monotonic() - start
