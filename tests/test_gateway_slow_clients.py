"""Issue 39, slow clients: a request's head and body each have a deadline, a body is read only for a live token
and only up to the size limit (by its Content-Length and as it streams). The deadlines are the gateway's own
`Limits`, small here; each test waits on a socket's state (closed, answered), never on a sleep."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user

from ipymusicgen.gateway.admission import Limits
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

QUICK = Limits(head_timeout=0.4, body_timeout=0.4, max_body_bytes=4096)
STATE_WAIT = 10.0
"""How long a socket is watched for the gateway to close it: only a hang reaches it."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 1_000}) as server:
        yield server


def _gateway(tmp_path: Path, upstream: Sandbox, limits: Limits) -> GatewayThread:
    return GatewayThread(str(tmp_path / "gateway.sqlite3"), upstream.base_url, upstream.v2_base_url, limits=limits)


def _open(port: int, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=STATE_WAIT)
    sock.sendall(head.encode())
    return sock


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection (a hang past STATE_WAIT raises)."""
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


def test_sockets_that_trickle_their_heads_are_closed_at_the_head_deadline(
    tmp_path: Path, upstream: Sandbox, clean_env: None
) -> None:
    with _gateway(tmp_path, upstream, QUICK) as gateway:
        socks = [_open(gateway.port, "GET /v1/music/tasks?ids=a HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(13)]
        idle = _open(gateway.port, "")  # one that never says anything at all
        for sock in [*socks, idle]:
            assert _until_closed(sock) == b""  # closed without an answer (a trickled head gets none)
            sock.close()


def test_a_body_without_a_live_token_is_refused_before_it_is_read(
    tmp_path: Path, upstream: Sandbox, clean_env: None
) -> None:
    slow = Limits(head_timeout=60, body_timeout=60, max_body_bytes=1 << 20)  # no deadline could be what answers
    with _gateway(tmp_path, upstream, slow) as gateway:
        head = (
            "POST /v1/music/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: mgw_not-a-token\r\n"
            'Content-Type: application/json\r\nContent-Length: 7000\r\n\r\n{"action"'
        )
        sock = _open(gateway.port, head)
        answer = _until_closed(sock)
        sock.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:80]


def test_a_body_sent_too_slowly_is_cut_at_its_deadline_and_nothing_is_reserved(
    tmp_path: Path, upstream: Sandbox, clean_env: None
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "fay", budget=30)
    with _gateway(tmp_path, upstream, QUICK) as gateway:
        head = (
            f"POST /v1/music/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {token}\r\n"
            'Content-Type: application/json\r\nContent-Length: 90\r\n\r\n{"action": "auto"'
        )
        sock = _open(gateway.port, head)
        _until_closed(sock)  # the rest never comes: the gateway hangs up at the body deadline
        sock.close()
    with open_ledger(database) as ledger:
        assert ledger.calls() == [] and ledger.remaining("fay") == 30


def test_a_body_over_the_limit_is_refused_by_its_length_or_as_it_streams(
    tmp_path: Path, upstream: Sandbox, clean_env: None
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "gus")
    with _gateway(tmp_path, upstream, QUICK) as gateway:
        declared = (
            f"POST /v2/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {QUICK.max_body_bytes + 1}\r\n\r\n"
        )
        sock = _open(gateway.port, declared)
        assert _until_closed(sock).startswith(b"HTTP/1.1 413")
        sock.close()
        chunked = (
            f"POST /v2/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {token}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        sock = _open(gateway.port, chunked)
        piece = b"x" * 1500
        for _ in range(4):  # 6000 bytes in all, under no Content-Length
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        assert _until_closed(sock).startswith(b"HTTP/1.1 413")
        sock.close()
    with open_ledger(database) as ledger:
        assert ledger.calls() == []


def _send_big(port: int, size: int, chunk: bytes) -> None:
    head = (
        "POST /v1/music/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: mgw_wrong-token\r\n"
        f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=STATE_WAIT) as sock:
        sock.sendall(head.encode())
        sent = 0
        try:
            while sent < size:
                sock.sendall(chunk[: size - sent])
                sent += len(chunk)
        except OSError:  # the gateway hung up on the body it would not read
            pass
        _until_closed(sock)


def test_big_bodies_with_a_wrong_token_do_not_grow_the_gateway(
    tmp_path: Path, upstream: Sandbox, clean_env: None
) -> None:
    process = psutil.Process()
    limits = Limits(head_timeout=30, body_timeout=30, max_body_bytes=1 << 20)
    with _gateway(tmp_path, upstream, limits) as gateway:
        before = process.memory_info().rss
        peak = [before]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.005):
                peak[0] = max(peak[0], process.memory_info().rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        chunk = b"z" * (1 << 20)  # one buffer sent again and again: the senders themselves grow by nothing
        sizes = [37_000_000, 41_500_000, 44_000_000, 39_250_000]
        started = time.monotonic()
        with ThreadPoolExecutor(len(sizes)) as pool:
            list(pool.map(lambda size: _send_big(gateway.port, size, chunk), sizes))
        done.set()
        sampler.join(5)
    grown_mb = (peak[0] - before) / 1e6
    assert grown_mb < 40, f"grew by {grown_mb:.0f} MB in {time.monotonic() - started:.1f} s"
