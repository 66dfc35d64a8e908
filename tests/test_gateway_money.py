"""Money the upstream confirms (issue 39): a reading never settles a call below its estimate, a figure is attributed
only to a call no other overlapped (across replicas), what cannot be encoded is refused before anything is held, a
repeat or a refusal says what is true, and an answer the ledger could not take reaches its user and the ledger.
Each on SQLite and a real PostgreSQL where the ledger matters; prices 2 and 5 (`MFV2.0`, `MFV3.0` here)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, paid_counts, post
from helpers import wait_until
from hostile_server import HostileServer, RawRequest, respond
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

PRICES = "MFV2.0=2,MFV3.0=5"
TWO = {"action": "auto", "style": "two credits", "mv": "MFV2.0"}
FIVE = {"action": "auto", "style": "five credits", "mv": "MFV3.0"}


@pytest.fixture(autouse=True)
def prices(monkeypatch: pytest.MonkeyPatch, clean_env: None) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_COSTS", PRICES)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


class Billing:
    """An upstream whose credit counter the test controls: a generate answers two new ids and takes `real[style]`
    credits, at once or (`late`) only when the test says it landed; key info answers the counter, and while `hold`
    is set each reading is taken (its figure read) and then held until the test releases it."""

    def __init__(self, counts: int, real: dict[str, int], late: bool = False) -> None:
        self.counts = counts
        self.real = real
        self.late = late
        self.unlanded = 0
        self.hold = False
        self.held: list[threading.Event] = []
        self.readings = 0
        self.made = 0
        self.lock = threading.Lock()

    def land(self) -> None:
        with self.lock:
            self.counts -= self.unlanded
            self.unlanded = 0

    def __call__(self, request: RawRequest, sock: socket.socket) -> None:
        if request.path == "/v1/get_api_key_info":
            with self.lock:
                value = self.counts
                self.readings += 1
                gate = threading.Event() if self.hold else None
                if gate is not None:
                    self.held.append(gate)
            if gate is not None:
                gate.wait(60)
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": value}})
        elif request.path == "/v1/music/generate":
            cost = self.real[json.loads(request.body)["style"]]
            with self.lock:
                self.made += 1
                ids = [f"t{self.made}a", f"t{self.made}b"]
                if self.late:
                    self.unlanded += cost
                else:
                    self.counts -= cost
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"ids": ids}})
        else:
            respond(sock, 200, [])


def calls(database: str) -> list[dict]:
    with open_ledger(database) as ledger:
        return ledger.calls()


def looked_at(database: str, count: int) -> Callable[[], bool]:
    """Whether the meter has dealt with call number `count` (measured it, or said why not)."""

    def done() -> bool:
        made = calls(database)
        return len(made) >= count and (made[count - 1]["measured"] is not None or bool(made[count - 1].get("note")))

    return done


def charged(call: dict) -> int:
    return call["measured"] if call["measured"] is not None else call["estimated"]


def test_a_reading_that_shows_no_fall_never_settles_a_call_below_its_estimate(
    database: str, hostile_server: Callable[..., HostileServer]
) -> None:
    """The counter falls late (here: never while the test runs): each call reads as costing 0. A budget of 4 at 2
    credits a call still sends two calls, not every one."""
    billing = Billing(500, {"two credits": 2}, late=True)
    server = hostile_server(billing)
    token = add_user(database, "una", budget=4)
    outcomes = []
    with GatewayThread(database, server.url, server.url) as gateway:
        for n in range(4):
            answer = post(gateway.url, "/v1/music/generate", token, TWO, **{"Idempotency-Key": f"z{n}"}).json()
            outcomes.append(answer["status"])
            if answer["status"] == 200:
                wait_until(looked_at(database, n + 1), "the meter's reading of the call")
    assert outcomes == [200, 200, 400, 400]
    assert billing.made == 2
    made = calls(database)
    assert [charged(c) for c in made] == [2, 2] and all(c["measured"] is None for c in made)
    assert all("below the estimate" in c["note"] for c in made)
    with open_ledger(database) as ledger:
        assert ledger.remaining("una") == 0


def test_a_charge_that_lands_late_is_not_taken_for_the_next_calls_cost_and_a_higher_one_raises_it(
    database: str, hostile_server: Callable[..., HostileServer]
) -> None:
    billing = Billing(500, {"two credits": 2, "five credits": 5, "dearer": 7}, late=True)
    server = hostile_server(billing)
    token = add_user(database, "vic", budget=20)
    with GatewayThread(database, server.url, server.url) as gateway:
        assert post(gateway.url, "/v1/music/generate", token, TWO).json()["status"] == 200
        wait_until(looked_at(database, 1), "the first call's reading (no fall yet)")
        billing.land()  # the first call's 2 credits fall now, with the second call's 5 ...
        billing.late = False
        assert post(gateway.url, "/v1/music/generate", token, FIVE).json()["status"] == 200
        wait_until(looked_at(database, 2), "the second call's reading (a fall of 7)")
        dearer = {"action": "auto", "style": "dearer", "mv": "MFV3.0"}  # priced 5, the upstream takes 7
        assert post(gateway.url, "/v1/music/generate", token, dearer).json()["status"] == 200
        wait_until(looked_at(database, 3), "the third call's reading")
    first, second, third = calls(database)
    assert (charged(first), first["measured"]) == (2, None), "kept at its estimate, never 0"
    assert second["measured"] == 5, "its own 5, not the first call's late 2 on top"
    assert third["measured"] == 7, "a higher figure raises what the call cost"
    with open_ledger(database) as ledger:
        assert ledger.remaining("vic") == 20 - 2 - 5 - 7


def test_a_reading_another_replicas_call_overlapped_is_no_baseline_for_the_next_call(
    database: str, hostile_server: Callable[..., HostileServer]
) -> None:
    """Two gateways on one ledger. Carol's reading on A is taken before Bob's call on B and comes back after it: it
    may or may not hold Bob's 5 credits, so it measures nothing and is no baseline; Carol's next lone call is
    measured at its own 2, not 7."""
    billing = Billing(100, {"two credits": 2, "five credits": 5})
    server = hostile_server(billing)
    carol, bob = add_user(database, "carol"), add_user(database, "bob")
    with (
        GatewayThread(database, server.url, server.url) as a,
        GatewayThread(database, server.url, server.url) as b,
    ):
        billing.hold = True
        assert post(a.url, "/v1/music/generate", carol, TWO).json()["status"] == 200
        wait_until(lambda: len(billing.held) == 1, "A's reading after Carol's call is under way")
        assert post(b.url, "/v1/music/generate", bob, FIVE).json()["status"] == 200
        wait_until(lambda: len(billing.held) == 2, "B's reading after Bob's call is under way")
        billing.hold = False
        billing.held[1].set()  # B's reading (93) lands first, then A's, taken at 98 before Bob's call
        wait_until(lambda: _meter_counts(database) == 93, "B's reading recorded")
        billing.held[0].set()
        assert post(a.url, "/v1/music/generate", carol, TWO).json()["status"] == 200  # A's measurer: after A's reading
        wait_until(looked_at(database, 3), "Carol's second call looked at")
    first, bobs, second = calls(database)
    assert second["user"] == "carol" and second["measured"] == 2, "not 7: Bob's 5 fell outside her window"
    assert first["measured"] is None and bobs["measured"] is None
    assert "not measured" in first["note"] and "not measured" in bobs["note"]
    assert (charged(first), charged(bobs)) == (2, 5)


def _meter_counts(database: str) -> int | None:
    with open_ledger(database) as ledger, ledger._cursor(write=False) as cur:
        return cur.one("SELECT counts FROM meter WHERE id = 1")[0]


LONE_SURROGATES = [
    ("/v1/music/generate", rb'{"action": "auto", "style": "rain \udc80", "mv": "MFV2.0"}', "style"),
    ("/v1/music/generate", rb'{"action": "custom", "title": "\ud800", "lyrics": "la", "mv": "MFV2.0"}', "title"),
    ("/v1/lyrics", rb'{"prompt": "snow \udfff and ice"}', "prompt"),
    ("/v2/submit", rb'{"is_auto": 1, "prompt": "sea \udc80", "model_version": "v4.5"}', "prompt"),
]


@pytest.mark.parametrize(("path", "raw", "field"), LONE_SURROGATES, ids=["style", "title", "lyrics", "v2"])
def test_a_body_that_cannot_be_encoded_is_refused_before_anything_is_reserved(
    database: str, upstream: Sandbox, path: str, raw: bytes, field: str
) -> None:
    upstream.reset()
    mallory, nia = add_user(database, "mallory"), add_user(database, "nia")
    assert cli("team", "budget", "9", "--database", database)[0] == 0
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway:
        for n in range(6):  # 6 x 2 credits would hold more than the team's 9
            answer = httpx.post(
                gateway.url + path,
                content=raw,
                headers={"x-api-key": mallory, "content-type": "application/json", "Idempotency-Key": f"s{n}"},
                timeout=30,
            )
            assert answer.status_code == 422, answer.text
            assert answer.json()["detail"][0]["loc"][-1] == field
        assert calls(database) == [], "nothing reserved, so nothing left pending"
        assert post(gateway.url, "/v1/music/generate", nia, TWO).json()["status"] == 200, "the team's budget is whole"
    assert paid_counts(upstream) == {"/v1/music/generate": 1}


def test_a_call_that_never_reached_the_upstream_says_so_to_its_repeat(
    database: str, hostile_server: Callable[..., HostileServer]
) -> None:
    server = hostile_server(Billing(50, {}))
    token = add_user(database, "oli", budget=4)
    with GatewayThread(database, server.url, server.url) as gateway:
        server.close()  # nothing listens: the call cannot reach the upstream
        first = post(gateway.url, "/v1/music/generate", token, TWO, **{"Idempotency-Key": "gone"})
        repeat = post(gateway.url, "/v1/music/generate", token, TWO, **{"Idempotency-Key": "gone"})
    assert first.status_code == 502 and "nothing was sent or charged" in first.json()["message"]
    assert repeat.status_code == 502 and repeat.json() == first.json(), "not 'it may have been charged'"
    with open_ledger(database) as ledger:
        assert ledger.remaining("oli") == 4


@pytest.mark.parametrize("depth", [990, 5_000, 200_000])
def test_a_deeply_nested_body_is_refused_as_a_bad_request_not_as_maybe_charged(
    tmp_path: Path, upstream: Sandbox, depth: int
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "pip", budget=9)
    nested = b'{"action": "auto", "style": "x", "mv": "MFV2.0", "extra": ' + b"[" * depth + b"]" * depth + b"}"
    upstream.reset()
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway:
        for path in ("/v1/music/generate", "/v2/submit", "/v1/lyrics"):
            answer = httpx.post(
                gateway.url + path, content=nested, headers={"x-api-key": token, "Idempotency-Key": "n"}, timeout=30
            )
            assert 400 <= answer.status_code < 500 or answer.json()["status"] == 200, answer.text[:300]
            assert "may have been charged" not in answer.text
    assert all(c["state"] != "pending" for c in calls(database)), "no reservation left behind"


def test_an_answer_that_cannot_be_read_is_maybe_charged_never_not_sent(
    database: str, hostile_server: Callable[..., HostileServer]
) -> None:
    def answer(request: RawRequest, sock: socket.socket) -> None:
        if request.path == "/v1/get_api_key_info":
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 50}})
        else:  # a paid call, taken (and charged), answered with JSON nested past any parser's depth
            respond(sock, 200, raw=b'{"status": 200, "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")

    server = hostile_server(answer)
    token = add_user(database, "rue", budget=9)
    with GatewayThread(database, server.url, server.url) as gateway:
        sent = post(gateway.url, "/v1/music/generate", token, FIVE, **{"Idempotency-Key": "deep"})
        repeat = post(gateway.url, "/v1/music/generate", token, FIVE, **{"Idempotency-Key": "deep"})
    assert sent.status_code == 503 and "may have been charged" in sent.json()["message"], sent.text
    assert repeat.status_code == 503 and "may have been charged" in repeat.json()["message"]
    assert [c["state"] for c in calls(database)] == ["unknown"]
    with open_ledger(database) as ledger:
        assert ledger.remaining("rue") == 4, "its reservation kept"
