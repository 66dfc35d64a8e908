"""What a hostile or buggy team gateway can make a notebook believe of a batch it handed over (issue 39).

The notebook took the gateway's row states as they came: a row 'complete' with ids that are another user's or
that do not exist, two rows naming the same songs, a cost of NaN (the follower died), below zero or 10**30, an
answer that says the batch is done while leaving a row out (the notebook waited for ever), a state that is no
state. Now the notebook believes what it can check: a row is complete once it has read its songs itself, ids are
one row's, a cost is a whole number within reach of the row's estimate (else the estimate), and a batch the
gateway calls over ends with each row it never named unknown. The gateway here is a stand-in served by uvicorn on
127.0.0.1 that answers the batch paths with what each test says, marked as a gateway in its key info."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from gateway_helpers import START_TIMEOUT, free_port
from helpers import wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.storage.journal import Journal

pytestmark = pytest.mark.slow  # a server in a thread and a batch followed in real time
TOKEN = "gw-user-token-hostile"


class HostileGateway:
    """Answers `/gateway/v1/batches` with `rows` (and `state`); its task reads know only `songs` (the caller's)."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.state = "done"
        self.extra: dict[str, Any] = {}
        self.songs: dict[str, dict[str, Any]] = {}
        self.posts = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(
            routes=[
                Route("/v1/get_api_key_info", self._info, methods=["GET"]),
                Route("/gateway/v1/batches", self._batch, methods=["GET", "POST"]),
                Route("/gateway/v1/batches/stop", self._batch, methods=["POST"]),
                Route("/v1/music/tasks", self._tasks, methods=["GET"]),
            ]
        )
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> HostileGateway:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started:
            assert time.monotonic() < deadline, "the stand-in gateway did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    @staticmethod
    def _json(data: Any) -> Response:  # json.dumps writes NaN as a hostile server may (Starlette's JSON would not)
        return Response(json.dumps({"status": 200, "message": "Success", "data": data}), media_type="application/json")

    async def _info(self, request: Request) -> Response:
        return self._json({"key_music_counts": 1000, "gateway": "ipymusicgen"})

    async def _batch(self, request: Request) -> Response:
        self.posts += request.method == "POST"
        return self._json({"name": "hostile", "state": self.state, "note": None, "rows": self.rows, **self.extra})

    async def _tasks(self, request: Request) -> Response:
        asked = (request.query_params.get("ids") or "").split(",")
        return self._json([self.songs[i] for i in asked if i in self.songs])


@pytest.fixture
def gateway(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileGateway]:
    monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
    monkeypatch.setenv("MUSICGEN_POLL_INTERVAL", "0.05")
    with HostileGateway() as running:
        yield running


def song(task_id: str, status: int = 0) -> dict[str, Any]:
    return {"id": task_id, "status": status, "style": "s", "title": "t", "duration": 120000, "audio_url": None}


def rows_of(n: int) -> list[dict[str, str]]:
    return [{"style": f"row {i}", "mv": "MFV2.0"} for i in range(n)]  # 2 credits each


def run(gateway: HostileGateway, journal: Path, n: int = 3) -> Any:
    """The batch handed to the stand-in and followed in a thread; waits on its end (a hang is a failure)."""
    client = MusicClient(TOKEN, base_url=gateway.url, v2_base_url=gateway.url, journal=Journal(journal), timeout=10)
    batch = client.batch(rows_of(n), name="hostile", concurrency=3, stall_timeout=30, wait=False)
    wait_until(lambda: batch.done, "the batch to end")
    client.close()
    return batch


def stored(journal: Path) -> dict[int, tuple[str, list[str]]]:
    store = BatchStore(journal)
    try:
        return {i: (r.state, r.ids) for i, r in store.rows("hostile").items()}
    finally:
        store.close()


def test_a_row_is_complete_only_once_the_notebook_has_read_its_own_songs(
    gateway: HostileGateway, tmp_path: Path
) -> None:
    gateway.songs = {i: song(i) for i in ("mine-1", "mine-2")}
    gateway.rows = [
        {"index": 0, "state": "complete", "ids": ["mine-1", "mine-2"], "error": None, "cost": 2},
        {"index": 1, "state": "complete", "ids": ["theirs-1", "nowhere-2"], "error": None, "cost": 2},
        {"index": 2, "state": "complete", "ids": ["mine-1", "mine-2"], "error": None, "cost": 2},
    ]
    batch = run(gateway, tmp_path / "j.sqlite3")
    assert batch.error is None, batch.error
    assert [r.state for r in batch.rows] == ["complete", "failed", "unknown"], [(r.state, r.error) for r in batch.rows]
    assert "could not be read" in (batch.rows[1].error or "")
    assert "row 1" in (batch.rows[2].error or "") and batch.rows[2].ids == []
    assert [s for s, _ in stored(tmp_path / "j.sqlite3").values()] == ["complete", "failed", "unknown"]


def test_a_row_said_complete_whose_songs_failed_when_read_here_is_failed(
    gateway: HostileGateway, tmp_path: Path
) -> None:
    gateway.songs = {"h-1": {**song("h-1", 3), "fail_reason": "refused"}, "h-2": {**song("h-2", 3), "fail_code": 1}}
    gateway.rows = [{"index": 0, "state": "complete", "ids": ["h-1", "h-2"], "error": None, "cost": 2}]
    batch = run(gateway, tmp_path / "j.sqlite3", n=1)
    assert batch.error is None, batch.error
    assert batch.rows[0].state == "failed" and "every song of this row failed" in (batch.rows[0].error or "")


@pytest.mark.parametrize("cost", [float("nan"), -50, 10**30, 4.5, True, "9"])
def test_a_rows_cost_is_a_whole_number_within_reach_of_its_estimate(
    gateway: HostileGateway, tmp_path: Path, cost: Any
) -> None:
    gateway.songs = {i: song(i) for i in ("c-1", "c-2", "d-1", "d-2")}
    gateway.rows = [
        {"index": 0, "state": "complete", "ids": ["c-1", "c-2"], "error": None, "cost": cost},
        {"index": 1, "state": "complete", "ids": ["d-1", "d-2"], "error": None, "cost": 3},  # measured above: kept
    ]
    batch = run(gateway, tmp_path / "j.sqlite3", n=2)
    assert batch.error is None, batch.error
    assert [r.state for r in batch.rows] == ["complete", "complete"]
    assert [r.cost for r in batch.rows] == [2, 3], "an unbelievable figure reads as the row's estimate"
    assert batch.spent_estimate == 5


def test_a_batch_the_gateway_calls_over_ends_with_the_rows_it_never_named_unknown(
    gateway: HostileGateway, tmp_path: Path
) -> None:
    gateway.songs = {i: song(i) for i in ("e-1", "e-2")}
    gateway.rows = [
        {"index": 0, "state": "complete", "ids": ["e-1", "e-2"], "error": None, "cost": 2},
        {"index": True, "state": "complete", "ids": [], "error": None, "cost": 2},  # a bool is no row number
        {"index": 7, "state": "complete", "ids": [], "error": None, "cost": 2},  # no such row
        {"index": 2, "state": "pwned<script>", "ids": [], "error": "x" * 100_000, "cost": 2},  # no such state
        "not a row",
    ]
    batch = run(gateway, tmp_path / "j.sqlite3")
    assert batch.error is None, batch.error
    assert [r.state for r in batch.rows] == ["complete", "unknown", "unknown"], [r.state for r in batch.rows]
    assert all("without ever reporting" in (r.error or "") for r in batch.rows[1:]), [r.error for r in batch.rows]
    assert all(len(r.error or "") < 2000 for r in batch.rows)
    assert batch.spent_estimate == 6, "a row never named may have cost: counted at its estimate"


def test_retry_unknown_through_a_gateway_that_cannot_honour_it_is_refused_in_one_line_before_anything_is_sent(
    gateway: HostileGateway, tmp_path: Path
) -> None:
    """An older gateway shows its rows without their attempt: the notebook cannot name the attempt it asks to resend,
    so it refuses before the hand-off, in one line, rather than let retry_unknown silently do nothing."""
    from ipymusicgen.batch.rows import BatchError

    gateway.state = "running"
    gateway.rows = [{"index": 0, "state": "unknown", "ids": [], "error": "may have been charged", "cost": 2}]
    client = MusicClient(TOKEN, base_url=gateway.url, v2_base_url=gateway.url, journal=Journal(tmp_path / "j"))
    with client, pytest.raises(BatchError) as refused:
        client.batch(rows_of(1), name="hostile", retry_unknown=True)
    assert "cannot resend rows whose outcome is unknown" in str(refused.value) and "\n" not in str(refused.value)
    assert gateway.posts == 0, "nothing handed over"


def test_a_batch_called_done_with_a_row_still_sent_ends_with_that_row_unknown(
    gateway: HostileGateway, tmp_path: Path
) -> None:
    """A gateway ends a batch only once every row is over: one that says done while a row is still 'sent' (its song
    running for ever) contradicts itself, and the notebook no longer follows that row for ever."""
    gateway.songs = {"f-1": song("f-1"), "f-2": song("f-2"), "g-1": song("g-1", status=1), "g-2": song("g-2", 1)}
    gateway.rows = [
        {"index": 0, "state": "complete", "ids": ["f-1", "f-2"], "error": None, "cost": 2},
        {"index": 1, "state": "sent", "ids": ["g-1", "g-2"], "error": None, "cost": 2},
    ]
    batch = run(gateway, tmp_path / "j.sqlite3", n=2)
    assert batch.error is None, batch.error
    assert [r.state for r in batch.rows] == ["complete", "unknown"], [(r.state, r.error) for r in batch.rows]
    assert "still sent" in (batch.rows[1].error or "") and batch.rows[1].ids == ["g-1", "g-2"]


def test_a_real_gateway_whose_ledger_names_another_users_songs_for_a_row_is_not_believed(
    tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real gateway (served by uvicorn over the sandbox, a SQLite ledger) whose ledger a bug or a hand edited: bob's
    row 2 names ann's songs. Another notebook of bob's attaches to the batch: it polls those ids itself, the gateway
    answers nothing for another user's ids, so the row ends failed, not complete with ann's songs."""
    from gateway_helpers import CANARY_KEY, GatewayThread, add_user

    from ipymusicgen.sandbox import Sandbox
    from ipymusicgen.storage.ledger_engines import open_ledger

    monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
    monkeypatch.setenv("MUSICGEN_POLL_INTERVAL", "0.05")
    monkeypatch.setenv("MUSICGEN_GATEWAY_FOLLOW_S", "0.1")
    database = str(tmp_path / "gateway.sqlite3")
    with (
        Sandbox(stage_seconds=0.05, song_seconds=3, faults="", keys={CANARY_KEY: 100_000}) as upstream,
        GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway,
    ):
        tokens = {name: add_user(database, name, budget=100) for name in ("ann", "bob")}

        def batch_of(user: str, journal: str) -> Any:
            client = MusicClient(tokens[user], base_url=gateway.url, v2_base_url=gateway.url,
                                 journal=Journal(tmp_path / journal), timeout=20)  # fmt: skip
            with client:
                return client.batch(rows_of(2), name="same name", concurrency=2, stall_timeout=60)

        anns = batch_of("ann", "ann.sqlite3").rows[0].ids
        assert [r.state for r in batch_of("bob", "bob.sqlite3").rows] == ["complete"] * 2
        ledger = open_ledger(database)
        with ledger._cursor() as cur:  # the bug: bob's row 2 now names ann's songs
            cur.run(
                "UPDATE batch_rows SET ids = ? WHERE row_index = 1 AND batch_id = "
                "(SELECT id FROM batches WHERE user_name = 'bob')",
                (json.dumps(anns),),
            )
        ledger.close()
        again = batch_of("bob", "bob elsewhere.sqlite3")
    assert [r.state for r in again.rows] == ["complete", "failed"], [(r.state, r.error) for r in again.rows]
    assert "could not be read here" in (again.rows[1].error or "") and again.rows[1].records == []
