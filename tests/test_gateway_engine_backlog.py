"""An engine call whose answer arrives while the gateway's ledger is down (issue 37): the caller gets the song, and the
call's end (done, its kept audio) is kept in the gateway's backlog (memory and a private spill file) until the ledger
takes it, as the service's paid answers are; a repeat of its Idempotency-Key meanwhile and afterwards gets the kept
song, never a second paid call. PostgreSQL stopped mid-call; a gateway killed before the ledger came back leaves its
spill file for the next start."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli
from helpers import wait_until
from hostile_server import HostileServer, RawRequest, respond
from pg_server import PostgresServer, postgres_server  # noqa: F401  (the fixture)

from ipymusicgen.gateway.backlog import Backlog, Unwritten, spill_folder
from ipymusicgen.storage import ledger_dollars
from ipymusicgen.storage.ledger_engines import open_ledger

AUDIO = b"ID3" + bytes(range(256)) * 40
BODY = {"prompt": "storm", "music_length_ms": 3_000}


def engine_rows(database: str) -> list[dict[str, Any]]:
    with open_ledger(database) as ledger:
        return ledger_dollars.calls(ledger)


def held_engine(hostile_server: Callable[..., HostileServer]) -> tuple[HostileServer, threading.Event, list[str]]:
    release = threading.Event()
    songs: list[str] = []

    def handler(request: RawRequest, sock: socket.socket) -> None:
        if request.path != "/v1/music":  # the service's reads (the gateway's meter): nothing to make
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 100}})
            return
        songs.append(request.path)
        release.wait(60)  # the test lets it answer once the ledger is down (state, not time)
        respond(sock, 200, raw=AUDIO, headers={"Content-Type": "audio/mpeg"})

    return hostile_server(handler), release, songs


@pytest.mark.slow  # stops and starts a PostgreSQL server
def test_an_engine_song_answered_while_postgresql_is_down_reaches_the_ledger_when_it_is_back(
    clean_env: None, request: pytest.FixtureRequest, hostile_server: Callable[..., HostileServer]
) -> None:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    database = server.new_database()
    token = add_user(database, "ned")
    assert cli("user", "budget-usd", "ned", "2", "--database", database)[0] == 0
    engine, release, songs = held_engine(hostile_server)
    answers: list[httpx.Response] = []
    headers = {"xi-api-key": token, "Idempotency-Key": "storm-1"}
    with GatewayThread(database, engine.url, engine.url, engines={"elevenlabs": (engine.url, CANARY_KEY)}) as gateway:
        url = gateway.url + "/v1/music"
        send = lambda: answers.append(httpx.post(url, json=BODY, headers=headers, timeout=90))  # noqa: E731
        sender = threading.Thread(target=send)
        sender.start()
        wait_until(lambda: len(songs) == 1, "the call to reach the engine")
        server.halt()  # the ledger goes away while the song is being made
        try:
            release.set()
            sender.join(60)
            (answer,) = answers
            assert answer.status_code == 200 and answer.content == AUDIO  # the caller gets the song at once
            wait_until(lambda: len(gateway.gateway.backlog) == 1, "the call's end kept")
            again = httpx.post(url, json=BODY, headers=headers, timeout=30)  # the ledger down: nothing is sent
            assert again.status_code == 503 and len(songs) == 1
        finally:
            server.resume()
        wait_until(lambda: not len(gateway.gateway.backlog), "the kept end written to the ledger")
        repeat = httpx.post(url, json=BODY, headers=headers, timeout=30)
        assert repeat.status_code == 200 and repeat.content == AUDIO, "the kept song, never sent again"
    assert len(songs) == 1
    [row] = engine_rows(database)
    assert (row["state"], row["estimated_usd"], row["idem_key"]) == ("done", 750_000, "storm-1")


def test_a_spilled_engine_end_is_taken_by_the_next_start_and_never_mixed_with_a_service_call(tmp_path: Path) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    add_user(database, "ann")
    assert cli("user", "budget-usd", "ann", "2", "--database", database)[0] == 0
    with open_ledger(database) as ledger:
        held = ledger_dollars.reserve(ledger, "ann", "k", "elevenlabs", "/v1/music", "music_v1", 750_000, "f")
        assert held.call_id is not None
    folder = spill_folder(database, tmp_path)
    end = Unwritten(held.call_id, "done", 200, AUDIO, engine=True, media_type="audio/mpeg")
    down = Backlog(None, folder)  # a ledger that cannot take it: `finish` on None fails, so it is spilled
    down.keep(end)
    assert down.kept(held.call_id) is None and down.kept(held.call_id, engine=True) is end  # ids apart
    down.close()
    assert [p.name.startswith("engine-call-") for p in folder.glob("*.json")] == [True]
    with open_ledger(database) as ledger:
        assert Backlog(ledger, folder).take_spills() == 1
        [row] = ledger_dollars.calls(ledger)
        again = ledger_dollars.reserve(ledger, "ann", "k", "elevenlabs", "/v1/music", "music_v1", 750_000, "f")
    assert row["state"] == "done" and again.kind == "repeat" and again.body == AUDIO
    assert list(folder.glob("*.json")) == []
