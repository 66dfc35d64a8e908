"""Failures with a way forward: a failed call offers Retry (its request sent again, as it was), a real key asks
first, and "hide failed" leaves failed calls off the pages while the header still counts them.

The real watcher model against the real sandbox, its clock frozen and moved by hand; what the browser would
receive is read from the watcher's own snapshot (what a view gets when it says hello).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ManualClock, advance_until_done

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.errors import MusicGenError
from ipymusicgen.models.schema import build_generate_request
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets import TaskWatcher

GENERATE = "/v1/music/generate"
PAID_KEY = "failed-calls-real-key"


@pytest.fixture
def made() -> Iterator[list[TaskWatcher]]:
    watchers: list[TaskWatcher] = []
    yield watchers
    for watcher in watchers:
        watcher.close()


def failed_call(client: MusicClient, sandbox: Sandbox, clock: ManualClock, made: list[TaskWatcher]) -> TaskWatcher:
    """A watcher over one call whose two songs failed, given the request that made them."""
    sandbox.set_faults([{"kind": "task_fail", "path": GENERATE, "count": 1, "fail_reason": "the muse was out"}])
    request = build_generate_request({"action": "auto", "style": "sea shanty"})
    watcher = TaskWatcher(client.generate(request).ids, client=client, autostart=False, request=request)
    made.append(watcher)
    clock.stages(2)
    watcher.poll_once()
    assert watcher.done and watcher.header()["failed"] == 2
    return watcher


def send(watcher: TaskWatcher, **content: Any) -> None:
    """An intent as the browser sends it."""
    watcher._handle_custom_msg(content, [])


def test_a_failed_call_offers_retry_which_sends_the_same_request_again(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, made: list[TaskWatcher]
) -> None:
    watcher = failed_call(client, sandbox, clock, made)
    first, second = watcher.ids
    cards = watcher.snapshot()["groups"][0]
    assert all(card["retryable"] and card["state"] == "failed" for card in cards)
    assert watcher.header()["failed_calls"] == 1
    send(watcher, kind="retry", id=second)
    assert sandbox.request_counts()[GENERATE] == 2 and len(watcher.ids) == 4
    old = {card["id"]: card for card in watcher.snapshot()["groups"][1]}
    assert old[first]["retried"] and not old[first]["retryable"]  # retried once: no second Retry on it
    assert "Sent again: 2 new song(s)" in watcher.card(second).note
    send(watcher, kind="retry", id=first)  # a second press on the retried call (no Retry shown) sends nothing
    assert sandbox.request_counts()[GENERATE] == 2 and "nothing was done" in watcher.card(first).note
    with pytest.raises(MusicGenError, match="retried already"):  # from code too
        watcher.retry(first)
    clock.stages(2)
    watcher.poll_once()
    assert watcher.header()["ready"] == 2 and watcher.header()["failed_calls"] == 1
    assert {watcher.card(i).record.style for i in watcher.ids[2:]} == {"sea shanty"}  # the same request, again


def test_retry_is_refused_when_the_request_is_not_known_or_the_call_did_not_fail(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, made: list[TaskWatcher]
) -> None:
    sandbox.set_faults([{"kind": "task_fail", "path": GENERATE, "count": 1}])
    unknown = TaskWatcher(client.generate(action="auto", style="x").ids, client=client, autostart=False)
    made.append(unknown)
    clock.stages(2)
    unknown.poll_once()
    assert not any(card["retryable"] for card in unknown.snapshot()["groups"][0])
    send(unknown, kind="retry", id=unknown.ids[0])  # no Retry shown: nothing done
    assert "nothing was done" in unknown.card(unknown.ids[0]).note and sandbox.request_counts()[GENERATE] == 1
    with pytest.raises(MusicGenError, match="not known here"):  # from code, said why
        unknown.retry(unknown.ids[0])
    request = build_generate_request({"action": "auto", "style": "fine"})
    fine = TaskWatcher(client.generate(request).ids, client=client, autostart=False, request=request)
    made.append(fine)
    clock.stages(2)
    fine.poll_once()
    send(fine, kind="retry", id=fine.ids[0])  # a call that did not fail shows no Retry
    assert "nothing was done" in fine.card(fine.ids[0]).note
    with pytest.raises(MusicGenError, match="only a call whose songs all failed"):
        fine.retry(fine.ids[0])
    assert sandbox.request_counts()[GENERATE] == 2


def test_with_a_real_key_the_first_retry_press_only_asks(made: list[TaskWatcher]) -> None:
    paid = Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={PAID_KEY: 40})
    with paid, paid.client(max_retries=0) as client:
        clock = ManualClock(paid.state.stage_seconds)
        paid.state.clock = clock
        watcher = failed_call(client, paid, clock, made)
        task_id = watcher.ids[0]
        send(watcher, kind="retry", id=task_id)
        assert paid.request_counts()[GENERATE] == 1 and "press Retry again" in watcher.card(task_id).note
        send(watcher, kind="copy_id", id=task_id)  # any other press in between: the ask is forgotten
        send(watcher, kind="retry", id=task_id)
        assert paid.request_counts()[GENERATE] == 1
        send(watcher, kind="retry", id=task_id)
        assert paid.request_counts()[GENERATE] == 2 and len(watcher.ids) == 4


def test_hide_failed_leaves_failed_calls_off_the_pages_but_counted(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, made: list[TaskWatcher]
) -> None:
    watcher = failed_call(client, sandbox, clock, made)
    watcher.page_size = 1
    watcher.add(client.generate(action="auto", style="calm").ids)
    clock.stages(2)
    watcher.poll_once()
    assert watcher.pages == 2 and len(watcher.snapshot()["groups"]) == 1
    send(watcher, kind="hide_failed", on=True)
    header = watcher.header()
    assert header["hide_failed"] and header["failed"] == 2 and header["failed_calls"] == 1 and header["pages"] == 1
    assert [card["state"] for group in watcher.snapshot()["groups"] for card in group] == ["ready", "ready"]
    send(watcher, kind="hide_failed", on="yes")  # only a real `true` hides: a forged value shows them again
    assert not watcher.hide_failed and watcher.pages == 2


def test_the_studio_gives_the_watcher_the_request_it_sent(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock
) -> None:
    from ipymusicgen.widgets.studio import Studio

    studio = Studio(client)
    try:
        sandbox.set_faults([{"kind": "task_fail", "path": GENERATE, "count": 1}])
        studio.watcher.stop()
        studio.song.set_values(action="auto", style="rainy bossa")
        ids = studio.song.submit()
        clock.stages(2)
        studio.watcher.poll_once()
        assert studio.watcher.done
        send(studio.watcher, kind="retry", id=ids[0])
        assert sandbox.request_counts()[GENERATE] == 2 and len(studio.watcher.ids) == 4
    finally:
        studio.close()


def test_a_followed_batchs_failed_row_offers_retry_with_that_rows_request(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, made: list[TaskWatcher]
) -> None:
    from ipymusicgen.batch.drivers import run_batch
    from ipymusicgen.storage.batches import BatchStore

    sandbox.set_faults([{"kind": "task_fail", "path": GENERATE, "count": 1}])
    watcher = TaskWatcher(client=client, autostart=False)
    made.append(watcher)
    rows = [{"style": "first row"}, {"style": "second row"}]
    batch = run_batch(client, rows, concurrency=1, wait=False, store=BatchStore(None))  # a private store
    watcher.follow(batch)
    advance_until_done(batch, clock, sandbox)
    failed = next(row for row in batch.rows if row.state == "failed")
    assert all(watcher.card(i).data()["retryable"] for i in failed.ids)
    send(watcher, kind="retry", id=failed.ids[0])
    assert sandbox.request_counts()[GENERATE] == 3 and len(watcher.ids) == 6
    clock.stages(2)
    watcher.poll_once()
    assert {watcher.card(i).record.style for i in watcher.ids[4:]} == {failed.request.style}
