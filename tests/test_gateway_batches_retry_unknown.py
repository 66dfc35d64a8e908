"""`retry_unknown=True` on a batch handed to a team gateway (issue 39). The gateway owns the rows, so the notebook's
option had no effect there: a row whose create may have been charged stayed unknown however the user asked. Now the
gateway resends, once per ask, the rows of that user's batch it holds unknown at the attempt the notebook read; a
repeat of the same submission, another user naming the rows, or a malformed ask sends nothing. Through real parts:
the uvicorn sandbox as the upstream, a gateway served by uvicorn, the journal's file, SQLite and a real PostgreSQL
ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_batch_world import BATCHES, GENERATE, fast_gateway, rows_of, through, upstream_sandbox
from gateway_helpers import GatewayThread, add_user, paid_counts
from helpers import wait_until
from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.ledger_engines import open_ledger

pytestmark = pytest.mark.slow  # a gateway, its worker and songs in real time


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with upstream_sandbox() as server:
        yield server


@pytest.fixture
def gateway(
    database: str, upstream: Sandbox, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GatewayThread]:
    with fast_gateway(database, upstream, monkeypatch) as running:
        yield running


def status(gateway: GatewayThread, token: str, name: str) -> dict[str, Any]:
    answer = httpx.get(gateway.url + BATCHES, params={"name": name}, headers={"x-api-key": token}, timeout=20)
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def creates(upstream: Sandbox) -> int:
    return paid_counts(upstream).get(GENERATE, 0)


def one_unknown(gateway: GatewayThread, upstream: Sandbox, token: str, journal: Path, name: str) -> None:
    """A batch of four whose row 3's create is charged upstream and answered with a 500: unknown at the gateway
    (its first two rows run first; the same batch grown to four then sends row 3 first)."""
    with through(gateway, token, journal) as client:
        client.batch(rows_of(2, name), name=name, concurrency=1, stall_timeout=60)
    upstream.set_faults(f"server_error:count=1:path={GENERATE}:after=true")
    try:
        with through(gateway, token, journal) as client:
            batch = client.batch(rows_of(4, name), name=name, concurrency=1, stall_timeout=60)
    finally:
        upstream.set_faults("")
    assert [r.state for r in batch.rows] == ["complete", "complete", "unknown", "complete"], batch.progress_line()


def test_retry_unknown_resends_the_gateways_unknown_row_once_and_a_rerun_sends_nothing_more(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    """Before: the rerun with retry_unknown=True left row 3 unknown and sent nothing (4 creates for 4 rows)."""
    token = add_user(database, "uma", budget=100)
    journal = tmp_path / "uma.sqlite3"
    one_unknown(gateway, upstream, token, journal, "doubtful")
    assert creates(upstream) == 4
    with through(gateway, token, journal) as client:
        plain = client.batch(rows_of(4, "doubtful"), name="doubtful", concurrency=2, stall_timeout=60)
        assert plain.rows[2].state == "unknown" and creates(upstream) == 4, "without the ask, never sent again"
        again = client.batch(rows_of(4, "doubtful"), name="doubtful", concurrency=2, retry_unknown=True)
        assert [r.state for r in again.rows] == ["complete"] * 4, again.progress_line()
        assert creates(upstream) == 5, "row 3 resent once, the others not at all"
        assert len(again.rows[2].ids) == 2 and again.rows[2].records, "its songs polled here"
        twice = client.batch(rows_of(4, "doubtful"), name="doubtful", concurrency=2, retry_unknown=True)
        assert [r.state for r in twice.rows] == ["complete"] * 4 and twice.rows[2].ids == again.rows[2].ids
    assert creates(upstream) == 5, "a rerun with the same ask finds nothing unknown: nothing more sent"
    rows = status(gateway, token, "doubtful")["rows"]
    assert [(r["state"], r["attempt"]) for r in rows] == [("complete", 0)] * 2 + [("complete", 1), ("complete", 0)]
    calls = sorted(c["state"] for c in open_ledger(database).calls())
    assert calls.count("done") == 4 and len(calls) == 5, "the first attempt's call stays in doubt (reconcile's)"


def test_a_repeated_or_foreign_ask_sends_nothing_more(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    """The ask names a row with the attempt the notebook read: the same submission sent again (a client's retry
    after a lost answer), even once the resend itself ended unknown, finds the attempt moved on; another user naming
    the same batch name and row reaches only their own batch; a malformed ask is refused whole in one line."""
    vic, wyn = add_user(database, "vic", budget=100), add_user(database, "wyn", budget=100)
    one_unknown(gateway, upstream, vic, tmp_path / "vic.sqlite3", "replayed")
    body = {
        "name": "replayed",
        "rows": [{"v2": False, "body": r} for r in rows_of(4, "replayed")],
        "concurrency": 1,
        "stall_timeout": 60,
        "retry_unknown": [{"index": 2, "attempt": 0}],
    }
    foreign = httpx.post(gateway.url + BATCHES, json=body, headers={"x-api-key": wyn}, timeout=20)
    assert foreign.status_code == 200, foreign.text  # wyn's own new batch of that name: four rows to send
    wait_until(lambda: creates(upstream) == 8, "wyn's own four rows sent")
    assert status(gateway, vic, "replayed")["rows"][2]["state"] == "unknown", "vic's row untouched by wyn's ask"
    upstream.set_faults(f"server_error:count=1:path={GENERATE}:after=true")  # the resend is in doubt again
    try:
        first = httpx.post(gateway.url + BATCHES, json=body, headers={"x-api-key": vic}, timeout=20)
        assert first.status_code == 200, first.text
        wait_until(lambda: status(gateway, vic, "replayed")["rows"][2]["state"] == "unknown", "the resend in doubt")
    finally:
        upstream.set_faults("")
    assert creates(upstream) == 9 and status(gateway, vic, "replayed")["rows"][2]["attempt"] == 1
    repeat = httpx.post(gateway.url + BATCHES, json=body, headers={"x-api-key": vic}, timeout=20)
    assert repeat.status_code == 200 and repeat.json()["data"]["rows"][2]["state"] == "unknown"
    for hostile in ([{"index": 2}], [{"index": -1, "attempt": 0}], {"2": 0}, [{"index": 2, "attempt": True}], "all"):
        refused = httpx.post(
            gateway.url + BATCHES, json={**body, "retry_unknown": hostile}, headers={"x-api-key": vic}, timeout=20
        )
        assert refused.status_code == 422 and "retry_unknown" in refused.json()["message"], refused.text
        assert "\n" not in refused.json()["message"]
    assert creates(upstream) == 9, "the repeat and the refused asks sent nothing"
    assert [r["state"] for r in status(gateway, vic, "replayed")["rows"]] == ["complete"] * 2 + ["unknown", "complete"]


def test_the_ask_counts_against_the_users_budget_before_anything_is_sent(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    """Resending a row reserves its price again (its first create may have been charged): a user with too little
    left is told so, and nothing is sent."""
    token = add_user(database, "xan", budget=8)  # four 2-credit rows; the doubt holds its 2 credits
    journal = tmp_path / "xan.sqlite3"
    one_unknown(gateway, upstream, token, journal, "tight")
    from ipymusicgen.batch.rows import BatchBudgetError

    with through(gateway, token, journal) as client, pytest.raises(BatchBudgetError, match="nothing was sent"):
        client.batch(rows_of(4, "tight"), name="tight", concurrency=1, retry_unknown=True)
    assert creates(upstream) == 4
    assert status(gateway, token, "tight")["rows"][2] == {**status(gateway, token, "tight")["rows"][2], "attempt": 0}


def test_an_async_client_asks_the_same_and_a_fresh_journal_finds_the_gateways_unknown_row(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    """`AsyncMusicClient.batch(..., retry_unknown=True)` from another notebook (a journal that never saw the batch):
    the gateway's unknown row is resent once, the rows it made are not."""
    import asyncio

    from ipymusicgen.client.faces import AsyncMusicClient

    token = add_user(database, "yul", budget=100)
    one_unknown(gateway, upstream, token, tmp_path / "first.sqlite3", "async ask")

    async def run() -> list[str]:
        journal = Journal(tmp_path / "second.sqlite3")
        async with AsyncMusicClient(token, base_url=gateway.url, v2_base_url=gateway.url, journal=journal) as client:
            batch = await client.batch(rows_of(4, "async ask"), name="async ask", retry_unknown=True, wait=False)
            await batch
            return [r.state for r in batch.rows]

    assert asyncio.run(run()) == ["complete"] * 4
    assert creates(upstream) == 5
