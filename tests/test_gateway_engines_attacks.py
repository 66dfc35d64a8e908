"""Attacks on the gateway's engine paths: concurrent calls against one dollar budget (both ledgers), a repeat of an
Idempotency-Key while the first call is still being made, a caller who hangs up mid-song, hostile bodies, the team's
dollar cap, and calls a killed gateway left pending."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, cli, dollar_user, engine_calls, engines_gateway_over
from helpers import wait_until
from hostile_server import HostileServer, RawRequest, respond
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage import ledger_dollars
from ipymusicgen.storage.ledger_engines import open_ledger

AUDIO = b"ID3" + bytes(range(256)) * 40


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


@pytest.fixture
def engines_gateway(database: str, upstream: Sandbox, clean_env: None) -> Iterator[GatewayThread]:
    with engines_gateway_over(database, upstream) as running:
        yield running


def el_post(url: str, token: str, body: Any, timeout: float = 60, **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/music", json=body, headers={"xi-api-key": token, **headers}, timeout=timeout)


def test_concurrent_calls_never_overspend_one_dollar_budget(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token = dollar_user(database, "pat", "1.50")  # two one-minute songs at $0.75
    body = {"prompt": "race", "music_length_ms": 3_000}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: el_post(engines_gateway.url, token, body), range(8)))
    assert sorted(a.status_code for a in answers) == [200, 200] + [402] * 6
    assert upstream.request_counts().get("/v1/music") == 2
    assert [r["state"] for r in engine_calls(database)] == ["done", "done"]


def test_two_replicas_on_one_ledger_never_overspend_one_dollar_budget(
    database: str, upstream: Sandbox, clean_env: None
) -> None:
    upstream.reset()
    token = dollar_user(database, "ray", "1.50")
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY)}
    body = {"prompt": "two doors", "music_length_ms": 3_000}
    with (
        GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as one,
        GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as two,
        ThreadPoolExecutor(8) as pool,
    ):
        answers = list(pool.map(lambda i: el_post((one, two)[i % 2].url, token, body), range(8)))
    assert sorted(a.status_code for a in answers) == [200, 200] + [402] * 6
    assert upstream.request_counts().get("/v1/music") == 2


@pytest.fixture
def held_engine(hostile_server: Callable[..., HostileServer]) -> tuple[HostileServer, threading.Event]:
    """An engine that holds each call until the test lets it answer (with audio)."""
    release = threading.Event()

    def handler(request: RawRequest, sock: socket.socket) -> None:
        release.wait(30)
        respond(sock, 200, raw=AUDIO, headers={"Content-Type": "audio/mpeg"})

    return hostile_server(handler), release


def test_a_repeat_while_the_first_call_is_made_is_told_the_truth_then_gets_the_kept_song(
    tmp_path: Path, clean_env: None, upstream: Sandbox, held_engine: tuple[HostileServer, threading.Event]
) -> None:
    engine, release = held_engine
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "quinn", "5")
    body = {"prompt": "slow", "music_length_ms": 3_000}
    engines = {"elevenlabs": (engine.url, "sk_team_key_0001")}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(el_post, running.url, token, body, 60, **{"Idempotency-Key": "one"})
            engine.received.wait(30)
            during = el_post(running.url, token, body, **{"Idempotency-Key": "one"})
            assert during.status_code == 503 and during.json()["detail"]["status"] == "may_have_been_charged"
            release.set()
            assert first.result().status_code == 200 and first.result().content == AUDIO
        after = el_post(running.url, token, body, **{"Idempotency-Key": "one"})
    assert after.status_code == 200 and after.content == AUDIO
    assert len(engine.requests) == 1  # sent once
    assert [r["state"] for r in engine_calls(database)] == ["done"]


def test_a_caller_who_hangs_up_mid_song_gets_it_on_the_repeat(
    tmp_path: Path, clean_env: None, upstream: Sandbox, held_engine: tuple[HostileServer, threading.Event]
) -> None:
    engine, release = held_engine
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "rae", "5")
    body = {"prompt": "gone", "music_length_ms": 3_000}
    engines = {"elevenlabs": (engine.url, "sk_team_key_0002")}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(lambda: el_post(running.url, token, body, 0.3, **{"Idempotency-Key": "h"}))
            engine.received.wait(30)
            with pytest.raises(httpx.ReadTimeout):
                future.result()  # the caller gave up while the engine made the song
        release.set()
        wait_until(lambda: [r["state"] for r in engine_calls(database)] == ["done"], "the song recorded though unread")
        repeat = el_post(running.url, token, body, **{"Idempotency-Key": "h"})
    assert repeat.status_code == 200 and repeat.content == AUDIO
    assert len(engine.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "x", "music_length_ms": "5000"},
        {"prompt": "x", "music_length_ms": -1},
        {"prompt": "x", "music_length_ms": True},
        {"prompt": "x", "music_length_ms": 5000.5},
        {"prompt": "x", "model_id": ["music_v1"]},
        {"prompt": "x", "model_id": "music_v99"},
        [1, 2],
        "x",
    ],
)
def test_a_body_that_cannot_be_priced_is_refused_and_nothing_is_sent(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, body: Any
) -> None:
    token = dollar_user(database, "sol", "5")
    answer = el_post(engines_gateway.url, token, body)
    assert answer.status_code == 422, answer.text
    assert upstream.request_counts().get("/v1/music") is None and engine_calls(database) == []


def test_broken_json_and_huge_bodies_are_refused_before_anything_is_held(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token = dollar_user(database, "tess", "5")
    headers = {"xi-api-key": token, "content-type": "application/json"}
    for raw in (b"{not json", b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b'{"prompt": NaN}'):
        answer = httpx.post(engines_gateway.url + "/v1/music", content=raw, headers=headers)
        assert answer.status_code in (413, 422), (raw[:10], answer.status_code)
    huge = httpx.post(engines_gateway.url + "/v1/music", content=b" " * (2 << 20), headers=headers)
    assert huge.status_code == 413
    assert upstream.request_counts().get("/v1/music") is None and engine_calls(database) == []


def test_the_teams_dollar_cap_holds_across_users(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    uma, vic = dollar_user(database, "uma", "5"), dollar_user(database, "vic", "5")
    assert cli("team", "budget-usd", "1", "--database", database)[0] == 0
    body = {"prompt": "x", "music_length_ms": 30_000}
    assert el_post(engines_gateway.url, uma, body).status_code == 200
    refused = el_post(engines_gateway.url, vic, body)
    assert refused.status_code == 402
    said = refused.json()["detail"]["message"]
    assert "the team's dollar budget" in said and "gateway team budget-usd N" in said
    assert upstream.request_counts().get("/v1/music") == 1


def test_calls_a_killed_gateway_left_pending_become_unknown_and_keep_their_price(
    tmp_path: Path, clean_env: None, upstream: Sandbox
) -> None:
    from ipymusicgen.gateway.engine_routes import recover_engine_calls

    database = str(tmp_path / "gateway.sqlite3")
    dollar_user(database, "wes", "5")
    ledger = open_ledger(database)
    try:
        held = ledger_dollars.reserve(ledger, "wes", "k", "lyria", "/v1beta/x", "m", 40_000, None)
        assert held.kind == "new"
        with ledger._cursor() as cur:  # its sender stopped long ago (a kill -9 on another machine)
            cur.run("UPDATE engine_calls SET created_at = created_at - 100000")
        assert recover_engine_calls(ledger) == 1
        assert [r["state"] for r in ledger_dollars.calls(ledger)] == ["unknown"]
        assert ledger_dollars.standing(ledger)["wes"] == (5_000_000, 40_000)
        repeat = ledger_dollars.reserve(ledger, "wes", "k", "lyria", "/v1beta/x", "m", 40_000, None)
        assert repeat.kind == "repeat" and repeat.state == "unknown"
    finally:
        ledger.close()


def test_an_answer_without_a_song_is_judged_by_the_engine_modules_own_rules(
    tmp_path: Path, clean_env: None, upstream: Sandbox, hostile_server: Callable[..., HostileServer]
) -> None:
    """A Lyria prompt blocked before any music was not charged (its price comes back); an ElevenLabs 200 that is not
    audio may have been charged (its price is kept, nothing is sent again)."""

    def handler(request: RawRequest, sock: socket.socket) -> None:
        if "generateContent" in request.path:
            respond(sock, 200, {"promptFeedback": {"blockReason": "SAFETY"}})
        else:
            respond(sock, 200, {"status": "ok"})

    engine = hostile_server(handler)
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "xan", "5")
    engines = {"elevenlabs": (engine.url, "sk_team_key_0003"), "lyria": (engine.url, "sk_team_key_0003")}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        blocked = httpx.post(
            running.url + "/v1beta/models/lyria-3-clip-preview:generateContent",
            params={"key": token},
            json={"contents": [{"parts": [{"text": "x"}]}]},
        )
        odd = el_post(running.url, token, {"prompt": "x", "music_length_ms": 3_000})
    assert blocked.status_code == odd.status_code == 200  # the engine's answers, as they came
    assert [(r["provider"], r["state"]) for r in engine_calls(database)] == [
        ("lyria", "refused"),
        ("elevenlabs", "unknown"),
    ]
    ledger = open_ledger(database)
    try:
        assert ledger_dollars.standing(ledger)["xan"] == (5_000_000, 750_000)  # the clip's $0.04 came back
    finally:
        ledger.close()


def test_the_engine_gets_exactly_the_body_that_was_priced(
    tmp_path: Path, clean_env: None, upstream: Sandbox, hostile_server: Callable[..., HostileServer]
) -> None:
    """A body naming a key twice is priced by the last value; the engine must get only that one (a parser that kept
    the first would make a ten-minute song priced as three seconds, or the reverse). A lone surrogate cannot be sent
    as UTF-8: refused before anything is held."""
    import json

    def handler(request: RawRequest, sock: socket.socket) -> None:
        respond(sock, 200, raw=AUDIO, headers={"Content-Type": "audio/mpeg"})

    engine = hostile_server(handler)
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "yan", "10")
    engines = {"elevenlabs": (engine.url, "sk_team_key_0004")}
    twice = b'{"prompt": "x", "music_length_ms": 3000, "music_length_ms": 600000}'
    headers = {"xi-api-key": token, "content-type": "application/json"}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        answer = httpx.post(running.url + "/v1/music", content=twice, headers=headers)
        surrogate = httpx.post(running.url + "/v1/music", content=b'{"prompt": "\\ud800"}', headers=headers)
    assert answer.status_code == 200 and surrogate.status_code == 422
    [sent] = engine.requests
    assert sent.body.count(b"music_length_ms") == 1 and json.loads(sent.body)["music_length_ms"] == 600_000
    assert [r["estimated_usd"] for r in engine_calls(database)] == [7_500_000]  # ten started minutes at $0.75


def test_gateway_reconcile_says_which_engine_calls_a_stopped_gateway_left(
    tmp_path: Path, clean_env: None, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    dollar_user(database, "zoe", "5")
    ledger = open_ledger(database)
    try:
        ledger_dollars.reserve(ledger, "zoe", None, "elevenlabs", "/v1/music", "music_v1", 750_000, None)
        with ledger._cursor() as cur:
            cur.run("UPDATE engine_calls SET created_at = created_at - 100000")
    finally:
        ledger.close()
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
    upstream.reset()
    code, out = cli("reconcile", "--upstream", upstream.base_url, "--upstream-v2", upstream.v2_base_url,
                    "--database", database)  # fmt: skip
    assert "1 engine call(s) a stopped gateway left pending: now unknown" in out, (code, out)
    assert [r["state"] for r in engine_calls(database)] == ["unknown"]
    _, again = cli("reconcile", "--upstream", upstream.base_url, "--upstream-v2", upstream.v2_base_url,
                   "--database", database)  # fmt: skip
    assert "engine call" not in again  # said once
