"""Calls whose outcome the ledger does not know (issue 39): an answer that arrives while the ledger is down reaches its
user and then the ledger; `gateway reconcile` (also run as `gateway serve` starts) settles a call whose gateway was
killed with -9 mid-payment from the upstream's task list, records its owner, releases one that made nothing, and
lists what stays unknown. On SQLite and a real PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayProcess, GatewayThread, add_user, cli, paid_counts, post
from helpers import wait_until
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.gateway.backlog import Backlog, Unwritten
from ipymusicgen.gateway.reconcile import reconcile
from ipymusicgen.gateway.upstream import Answer
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

FIVE = {"action": "auto", "style": "five credits, killed", "mv": "MFV3.0"}
GENERATE = "/v1/music/generate"


@pytest.fixture(autouse=True)
def prices(monkeypatch: pytest.MonkeyPatch, clean_env: None) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_COSTS", "MFV2.0=2,MFV3.0=5")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 1000}, max_running=100) as server:
        yield server


class TaskList:
    """An upstream that answers the key's task list with `records` (reconcile reads nothing else)."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def read(self, path: str, params: dict | None = None) -> Answer:
        assert path == "/v1/music/tasks" and not params
        return Answer(200, json.dumps(self.records).encode(), {})


class DownLedger:
    def finish(self, *args: object) -> bool:
        raise OSError("the database server is restarting")


def test_a_spilled_answer_is_written_by_the_next_start_after_the_gateway_is_gone(database: str, tmp_path: Path) -> None:
    folder = tmp_path / "unsaved"
    with open_ledger(database) as ledger:
        ledger.add_user("tess", "hash-tess", 9)
        call = ledger.reserve("tess", "t1", GENERATE, "MFV3.0", 5).call_id
        body = json.dumps({"status": 200, "message": "Success", "data": {"ids": ["ta", "tb"]}}).encode()
        kept = Backlog(DownLedger(), folder)
        kept.keep(Unwritten(call, "done", 200, body, ["ta", "tb"]))
        kept.close()  # the gateway is gone (kill -9): only the spill file holds the answer
        (spill,) = folder.glob("*.json")
        assert stat.S_IMODE(spill.stat().st_mode) == 0o600
        report = reconcile(ledger, TaskList([]), Backlog(ledger, folder))
        assert report.written == 1 and not report.unknown
        assert [c["state"] for c in ledger.calls()] == ["done"] and ledger.tasks_of("tess") == ["ta", "tb"]
        assert ledger.reserve("tess", "t1", GENERATE, "MFV3.0", 5).body == body, "its repeat answers the ids"
        assert not list(folder.glob("*.json"))
        assert reconcile(ledger, TaskList([]), Backlog(ledger, folder)).written == 0, "written once"


def test_a_dead_call_that_made_nothing_is_released_only_when_no_send_can_still_land(database: str) -> None:
    made = {"id": "u1", "style": "someone else's", "title": "x", "song_id": "s-u1"}
    with open_ledger(database) as ledger:
        ledger.add_user("sam", "hash-sam", 9)
        sent = json.dumps({"action": "auto", "style": "never made", "mv": "MFV3.0"}).encode()
        call = ledger.reserve("sam", "g1", GENERATE, "MFV3.0", 5, None, sent).call_id
        ledger.finish(call, "unknown", None, None)
        young = reconcile(ledger, TaskList([]))
        assert [c.id for c in young.unknown] == [call], "the upstream may still be making it"
        stray = reconcile(ledger, TaskList([made]), dead_after=-1)
        assert [c.id for c in stray.unknown] == [call], "a task nobody's call explains: it could be this one's"
        assert ledger.remaining("sam") == 4
        released = reconcile(ledger, TaskList([]), dead_after=-1)
        assert released.released == [call] and ledger.remaining("sam") == 9
        repeat = ledger.reserve("sam", "g1", GENERATE, "MFV3.0", 5, None, sent)
        assert repeat.status_code == 502 and b"nothing was charged" in repeat.body


@pytest.mark.slow  # gateway processes, a kill -9, a real PostgreSQL
@pytest.mark.parametrize(
    ("engine", "how"), [("sqlite", "serve"), ("sqlite", "cli"), ("postgres", "serve"), ("postgres", "cli")]
)
def test_a_call_whose_gateway_was_killed_mid_payment_is_settled_and_its_songs_are_its_users(
    engine: str, how: str, upstream: Sandbox, tmp_path: Path, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    upstream.reset()
    database = (
        str(tmp_path / "g.sqlite3") if engine == "sqlite" else request.getfixturevalue("postgres_server").new_database()
    )
    rex = add_user(database, "rex", budget=9)
    upstream.set_faults([{"kind": "slow", "path": GENERATE, "seconds": 30.0}])  # made at once, answered late
    with GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "first.log") as first:
        sender = threading.Thread(target=_post_quietly, args=(first.url, rex), daemon=True)
        sender.start()
        wait_until(lambda: paid_counts(upstream).get(GENERATE) == 1, "the call to reach the upstream")
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
    upstream.clear_faults()
    with open_ledger(database) as ledger:
        assert [c["state"] for c in ledger.calls()] == ["pending"] and ledger.tasks_of("rex") == []
        lyrics = ledger.reserve("rex", "l1", "/v1/lyrics", None, 1).call_id  # a call no task list can explain
        ledger.finish(lyrics, "unknown", None, None)
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
    if how == "cli":
        upstreams = ("--upstream", upstream.base_url, "--upstream-v2", upstream.v2_base_url)
        code, out = cli("reconcile", "--database", database, *upstreams)
        assert code == 1, "a call stays unknown"
    else:
        with GatewayProcess(database, upstream.base_url, upstream.v2_base_url, tmp_path / "second.log"):
            pass
        out = (tmp_path / "second.log").read_text()
    assert "reconciled: 1 settled, 0 released, 1 unknown" in out
    assert f"unknown call {lyrics}\trex\t/v1/lyrics\t1 credits held" in out
    with open_ledger(database) as ledger:
        states = {c["idem_key"]: c["state"] for c in ledger.calls()}
        owned = ledger.tasks_of("rex")
        assert states == {"k": "done", "l1": "unknown"} and len(owned) == 2
        assert ledger.remaining("rex") == 9 - 5 - 1
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as again:
        repeat = post(again.url, GENERATE, rex, FIVE, **{"Idempotency-Key": "k"})
        assert repeat.status_code == 200 and sorted(repeat.json()["data"]["ids"]) == sorted(owned)
        polled = httpx.get(again.url + GENERATE.replace("generate", "tasks"), headers={"x-api-key": rex}, timeout=30)
        assert sorted(t["id"] for t in polled.json()) == sorted(owned), "rex polls his own songs"
    assert paid_counts(upstream)[GENERATE] == 1, "nothing sent again"
    logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert CANARY_KEY not in logs + out


def _post_quietly(url: str, token: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the gateway is killed: the client hears nothing
        post(url, GENERATE, token, FIVE, **{"Idempotency-Key": "k"})


@pytest.mark.slow  # stops and starts the PostgreSQL server
def test_an_answer_that_arrives_while_postgresql_is_down_reaches_its_user_and_then_the_ledger(
    upstream: Sandbox, request: pytest.FixtureRequest
) -> None:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    database = server.new_database()
    upstream.reset()
    quin = add_user(database, "quin", budget=9)
    upstream.set_faults([{"kind": "slow", "path": GENERATE, "seconds": 4.0, "count": 1}])
    answers: list[httpx.Response] = []
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway:
        sender = threading.Thread(
            target=lambda: answers.append(post(gateway.url, GENERATE, quin, FIVE, **{"Idempotency-Key": "q"}))
        )
        sender.start()
        wait_until(lambda: paid_counts(upstream).get(GENERATE) == 1, "the call to reach the upstream")
        server.halt()
        try:
            sender.join(60)
            (answer,) = answers
            assert answer.status_code == 200 and answer.json()["status"] == 200, answer.text
            ids = answer.json()["data"]["ids"]
            assert len(ids) == 2, "the user has their ids"
            assert len(list(gateway.gateway.backlog.folder.glob("*.json"))) == 1, "and a spill file keeps them"
        finally:
            server.resume()
        wait_until(lambda: not list(gateway.gateway.backlog.folder.glob("*.json")), "the kept answer written")
    with open_ledger(database) as ledger:
        assert [c["state"] for c in ledger.calls()] == ["done"] and sorted(ledger.tasks_of("quin")) == sorted(ids)
        assert ledger.remaining("quin") == 4
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as other:  # another replica knows them too
        polled = httpx.get(f"{other.url}/v1/music/tasks?ids={','.join(ids)}", headers={"x-api-key": quin}, timeout=30)
        assert sorted(t["id"] for t in polled.json()) == sorted(ids)


def test_an_answer_the_ledger_refuses_to_record_goes_to_its_user_and_answers_its_repeat_until_it_is_written(
    database: str, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.reset()
    uma = add_user(database, "uma", budget=9)
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway:
        ledger = gateway.gateway.ledger
        with monkeypatch.context() as down:
            down.setattr(ledger, "finish", DownLedger().finish)  # the ledger takes no call's end for now
            first = post(gateway.url, GENERATE, uma, FIVE, **{"Idempotency-Key": "u"})
            assert first.status_code == 200 and len(first.json()["data"]["ids"]) == 2, "the user gets their ids"
            repeat = post(gateway.url, GENERATE, uma, FIVE, **{"Idempotency-Key": "u"})
            assert repeat.json() == first.json(), "the kept answer, not 'it may have been charged'"
            assert [c["state"] for c in ledger.calls()] == ["pending"]
        wait_until(lambda: [c["state"] for c in ledger.calls()] == ["done"], "the kept answer written")
        assert sorted(ledger.tasks_of("uma")) == sorted(first.json()["data"]["ids"])
    assert paid_counts(upstream)[GENERATE] == 1
