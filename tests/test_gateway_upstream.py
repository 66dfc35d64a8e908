"""The gateway's upstream client on the event loop (aiohttp): what it must not carry from one user to another,
and what it must not leave behind when the gateway stops."""

from __future__ import annotations

import gc
import socket
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from gateway_helpers import GatewayThread, add_user, post
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger


def test_a_cookie_the_upstream_sets_for_one_user_never_goes_up_with_another_users_call(
    tmp_path: Path, clean_env: None, hostile_server: Callable[..., HostileServer]
) -> None:
    def answer(request: RawRequest, sock: socket.socket) -> None:
        if request.path == "/v1/get_api_key_info":
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 50}})
        else:  # every task answer tries to start a session on the shared upstream account
            respond(sock, 200, [], headers={"Set-Cookie": "session=alices-session; Path=/"})

    server = hostile_server(answer)
    database = str(tmp_path / "gateway.sqlite3")
    alice, bob = add_user(database, "alice"), add_user(database, "bob")
    named = server.url.replace("127.0.0.1", "localhost")  # a host name, as the real service has: cookie jars take
    with GatewayThread(database, named, named) as gateway:  # no cookie from a bare IP address
        for token in (alice, bob, alice):
            answered = httpx.get(gateway.url + "/v1/music/tasks?ids=t1", headers={"x-api-key": token})
            assert answered.status_code == 200 and "set-cookie" not in answered.headers
    reads = [r for r in server.requests if r.path == "/v1/music/tasks"]
    assert len(reads) == 3
    assert [r.headers.get("cookie") for r in reads] == [None, None, None]


def test_a_stopped_gateway_leaves_no_upstream_session_open(tmp_path: Path, clean_env: None) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "carol")
    key = "k-upstream-session"
    gc.collect()  # an earlier test's garbage in this worker (an unclosed socket) is not this gateway's to answer for
    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={key: 100}) as upstream,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        with GatewayThread(database, upstream.base_url, upstream.v2_base_url, key=key) as gateway:
            answered = httpx.get(gateway.url + "/v1/music/tasks?ids=t1", headers={"x-api-key": token})
            assert answered.status_code == 200
            session = gateway.gateway.upstream._session
            assert session is not None and not session.closed  # the keep-alive pool the calls went through
        assert session.closed, "closed on its own loop when the server's loop ended"
        del session
        gc.collect()
    assert not [w for w in caught if "nclosed" in str(w.message)], [str(w.message) for w in caught]


def test_a_paid_call_the_upstream_never_took_is_released_and_one_it_may_have_taken_is_kept(
    tmp_path: Path, clean_env: None, hostile_server: Callable[..., HostileServer]
) -> None:
    def answer(request: RawRequest, sock: socket.socket) -> None:
        if request.path == "/v1/get_api_key_info":
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 50}})
        # a paid call: taken, then the connection is closed with no answer (it may have been charged)

    server = hostile_server(answer)
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "dan", budget=10)
    body = {"action": "auto", "style": "x", "mv": "MFV2.0"}  # 2 credits
    with GatewayThread(database, server.url, server.url) as gateway:
        taken = post(gateway.url, "/v1/music/generate", token, body, **{"Idempotency-Key": "k1"})
        server.close()  # nothing listens any more: the next paid call cannot reach it
        refused = post(gateway.url, "/v1/music/generate", token, body, **{"Idempotency-Key": "k2"})
    assert taken.status_code == 503 and "may have been charged" in taken.json()["message"]
    assert refused.status_code == 502 and "nothing was sent or charged" in refused.json()["message"]
    with open_ledger(database) as ledger:
        assert [c["state"] for c in ledger.calls()] == ["unknown", "refused"]
        assert ledger.remaining("dan") == 8  # the unknown call's reservation kept, the refused one's released


def test_a_key_info_waiting_on_the_upstream_does_not_hold_up_another_users_task_query(
    tmp_path: Path, clean_env: None, hostile_server: Callable[..., HostileServer]
) -> None:
    release = threading.Event()

    def answer(request: RawRequest, sock: socket.socket) -> None:
        if request.path == "/v1/get_api_key_info":
            started.append(request.target)
            if len(started) > 1:  # the gateway's own first reading, at start, is answered at once
                asked_now.set()
                release.wait(30)
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 50}})
        else:
            respond(sock, 200, [])

    started: list[str] = []
    asked_now = threading.Event()
    server = hostile_server(answer)
    database = str(tmp_path / "gateway.sqlite3")
    alice, bob = add_user(database, "alice"), add_user(database, "bob")
    with GatewayThread(database, server.url, server.url) as gateway:
        pending = ThreadPoolExecutor(1).submit(
            httpx.get, gateway.url + "/v1/get_api_key_info", headers={"x-api-key": alice}, timeout=60
        )
        try:
            assert asked_now.wait(30), "alice's key info reached the upstream"
            query = httpx.get(gateway.url + "/v1/music/tasks?ids=t1", headers={"x-api-key": bob}, timeout=20)
            assert query.status_code == 200 and not pending.done()
        finally:
            release.set()
        assert pending.result(60).json()["data"]["key_music_counts"] == 50
