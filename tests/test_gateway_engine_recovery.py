"""An engine song's answer lost between a team gateway and the notebook (issue 37): the project's client sends an
Idempotency-Key on each engine call (its task id: one per journalled attempt), the gateway keeps the answer under it,
and the notebook's `resume()` gets the song from that kept answer without a second paid call, or is told the truth.
A real engine (no gateway there) is never asked again; the engines take the extra header."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli
from hostile_server import HostileServer, RawRequest, respond
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)
from pydantic import SecretStr

from ipymusicgen.config import Settings
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage import ledger_dollars
from ipymusicgen.storage.ledger_engines import open_ledger

pytest.importorskip("lameenc")  # the sandbox's MP3s
HOP = ("host", "content-length", "connection", "transfer-encoding", "accept-encoding")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


def engine_counts(upstream: Sandbox) -> dict[str, int]:
    return {p: n for p, n in upstream.request_counts().items() if p.startswith("/v1/music")}


def losing_hop(hostile_server: Callable[..., HostileServer], target: str) -> HostileServer:
    """A network between notebook and gateway that loses the answer of the first song call (after the gateway
    made it) and carries everything else."""
    lost: list[str] = []

    def handler(request: RawRequest, sock: socket.socket) -> None:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        answer = httpx.request(request.method, target + request.target, headers=headers, content=request.body,
                               timeout=60)  # fmt: skip
        if request.path.startswith("/v1/music") and not lost:
            lost.append(request.path)
            sock.close()  # the song was made and kept at the gateway; the notebook never hears of it
            return
        respond(sock, answer.status_code, raw=answer.content,
                headers={"Content-Type": answer.headers.get("content-type", "application/octet-stream")})  # fmt: skip

    return hostile_server(handler)


def client_at(url: str, token: str, journal: Path) -> Any:
    from ipymusicgen.workspace.workspace import build_client

    settings = Settings.from_env().with_changes(
        api_key=token, base_url=url, v2_base_url=url, elevenlabs_base_url=url, gemini_base_url=url,
        elevenlabs_api_key=SecretStr(token), gemini_api_key=SecretStr(token), journal_path=journal, poll_interval=0.05,
    )  # fmt: skip
    return build_client(settings, archive=journal.parent / "archive")


def dollar_user(database: str, name: str) -> str:
    token = add_user(database, name)
    assert cli("user", "budget-usd", name, "5", "--database", database)[0] == 0
    return token


def test_resume_gets_a_lost_song_from_the_gateways_kept_answer_without_a_second_paid_call(
    database: str, upstream: Sandbox, clean_env: None, hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    upstream.reset()
    token = dollar_user(database, "lou")
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY)}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as gateway:
        hop = losing_hop(hostile_server, gateway.url)
        journal = tmp_path / "journal.sqlite3"
        first = client_at(hop.url, token, journal)
        try:
            ids = first.generate(provider="elevenlabs", style="rain", seconds=4)
            [lost] = first.wait(ids, timeout=60, interval=0.05)
        finally:
            first.engine_calls.join(30)
            first.close()
        assert lost.state is TaskState.FAILED and lost.charge == "may have been charged"
        sent = [r for r in hop.requests if r.path == "/v1/music"]
        assert [r.headers.get("idempotency-key") for r in sent] == [lost.id]  # the key is the song's task id
        later = client_at(hop.url, token, journal)  # the notebook after a restart
        try:
            resumed = later.resume()
            assert resumed.unknown == () and [r.id for r in resumed.recovered] == [lost.id]
            assert "0 unknown, 1 engine song(s) settled by a team gateway" in repr(resumed)
            [song] = later.wait([lost.id], timeout=30, interval=0.05)
            assert song.state is TaskState.COMPLETE and later.download(song, tmp_path / "out").stat().st_size > 1000
            assert later.resume().recovered == ()  # once got, nothing is asked again
        finally:
            later.close()
    assert engine_counts(upstream) == {"/v1/music": 1}  # one paid call in all
    ledger = open_ledger(database)
    try:
        assert [c["state"] for c in ledger_dollars.calls(ledger)] == ["done"]
    finally:
        ledger.close()


def test_resume_is_told_the_truth_when_the_gateway_does_not_know_the_outcome_either(
    database: str, upstream: Sandbox, clean_env: None, hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    def drops(request: RawRequest, sock: socket.socket) -> None:
        sock.close()  # the engine read the call and answered nothing: may have been charged

    engine = hostile_server(drops)
    token = dollar_user(database, "kim")
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url,
                       engines={"elevenlabs": (engine.url, CANARY_KEY)}) as gateway:  # fmt: skip
        first = client_at(gateway.url, token, tmp_path / "journal.sqlite3")
        try:
            ids = first.generate(provider="elevenlabs", style="fog", seconds=4)
            [lost] = first.wait(ids, timeout=60, interval=0.05)
            assert lost.charge == "may have been charged"
            [unknown] = first.resume().unknown  # asked the gateway again: it does not know either
            assert unknown.payload["task_id"] == lost.id and "no answer is known for it" in (unknown.note or "")
        finally:
            first.engine_calls.join(30)
            first.close()
    assert len([r for r in engine.requests if r.path == "/v1/music"]) == 1  # never sent again


def test_the_gateways_info_lists_the_engines_it_serves_and_nothing_of_their_upstreams(
    database: str, upstream: Sandbox, clean_env: None
) -> None:
    token = add_user(database, "ivy")
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY), "lyria": (upstream.engines_base_url, CANARY_KEY)}
    with (
        GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as both,
        GatewayThread(database, upstream.base_url, upstream.v2_base_url) as none,
    ):
        answers = [httpx.get(g.url + "/gateway/v1/info", headers={"x-api-key": token}) for g in (both, none)]
        refused = httpx.get(both.url + "/gateway/v1/info", headers={"x-api-key": "nope"})
    assert [a.json()["engines"] for a in answers] == [["elevenlabs", "lyria"], []]
    for answer in answers:
        assert CANARY_KEY not in answer.text and upstream.engines_base_url not in answer.text
        assert upstream.engines_base_url.rsplit(":", 1)[-1] not in answer.text  # not even its port
    assert refused.status_code != 200 and "engines" not in refused.text


def test_resume_never_makes_a_new_call_for_one_that_never_reached_the_gateway(
    database: str, upstream: Sandbox, clean_env: None, hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    upstream.reset()
    token = dollar_user(database, "una")
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY)}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as gateway:
        swallowed: list[str] = []

        def handler(request: RawRequest, sock: socket.socket) -> None:
            if request.path.startswith("/v1/music") and not swallowed:
                swallowed.append(request.path)
                sock.close()  # the request was read here and went no further: the client cannot tell
                return
            headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
            answer = httpx.request(request.method, gateway.url + request.target, headers=headers,
                                   content=request.body, timeout=60)  # fmt: skip
            respond(sock, answer.status_code, raw=answer.content,
                    headers={"Content-Type": answer.headers.get("content-type", "application/json")})  # fmt: skip

        hop = hostile_server(handler)
        client = client_at(hop.url, token, tmp_path / "journal.sqlite3")
        try:
            [lost] = client.wait(client.generate(provider="elevenlabs", style="hail", seconds=4), timeout=60)
            assert lost.charge == "may have been charged"
            resumed = client.resume()
            [told] = resumed.recovered
            assert resumed.unknown == () and told.charge == "not charged" and "never sent" in told.fail_reason
        finally:
            client.engine_calls.join(30)
            client.close()
    assert engine_counts(upstream) == {}  # nothing was made: not then, not on resume
    assert [r.headers.get("x-ipymusicgen-repeat-only") for r in hop.requests if r.path == "/v1/music"] == [None, "1"]
    ledger = open_ledger(database)
    try:
        assert ledger_dollars.calls(ledger) == []
    finally:
        ledger.close()


def test_resume_never_asks_an_engines_own_host_for_a_gateways_info(
    upstream: Sandbox, clean_env: None, hostile_server: Callable[..., HostileServer], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """An answer lost on the way from ElevenLabs itself stays unknown, and `resume()` sends nothing there: before, it
    asked the engine's host for `/gateway/v1/info` with the user's engine key (one needless request per resume)."""
    from ipymusicgen.client import engine_recovery

    upstream.reset()
    hop = losing_hop(hostile_server, upstream.engines_base_url)  # no gateway: the engine, and a lossy network
    monkeypatch.setattr(engine_recovery, "ENGINE_HOSTS", engine_recovery.ENGINE_HOSTS | {hop.url.rstrip("/")})
    client = client_at(hop.url, CANARY_KEY, tmp_path / "journal.sqlite3")
    try:
        [lost] = client.wait(client.generate(provider="elevenlabs", style="hail", seconds=4), timeout=60)
        assert lost.charge == "may have been charged"
        resumed = client.resume()
        assert resumed.recovered == () and len(resumed.unknown) == 1
    finally:
        client.engine_calls.join(30)
        client.close()
    assert [r.path for r in hop.requests] == ["/v1/music"]  # the one paid call; no info asked, nothing re-sent


def test_an_async_clients_resume_asks_the_gateway_off_its_event_loop(
    upstream: Sandbox, clean_env: None, hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    """`resume()` asks a gateway's info and repeats a call over plain (blocking) HTTP; on an async client that runs
    in a thread: before, it ran on the event loop, which stood still for as long as the gateway took (up to 10 s)."""
    import asyncio
    import threading

    from ipymusicgen.client.engine_recovery import INFO_PATH as INFO
    from ipymusicgen.workspace.workspace import build_async_client

    upstream.reset()
    held, release, answered_in_time, lost = threading.Event(), threading.Event(), [], []

    def handler(request: RawRequest, sock: socket.socket) -> None:
        if request.path == INFO:  # held until the test's loop, still turning, lets it go
            held.set()
            answered_in_time.append(release.wait(30))
            respond(sock, 404, raw=b"{}", headers={"Content-Type": "application/json"})
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        answer = httpx.request(request.method, upstream.engines_base_url + request.target, headers=headers,
                               content=request.body, timeout=60)  # fmt: skip
        if request.path.startswith("/v1/music") and not lost:
            lost.append(request.path)
            sock.close()  # the song was made; the notebook never hears of it
            return
        respond(sock, answer.status_code, raw=answer.content,
                headers={"Content-Type": answer.headers.get("content-type", "application/json")})  # fmt: skip

    hop = hostile_server(handler)
    settings = Settings.from_env().with_changes(
        api_key=CANARY_KEY, base_url=hop.url, v2_base_url=hop.url, elevenlabs_base_url=hop.url,
        elevenlabs_api_key=SecretStr(CANARY_KEY), journal_path=tmp_path / "journal.sqlite3", poll_interval=0.05,
    )  # fmt: skip

    async def scenario() -> Any:
        client = build_async_client(settings, archive=False)
        try:
            [lost] = await client.wait(
                await client.generate(provider="elevenlabs", style="hail", seconds=4), timeout=60
            )
            assert lost.charge == "may have been charged"
            resuming = asyncio.ensure_future(client.resume())
            while not held.is_set():  # the loop turns while the gateway holds its answer
                await asyncio.sleep(0.01)
            pending = not resuming.done()  # before: the loop stood still until the client gave the gateway up
            release.set()
            return pending, await resuming
        finally:
            client.engine_calls.join(30)
            await client.aclose()

    pending, resumed = asyncio.run(scenario())
    assert pending and answered_in_time == [True]
    assert resumed.recovered == () and len(resumed.unknown) == 1  # no gateway there: still unknown, nothing re-sent
