"""A watcher following a batch labels each row's cards with the row's number as the batch's tables, errors and
view say it, counting from 1 (docs/batches.md): the first row's songs are 'row 1', never 'row 0'."""

from __future__ import annotations

from helpers import ManualClock, advance_until_done

from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore


def test_a_followed_batchs_cards_name_their_row_from_1(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock
) -> None:
    from ipymusicgen.widgets.watcher import TaskWatcher

    watcher = TaskWatcher(client=client, autostart=False)
    try:
        batch = run_batch(
            client,
            [{"style": f"tide {n}", "mv": "MFV2.0"} for n in "abc"],
            concurrency=3,
            wait=False,
            store=BatchStore(None),
        )
        watcher.follow(batch)
        advance_until_done(batch, clock, sandbox)
        label_of = {task_id: card.call for task_id, card in watcher._cards.items()}
        for row in batch.rows:
            assert row.ids and {label_of[task_id] for task_id in row.ids} == {f"row {row.number}"}, label_of
        assert "row 0" not in label_of.values()
    finally:
        watcher.close()
