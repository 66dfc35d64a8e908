"""Batches against the sandbox over real sockets: validation, budget, concurrency, 429s, doubt, stalls, reruns."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from helpers import ManualClock, advance_until_done, wait_until

from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import Batch, BatchBudgetError, BatchError, BatchFailedError, run_batch, run_batch_async
from ipymusicgen.models import costs
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.widgets.batch import BatchView

GENERATE = "/v1/music/generate"
SUBMIT = "/v2/submit"
TASKS = "/v1/music/tasks"


def rows(count: int, prefix: str = "lo-fi") -> list[dict[str, object]]:
    return [{"style": f"{prefix} {n}", "mv": "MFV2.0"} for n in range(count)]


def creates(sandbox: Sandbox) -> int:
    counts = sandbox.request_counts()
    return counts.get(GENERATE, 0) + counts.get(SUBMIT, 0)


@pytest.fixture
def store() -> BatchStore:
    """A private store per test, so batch names never meet across tests."""
    return BatchStore(None)


@pytest.fixture
def running_limit(sandbox: Sandbox) -> Iterator[list[int]]:
    """Raise the sandbox's running limit and record, server-side, how many calls run at each new create."""
    state = sandbox.state
    seen: list[int] = []
    original_limit, original = state.max_running, state.running_calls

    def counting(owner: str) -> tuple[int, float]:
        calls, soonest = original(owner)
        seen.append(calls + 1)  # this create, if let through, makes one more
        return calls, soonest

    state.running_calls = counting  # type: ignore[method-assign]
    state.max_running = 1000
    yield seen
    state.running_calls = original  # type: ignore[method-assign]
    state.max_running = original_limit


def test_a_bad_row_refuses_the_whole_batch_before_anything_is_sent(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    requests = [*rows(3), {"style": "x", "instrumental": 7}, {"action": "concat"}, *rows(2, "jazz")]
    with pytest.raises(BatchError) as info:
        run_batch(client, requests, store=store)
    message = str(info.value)
    # rows are counted from 1, as the batch view numbers them
    assert "row 4: instrumental" in message and "row 5: continue_song_id" in message and "nothing was sent" in message
    assert "row 1:" not in message
    assert sandbox.request_counts() == {}  # not even key info


def test_budget_and_counts_left_are_checked_before_any_paid_call(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    with pytest.raises(BatchBudgetError) as info:
        run_batch(client, rows(6), budget=11, store=store)  # 6 x 2 = 12 > 11
    assert info.value.estimate == 12 and info.value.budget == 11
    assert "12" in str(info.value) and "11" in str(info.value)
    assert sandbox.state.charge(sandbox.api_key, sandbox.credits() - 5)  # leave 5 credits on the key
    with pytest.raises(BatchBudgetError, match="has 5 left") as info:
        run_batch(client, rows(3), store=store)
    assert info.value.counts_left == 5 and info.value.estimate == 6
    assert creates(sandbox) == 0 and sandbox.credits() == 5


def test_unknown_models_are_estimated_at_the_dearest_price() -> None:
    assert costs.estimate_credits({"style": "x"}) == costs.cost_table()["*"] >= 3
    assert costs.estimate_credits({"style": "x", "mv": "MFV1.0"}) == 2
    assert costs.estimate_credits({"v2": True, "model_version": "v4.5-plus", "prompt": "p", "is_auto": 1}) == 3


@pytest.mark.slow
def test_concurrency_is_never_exceeded_server_side(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, running_limit: list[int], store: BatchStore
) -> None:
    batch = run_batch(client, rows(7), concurrency=3, wait=False, store=store)
    wait_until(lambda: batch.counts()["submitted"] == 3, "three rows in flight")
    polls = sandbox.request_counts().get(TASKS, 0)
    wait_until(lambda: sandbox.request_counts().get(TASKS, 0) >= polls + 3, "a few more polling rounds")
    assert creates(sandbox) == 3  # songs still running (frozen clock): no fourth create
    advance_until_done(batch, clock, sandbox)
    batch.wait()
    assert batch.counts()["complete"] == 7 and creates(sandbox) == 7
    assert max(running_limit) == 3 and len(running_limit) == 7
    assert len(set(batch.ids)) == 14 and all(len(r.records) == 2 for r in batch.rows)


@pytest.mark.slow
def test_a_429_storm_backs_off_and_sends_each_row_once(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    sandbox.state.max_running = 2  # the service's per-key limit, lower than the batch's concurrency
    before = sandbox.credits()
    try:
        batch = run_batch(client, rows(6), concurrency=5, store=store)
    finally:
        sandbox.state.max_running = 5
    assert batch.counts()["complete"] == 6
    assert sandbox.request_counts()[GENERATE] > 6  # some creates were answered 429...
    assert before - sandbox.credits() == 12  # ...and only the 6 accepted ones were charged, once each
    assert len(set(batch.ids)) == 12
    assert batch.real_cost_per_call == 2


@pytest.mark.slow
def test_a_create_in_doubt_is_unknown_and_never_resent(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    sandbox.set_faults([{"kind": "drop", "path": GENERATE, "after": True, "count": 1}])
    batch = run_batch(client, rows(3), concurrency=1, name="doubt", store=store)
    assert [r.state for r in batch.rows] == ["unknown", "complete", "complete"]
    assert "NOT resent" in (batch.rows[0].error or "")
    assert creates(sandbox) == 3
    with pytest.raises(BatchFailedError, match="row 1 unknown"):
        batch.raise_for_failures()
    again = run_batch(client, rows(3), concurrency=1, name="doubt", store=store)
    assert [r.state for r in again.rows] == ["unknown", "complete", "complete"] and creates(sandbox) == 3
    forced = run_batch(client, rows(3), concurrency=1, name="doubt", store=store, retry_unknown=True)
    assert [r.state for r in forced.rows] == ["complete"] * 3 and creates(sandbox) == 4


@pytest.mark.slow
def test_one_failing_row_does_not_fail_the_others(client: MusicClient, sandbox: Sandbox, store: BatchStore) -> None:
    foreign = {"action": "upload", "audio_url": "https://example.com/song.mp3"}  # the sandbox fails its songs
    batch = run_batch(client, [*rows(2), foreign, *rows(1, "jazz")], concurrency=2, store=store)
    assert [r.state for r in batch.rows] == ["complete", "complete", "failed", "complete"]
    assert batch.failed == [batch.rows[2]] and "never fetches" in (batch.rows[2].error or "")
    assert len(batch.records) == 8
    with pytest.raises(BatchFailedError, match="row 3 failed"):
        batch.raise_for_failures()


@pytest.mark.slow
def test_no_credits_mid_batch_fails_that_row_skips_the_rest_and_a_rerun_sends_only_those(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    def drain(batch: Batch) -> None:  # the key is spent elsewhere once the first row is in
        if batch.rows[0].state == "submitted" and sandbox.credits():
            sandbox.state.charge(sandbox.api_key, sandbox.credits())

    batch = run_batch(client, rows(4), concurrency=1, store=store, name="broke", on_update=drain)
    assert [r.state for r in batch.rows] == ["complete", "failed", "skipped", "skipped"]
    assert "credits" in (batch.rows[1].error or "").lower() and creates(sandbox) == 2
    sandbox.state.account(sandbox.api_key).music_counts = 100  # topped up
    again = run_batch(client, rows(4), concurrency=2, store=store, name="broke")
    assert [r.state for r in again.rows] == ["complete"] * 4 and creates(sandbox) == 5  # 3 more, row 0 not again


def test_a_stall_fails_a_row_but_slow_progress_does_not(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore
) -> None:
    engine_clock = ManualClock(1.0)
    batch = run_batch(client, rows(1), stall_timeout=10, wait=False, store=store, clock=engine_clock)
    row = batch.rows[0]

    def polled_after(step: float) -> None:
        before = sandbox.request_counts().get(TASKS, 0)
        engine_clock.advance(step)
        wait_until(lambda: sandbox.request_counts().get(TASKS, 0) >= before + 2, "two polling rounds")

    wait_until(lambda: row.state == "submitted" and len(row.records) == 2, "the row submitted and seen")
    polled_after(6)
    clock.stages(1)  # the songs move to preview: progress
    wait_until(lambda: all(r.state.value == "preview" for r in row.records), "preview")
    polled_after(6)  # 12 s since the create, 6 since the last change: not a stall
    clock.stages(1)
    batch.wait()
    assert row.state == "complete"

    stalled = run_batch(client, rows(1, "stuck"), stall_timeout=10, wait=False, store=store, clock=engine_clock)
    # seen once before the clock moves: a first sight of its songs after the advance would count as a change
    wait_until(lambda: stalled.rows[0].state == "submitted" and len(stalled.rows[0].records) == 2, "the row seen")
    engine_clock.advance(11)  # and the songs do not move: a stall
    stalled.wait(timeout=20)
    assert stalled.rows[0].state == "failed" and "no song changed state for 10 s" in (stalled.rows[0].error or "")
    assert stalled.rows[0].stalled and not row.stalled  # a field, recorded in the store, never read from the error
    assert store.rows(stalled.name)[0].stalled
    again = run_batch(client, rows(1, "stuck"), stall_timeout=10, wait=False, store=store, clock=engine_clock)
    wait_until(lambda: again.rows[0].state == "submitted", "the stalled row followed again, not resent")
    clock.stages(2)
    again.wait(timeout=20)
    assert again.rows[0].state == "complete" and creates(sandbox) == 2


def test_a_failed_row_whose_error_reads_like_a_stall_is_not_followed_again(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore
) -> None:
    """Only a row the engine found stalled is followed again on a re-run; a service's reason that happens to start
    "timed out" is an ordinary failure (its songs are only read once, for `.records`)."""
    first = run_batch(client, rows(1, "done"), store=store, name="told", wait=False)
    wait_until(lambda: first.rows[0].state == "submitted", "the row sent")
    first.stop()
    ids = first.rows[0].ids
    clock.stages(2)
    first.wait(timeout=20)
    store.set_state("told", 0, "failed", ids=ids, error="timed out: the service gave up on it")
    again = run_batch(client, rows(1, "done"), store=store, name="told")
    assert again.rows[0].state == "failed" and not again.rows[0].stalled and creates(sandbox) == 1


def test_stop_starts_no_more_rows_and_follows_the_sent_ones(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore
) -> None:
    view = BatchView()
    batch = run_batch(client, rows(5), concurrency=2, wait=False, store=store, on_update=view.update)
    wait_until(lambda: batch.counts()["submitted"] == 2, "two rows in flight")
    assert view.data["can_stop"]
    view._on_msg(view, {"kind": "stop"}, [])  # the Stop button's intent
    assert batch.stop_requested and not view.data["can_stop"]
    advance_until_done(batch, clock, sandbox)
    assert [r.state for r in batch.rows] == ["complete"] * 2 + ["skipped"] * 3 and creates(sandbox) == 2
    assert "stopped" in (batch.rows[4].error or "")


@pytest.mark.slow
def test_rerun_with_the_same_name_sends_nothing_again_and_a_changed_row_is_refused(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    first = run_batch(client, rows(3), name="album", store=store)
    assert first.counts()["complete"] == 3 and creates(sandbox) == 3
    again = run_batch(client, [*rows(3), {"style": "bonus"}], name="album", store=store)
    assert again.counts()["complete"] == 4 and creates(sandbox) == 4  # only the new row
    assert len(again.records) == 8 and {r.id for r in again.records} == set(again.ids)  # earlier rows read back
    with pytest.raises(BatchError, match="Row 2 of batch 'album' is not the request first recorded"):
        run_batch(client, [rows(3)[0], {"style": "changed"}], name="album", store=store)
    same = run_batch(client, rows(3), store=store)  # no name: derived from the requests
    assert creates(sandbox) == 7
    run_batch(client, rows(3), store=store)
    assert creates(sandbox) == 7 and same.name.startswith("batch-")


def test_a_budget_equal_to_the_estimate_runs_and_the_dataframe_rows_keep_their_gaps(
    client: MusicClient, sandbox: Sandbox, store: BatchStore
) -> None:
    frame = pd.DataFrame(
        [
            {"style": "ambient", "mv": "MFV2.0", "instrumental": 1, "title": None},
            {"style": "sea shanty", "mv": "MFV3.0", "instrumental": None, "title": "Waves", "action": "custom"},
        ]
    )
    batch = run_batch(client, frame, budget=5, store=store)
    assert batch.estimate == 5 and batch.counts()["complete"] == 2
    assert batch.rows[0].request.instrumental == 1 and batch.rows[1].request.title == "Waves"
    assert batch.counts_before is not None and batch.counts_after == batch.counts_before - 5
    table = batch.to_pandas()
    assert list(table["state"]) == ["complete", "complete"]
    assert "2/2 done" in repr(batch) and "ipymusicgen-batch" in batch._repr_html_()


def test_html_repr_escapes_server_and_user_text(client: MusicClient, store: BatchStore) -> None:
    batch = run_batch(client, [{"style": "<img src=x onerror=alert(1)>"}], store=store)
    html = batch._repr_html_()
    assert "<img" not in html and "&lt;img" in html


@pytest.mark.slow
def test_async_client_runs_the_same_batch(sandbox: Sandbox, store: BatchStore) -> None:
    async def scenario() -> Batch:
        async with sandbox.async_client() as client:
            later = await run_batch_async(client, rows(4), concurrency=2, wait=False, store=store)
            return await later

    batch = asyncio.run(scenario())
    assert batch.counts()["complete"] == 4 and creates(sandbox) == 4


def test_running_the_same_batch_twice_at_once_in_one_kernel_sends_each_row_once(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, running_limit: list[int], store: BatchStore
) -> None:
    first = run_batch(client, rows(5), name="twice", concurrency=2, wait=False, store=store)
    wait_until(lambda: first.counts()["submitted"] == 2, "two rows in flight")
    second = run_batch(client, rows(5), name="twice", concurrency=2, wait=False, store=store)
    advance_until_done([first, second], clock, sandbox)
    first.wait()
    second.wait()
    assert creates(sandbox) == 5  # the two runs shared the rows: none sent twice
    finished = [a if a.state == "complete" else b for a, b in zip(first.rows, second.rows, strict=True)]
    assert all(r.state == "complete" for r in finished)


@pytest.mark.slow
def test_a_locked_journal_refuses_the_batch_before_anything_is_sent(
    client: MusicClient, sandbox: Sandbox, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite3"
    store = BatchStore(path)
    store._db.execute("PRAGMA busy_timeout=100")  # the default waits 10 s for the other program
    locker = sqlite3.connect(path, timeout=0.1)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(BatchError, match=r"cannot be recorded.*locked.*nothing was sent"):
            run_batch(client, rows(2), store=store)
    finally:
        locker.rollback()
        locker.close()
    assert sandbox.request_counts() == {}
    with pytest.raises(BatchError, match="concurrency must be from 1 to 1000"):
        run_batch(client, rows(2), concurrency=0, store=store)
    assert run_batch(client, rows(2), store=store).counts()["complete"] == 2  # unlocked: it runs


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["server_error", "malformed", "slow"])
def test_every_doubtful_create_answer_leaves_its_row_unknown(kind: str, sandbox: Sandbox, store: BatchStore) -> None:
    fault: dict[str, object] = {"kind": kind, "path": GENERATE, "count": 1}
    if kind == "slow":
        fault.update(seconds=5, after=True)  # the work is done and charged; the answer comes after the timeout
    sandbox.set_faults([fault])
    with sandbox.client(max_retries=2, timeout=1) as client:
        batch = run_batch(client, rows(2), concurrency=1, name=f"doubt-{kind}", store=store)
        assert [r.state for r in batch.rows] == ["unknown", "complete"]
        again = run_batch(client, rows(2), concurrency=1, name=f"doubt-{kind}", store=store)
    assert [r.state for r in again.rows] == ["unknown", "complete"] and creates(sandbox) == 2


@pytest.mark.slow
def test_async_batch_rides_out_429s_too(sandbox: Sandbox, store: BatchStore) -> None:
    sandbox.state.max_running = 1

    async def scenario() -> Batch:
        async with sandbox.async_client() as client:
            return await run_batch_async(client, rows(3), concurrency=3, store=store)

    batch = asyncio.run(scenario())
    assert batch.counts()["complete"] == 3
    assert sandbox.request_counts()[GENERATE] > 3 and creates(sandbox) > 3  # 429s answered...
    assert len(set(batch.ids)) == 6 and len(sandbox.state.tasks_of(sandbox.api_key)) == 6  # ...none made twice


@pytest.mark.slow
@pytest.mark.parametrize(("status", "doubtful"), [(598, True), (507, True), (530, True), (500, True), (501, False)])
def test_a_batch_row_is_in_doubt_exactly_when_the_client_journals_it_unknown(status: int, doubtful: bool) -> None:
    """One rule for both: any 5xx but 501/505 may have been carried out (a proxy's 598 after forwarding)."""
    from ipymusicgen.client.responses import create_may_have_landed, is_doubtful
    from ipymusicgen.errors import InternalServerError

    error = InternalServerError(f"HTTP {status}", response=None, body=None, status_code=status)
    assert create_may_have_landed(error) is doubtful is is_doubtful(status)


FOREIGN = {"action": "upload", "audio_url": "https://example.com/a.mp3"}
"""A row whose songs the sandbox fails (it fetches no audio from elsewhere)."""


def test_a_finished_batch_with_failures_says_so_and_retries_only_the_failed_rows(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore
) -> None:
    view = BatchView()
    batch = run_batch(client, [*rows(2), FOREIGN], name="mixed", wait=False, store=store, on_update=view.update)
    advance_until_done(batch, clock, sandbox)
    view.update(batch)
    assert [r.state for r in batch.rows] == ["complete", "complete", "failed"]
    data = view.data
    assert [r["index"] for r in data["rows"]] == [1, 2, 3]  # numbered as people count
    assert data["finished"] == "Finished: 1 of 3 rows failed." and data["can_retry"]
    sent = creates(sandbox)
    view._on_msg(view, {"kind": "retry_failed"}, [])  # the button's intent: free sandbox, sent at once
    retry = view.batch
    assert retry is not batch and retry.name == "mixed-retry-1"
    assert [r.request.action for r in retry.rows] == ["upload"]  # only the failed row, nothing else
    advance_until_done(retry, clock, sandbox)
    assert creates(sandbox) == sent + 1


def test_retry_of_a_paid_batch_asks_first_and_a_clean_batch_offers_none(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = run_batch(client, rows(1), wait=False, store=store)
    advance_until_done(clean, clock, sandbox)
    quiet = BatchView(clean)
    assert quiet.data["finished"] == "Finished: every row done." and not quiet.data["can_retry"]
    assert quiet.retry_failed() is None
    failing = run_batch(client, [FOREIGN], wait=False, store=store)
    advance_until_done(failing, clock, sandbox)
    view = BatchView(failing)
    monkeypatch.setattr(type(client.settings), "needs_confirm", lambda self, _key: True)  # as with a real key
    sent = creates(sandbox)
    view._on_msg(view, {"kind": "retry_failed"}, [])
    assert creates(sandbox) == sent and view.batch is failing  # the first press only asks
    assert "Retry 1 failed row(s)? About" in view.data["note"] and "(estimate)" in view.data["note"]
    view._on_msg(view, {"kind": "retry_failed"}, [])  # the second sends
    assert view.batch is not failing and view.batch.name.endswith("-retry-1")
    advance_until_done(view.batch, clock, sandbox)
    assert creates(sandbox) == sent + 1


def test_the_progress_line_says_measured_and_estimated_credits_apart(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore
) -> None:
    batch = run_batch(client, rows(2), wait=False, store=store)
    line = batch.progress_line()
    assert "(estimate)" in line and "spent (measured)" not in line  # running: only the estimate exists
    assert f"{batch.counts_before} left before this run (measured)" in line
    advance_until_done(batch, clock, sandbox)
    done = batch.progress_line()
    spent = batch.counts_before - batch.counts_after
    assert f"{spent} credits spent (measured)" in done and f"{batch.counts_after} left (measured)" in done
    assert "~" not in done  # never an estimate added to a measure


def test_cards_of_a_followed_batch_follow_its_table_order(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, store: BatchStore
) -> None:
    from ipymusicgen.widgets.watcher import TaskWatcher

    watcher = TaskWatcher(client=client, autostart=False)
    try:
        batch = run_batch(client, rows(4), concurrency=4, wait=False, store=store)
        advance_until_done(batch, clock, sandbox)
        watcher.show(list(reversed(batch.records)))  # records arrive in any order...
        watcher.follow(batch)
        row_of = {task_id: row.index for row in batch.rows for task_id in row.ids}
        shown = [sorted({row_of[task_id] for task_id in group}) for group in watcher._page_groups()]
        assert shown == [[0], [1], [2], [3]]  # ...cards read as the table: row 1 first
    finally:
        watcher.close()
