"""Batches where money and time are at stake: prices that cannot switch the budget off, the budget measured
on the key, 429s with growing pauses that end, waits that wake on stop(), cancelled sends, refused names."""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any

import httpx
import pytest
from helpers import wait_until
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen import MusicClient
from ipymusicgen.batch import drivers as batch_engine
from ipymusicgen.batch import scheduler as batch_scheduler
from ipymusicgen.batch.drivers import BatchBudgetError, run_batch, run_batch_async
from ipymusicgen.client.retry import MAX_RETRY_AFTER, RATE_LIMIT_CAP, rate_limit_delay, retry_after
from ipymusicgen.models import costs
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore

GENERATE = "/v1/music/generate"
KEY = "paid-looking-key"


def rows(count: int, prefix: str = "lo-fi") -> list[dict[str, object]]:
    return [{"style": f"{prefix} {n}", "mv": "MFV2.0"} for n in range(count)]


@pytest.fixture
def store() -> BatchStore:
    return BatchStore(None)


# -- prices ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "inf", "abc", "1.5", "", "1e999"])
def test_a_price_that_would_switch_the_budget_off_is_refused_in_one_line(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(costs.ENV_COSTS, f"MFV3.0=3,MFV2.0={bad}")
    with pytest.raises(costs.CostTableError) as refused:
        costs.cost_table()
    message = str(refused.value)
    assert costs.ENV_COSTS in message and f"MFV2.0={bad}" in message and "\n" not in message
    monkeypatch.delenv(costs.ENV_COSTS)
    for value in (0, -1, math.nan, math.inf, 2.5, True):
        with pytest.raises(costs.CostTableError):
            costs.price(value, f"MFV2.0={value}")
    assert costs.cost_table()["MFV2.0"] == 2


def test_a_whole_positive_price_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(costs.ENV_COSTS, "MFV2.0=5, *=7")
    table = costs.cost_table()
    assert table["MFV2.0"] == 5 and table["*"] == 7


def test_the_credits_left_check_runs_whatever_the_estimate(client: MusicClient, sandbox: Sandbox, store) -> None:
    left = client.key_info().key_music_counts
    want = left // 2 + 1  # rows whose estimate (2 each) is more than the key has
    with pytest.raises(BatchBudgetError, match="left"):
        run_batch(client, rows(want), store=store)
    assert sandbox.request_counts().get(GENERATE, 0) == 0


@pytest.mark.slow
def test_the_budget_is_also_measured_on_the_key(client: MusicClient, sandbox: Sandbox, store, monkeypatch) -> None:
    """An estimate lower than the real price (MFV2.0 at 1, charged 2) cannot spend past the budget."""
    monkeypatch.setenv(costs.ENV_COSTS, "MFV2.0=1")
    before = sandbox.credits()
    batch = run_batch(client, rows(4), budget=4, concurrency=1, store=store, name="measured")
    spent = before - sandbox.credits()
    assert spent == 4  # two rows at 2 each: the measured 4 reaches the budget (the estimate alone sent all four)
    assert [r.state for r in batch.rows].count("skipped") == 2
    assert any("measured" in (r.error or "") for r in batch.rows)


# -- 429s and waits ---------------------------------------------------------------------------------------


def response(headers: dict[str, str]) -> httpx.Response:
    return httpx.Response(429, headers=headers, request=httpx.Request("POST", "http://127.0.0.1/"))


@pytest.mark.parametrize("header", ["1e9", "inf", "nan", "-5", "Infinity", "Wed, 21 Oct 2099 07:28:00 GMT", "soon"])
def test_any_retry_after_becomes_a_bounded_wait(header: str) -> None:
    asked = retry_after(response({"Retry-After": header}))
    assert asked is None or 0 <= asked <= MAX_RETRY_AFTER
    for streak in (1, 5, 50, 10**6):
        assert 0 < rate_limit_delay(streak, response({"Retry-After": header})) <= RATE_LIMIT_CAP


def test_retry_after_reads_ms_and_dates() -> None:
    assert retry_after(response({"retry-after-ms": "1500"})) == 1.5
    assert retry_after(response({"Retry-After": "3"})) == 3.0
    assert retry_after(response({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) is None  # in the past


def test_a_retry_after_of_zero_still_backs_off_exponentially() -> None:
    delays = [rate_limit_delay(streak, response({"Retry-After": "0"})) for streak in range(1, 8)]
    assert all(later > earlier * 1.4 for earlier, later in itertools.pairwise(delays))
    assert delays[0] >= 0.75


@pytest.mark.slow
def test_a_429_that_never_ends_ends_the_rows_unsent_and_a_rerun_sends_them(
    sandbox: Sandbox, client: MusicClient, store: BatchStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    def recorded(streak: int, source: Any = None) -> float:
        waits.append(rate_limit_delay(streak, source))
        return 0.01  # the real pause is recorded, not slept

    monkeypatch.setattr(batch_scheduler, "rate_limit_delay", recorded)
    sandbox.set_faults([{"kind": "rate_limit", "path": GENERATE, "rate": 1.0}])
    batch = run_batch(client, rows(3), name="storm", concurrency=3, store=store)
    assert [r.state for r in batch.rows] == ["failed"] * 3
    assert all(batch_engine.RATE_LIMITED in (r.error or "") for r in batch.rows)
    sent = sandbox.request_counts()[GENERATE]
    assert sent <= batch_engine.MAX_RATE_LIMITED + 2  # bounded: not a storm of creates
    assert all(later >= earlier * 0.7 for earlier, later in itertools.pairwise(waits))
    assert waits[-1] > waits[0] * 4  # the pauses grew though the header said 1
    sandbox.set_faults([])
    again = run_batch(client, rows(3), name="storm", concurrency=3, store=store)
    assert [r.state for r in again.rows] == ["complete"] * 3


def test_stop_wakes_a_batch_resting_on_a_long_rate_limit(
    sandbox: Sandbox, client: MusicClient, store: BatchStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_scheduler, "rate_limit_delay", lambda streak, source=None: 3600.0)
    sandbox.set_faults([{"kind": "rate_limit", "path": GENERATE, "rate": 1.0}])
    batch = run_batch(client, rows(2), name="asleep", concurrency=1, store=store, wait=False)
    wait_until(lambda: sandbox.request_counts().get(GENERATE, 0) >= 1, "the first create answered 429")
    batch.stop()
    batch.wait(timeout=30)  # an hour's pause, ended by stop()
    assert {r.state for r in batch.rows} == {"skipped"}


def test_stop_wakes_an_async_batch_too(sandbox: Sandbox, store: BatchStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_scheduler, "rate_limit_delay", lambda streak, source=None: 3600.0)
    sandbox.set_faults([{"kind": "rate_limit", "path": GENERATE, "rate": 1.0}])

    async def run() -> Any:
        async with sandbox.async_client() as client:
            batch = await run_batch_async(client, rows(2), name="asleep-async", concurrency=1, store=store, wait=False)
            while sandbox.request_counts().get(GENERATE, 0) < 1:
                await asyncio.sleep(0.02)
            batch.stop()
            await asyncio.wait_for(asyncio.shield(batch._task), 30)
            return batch

    batch = asyncio.run(run())
    assert {r.state for r in batch.rows} == {"skipped"}


# -- cancelled sends, refused names -----------------------------------------------------------------------


@pytest.mark.slow
def test_an_async_batch_cancelled_mid_create_leaves_its_rows_unknown_not_claimed(
    sandbox: Sandbox, store: BatchStore
) -> None:
    sandbox.set_faults([{"kind": "slow", "path": GENERATE, "seconds": 5, "count": 1}])

    async def cancel_mid_create() -> None:
        async with sandbox.async_client() as client:
            batch = await run_batch_async(client, rows(1), name="cancelled", store=store, wait=False)
            while sandbox.request_counts().get(GENERATE, 0) < 1:
                await asyncio.sleep(0.02)
            batch._task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await batch._task
            assert batch.rows[0].state == "unknown" and "cancelled" in (batch.rows[0].error or "")

    asyncio.run(cancel_mid_create())
    assert store.rows("cancelled")[0].state == "unknown"
    sandbox.set_faults([])

    async def rerun() -> list[str]:
        async with sandbox.async_client() as client:
            plain = await run_batch_async(client, rows(1), name="cancelled", store=store)
            again = await run_batch_async(client, rows(1), name="cancelled", store=store, retry_unknown=True)
            return [plain.rows[0].state, again.rows[0].state, plain.rows[0].error or ""]

    plain, again, why = asyncio.run(rerun())
    assert plain == "unknown" and "another run" not in why  # the usual rule, not a claim held forever
    assert again == "complete"


def test_a_batch_refused_before_sending_leaves_no_claim_on_its_name(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    with pytest.raises(BatchBudgetError):
        run_batch(client, rows(3), name="album", budget=1, store=store)
    corrected = run_batch(client, rows(1, "jazz"), name="album", budget=10, store=store)
    assert [r.state for r in corrected.rows] == ["complete"]
    assert sandbox.request_counts()[GENERATE] == 1


def test_a_name_that_sent_something_still_refuses_changed_rows(client: MusicClient, store: BatchStore) -> None:
    run_batch(client, rows(1), name="kept", store=store)
    with pytest.raises(batch_engine.BatchError, match="not the request first recorded"):
        run_batch(client, rows(1, "other"), name="kept", store=store)


def test_a_hostile_429_with_retry_after_zero_is_not_a_storm(monkeypatch: pytest.MonkeyPatch, store) -> None:
    """A service that answers every create 429 with Retry-After: 0: the creates stay few and the batch ends."""
    waits: list[float] = []

    def recorded(streak: int, source: Any = None) -> float:
        waits.append(rate_limit_delay(streak, source))
        return 0.0

    monkeypatch.setattr(batch_scheduler, "rate_limit_delay", recorded)

    def handler(request: RawRequest, sock: Any) -> None:
        if request.path == "/v1/get_api_key_info":
            respond(sock, 200, {"code": 200, "data": {"key_music_counts": 100, "key_status": 1}})
        else:
            respond(sock, 429, {"code": 429, "msg": "slow down"}, headers={"Retry-After": "0"})

    server = HostileServer(handler)
    try:
        with MusicClient(KEY, base_url=server.url, v2_base_url=server.url, journal=False, archive=False) as c:
            batch = run_batch(c, rows(3), name="zero", store=store)
    finally:
        server.stop.set()
    creates = [r for r in server.requests if r.path == GENERATE]
    assert len(creates) <= batch_engine.MAX_RATE_LIMITED + 2
    assert all(batch_engine.RATE_LIMITED in (r.error or "") for r in batch.rows)
    assert waits[0] >= 0.75 and waits[-1] > 30  # growing pauses, whatever the header said


# -- a typo in the price table ----------------------------------------------------------------------------


def test_a_typo_in_the_price_table_is_one_line_from_the_batch_magic(
    sandbox_shell: Any, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError

    monkeypatch.setenv(costs.ENV_COSTS, "MFV2.0=two")
    with pytest.raises(UsageError) as refused:
        sandbox_shell.run_cell_magic("musicgen_batch", "--name typo --no-watch", "--style lo-fi rain\n")
    message = str(refused.value)
    assert costs.ENV_COSTS in message and "MFV2.0=two" in message and "\n" not in message
    assert sandbox.request_counts().get(GENERATE, 0) == 0


@pytest.mark.slow
def test_the_studio_opens_with_a_typo_in_the_price_table_and_still_asks_first(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.widgets.studio import Studio

    monkeypatch.setenv(costs.ENV_COSTS, "MFV2.0=-1")
    paid = Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={KEY: 40})
    with paid, paid.client(max_retries=0) as client:
        studio = Studio(client)
        try:
            assert studio.needs_confirm
            words = studio.song.cost_words()
            assert words.startswith("cost unknown") and costs.ENV_COSTS in words
            studio.song.set_values(action="auto", style="lo-fi")
            studio.song.submit(confirmed=False)
            assert paid.request_counts().get(GENERATE, 0) == 0  # asked first, nothing sent
        finally:
            studio.close()
