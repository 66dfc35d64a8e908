"""Small hostile servers on 127.0.0.1 for journal tests: one that never answers a paid call, one that
runs a hook (say, locking the journal) before it answers."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SilentServer:
    """Accepts connections, reads the request, and never answers: a paid call hangs in flight."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self._conns.append(conn)
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(body) < length:
                    body += conn.recv(65536)
            except OSError:
                continue
            self.requests.append(head + b"\r\n\r\n" + body)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._conns:
            conn.close()
        self.sock.close()


class AnsweringServer:
    """Answers a generate with two ids, after running `before_answer` (which may lock the journal)."""

    def __init__(self, before_answer: Callable[[], None] = lambda: None, ids: tuple[str, ...] = ("t1", "t2")) -> None:
        outer = self
        self.posts = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.posts += 1
                before_answer()
                body = json.dumps({"status": 200, "message": "Success", "data": {"ids": list(ids)}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
