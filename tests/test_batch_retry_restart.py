"""'Retry failed rows' after a kernel restart: the retry's name comes from the batch store (never a per-view counter),
so a new kernel's retry sends the failed rows under a name no earlier retry used, within the batch's budget."""

from __future__ import annotations

from pathlib import Path

from helpers import ManualClock, advance_until_done

from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.batch.retry_failed import retry_name
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.batch import BatchView

GENERATE = "/v1/music/generate"
TASKS = "/v1/music/tasks"
FOREIGN = {"action": "upload", "audio_url": "https://example.com/a.mp3"}
"""A row whose songs the sandbox fails (it fetches no audio from elsewhere)."""
ROWS = [{"style": "lo-fi 1", "mv": "MFV2.0"}, {"style": "lo-fi 2", "mv": "MFV2.0"}, FOREIGN]
BUDGET = 20


def creates(sandbox: Sandbox) -> int:
    return sandbox.request_counts().get(GENERATE, 0)


def test_retry_after_a_restart_sends_the_failed_rows_under_a_new_name_within_the_budget(
    sandbox: Sandbox, clock: ManualClock, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:  # the first kernel
        batch = run_batch(client, ROWS, name="tour", budget=BUDGET, wait=False)
        advance_until_done(batch, clock, sandbox)
        view = BatchView(batch)
        first = view.retry_failed()
        assert first is not None and first.name == "tour-retry-1" and first.budget == BUDGET - batch.spent_estimate
        advance_until_done(first, clock, sandbox)
        assert [r.state for r in first.rows] == ["failed"]  # the foreign song fails again
    sent = creates(sandbox)

    with sandbox.client(journal=Journal(path), archive=False) as client:  # a new kernel: new view, same journal
        again = run_batch(client, ROWS, name="tour", budget=BUDGET, wait=False)  # the cell run again
        advance_until_done(again, clock, sandbox)
        assert creates(sandbox) == sent and [r.state for r in again.rows] == ["complete", "complete", "failed"]
        view = BatchView(again)
        assert view.data["can_retry"]
        retry = view.retry_failed()
        assert retry is not None and retry.name == "tour-retry-2"  # not -retry-1, which an earlier retry used
        assert retry.budget == BUDGET - again.spent_estimate and retry.budget is not None and retry.budget < BUDGET
        advance_until_done(retry, clock, sandbox)
        assert creates(sandbox) == sent + 1  # the failed row was sent, not shown as the old failure
        assert [r.request.action for r in retry.rows] == ["upload"] and retry.rows[0].ids
        assert view.batch is retry and retry.rows[0].ids[0] not in first.rows[0].ids


def test_the_retry_name_skips_every_name_an_earlier_retry_used() -> None:
    store = BatchStore(None)
    assert retry_name(store, "album") == "album-retry-1"
    for name in ("album-retry-1", "album-retry-3", "album-retry-x", "other-retry-9"):
        store.open_batch(name, [("h", "{}", False)])
    assert retry_name(store, "album") == "album-retry-4"
