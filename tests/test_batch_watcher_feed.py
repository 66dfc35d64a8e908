"""A batch shown in a watcher is read from the service once per round: the watcher draws the batch's records
(`TaskWatcher.follow` / `show`) and never queries those songs itself. Counted server-side."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import Batch, run_batch
from ipymusicgen.models.tasks import TaskSet
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.widgets import TaskWatcher
from ipymusicgen.widgets.batch import BatchView
from ipymusicgen.workspace import session

TASKS = "/v1/music/tasks"
V2_QUERY = "/v2/query"
RESET = dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval"))


class PollLog:
    """Wraps a client's `poll` (the real call still goes out): which thread polled, and how many v1/v2 songs
    each round had to ask about, so the expected number of server queries is known exactly."""

    def __init__(self, client: MusicClient) -> None:
        self.original = client.poll
        self.rounds: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def __call__(self, tasks: TaskSet) -> Any:
        v1, v2 = tasks.unfinished()
        with self._lock:
            self.rounds.append((threading.current_thread().name, len(v1), len(v2)))
        return self.original(tasks)

    def threads(self) -> set[str]:
        return {name.split("-")[1] for name, _, _ in self.rounds}

    def expected(self) -> tuple[int, int]:
        """(v1 task queries, v2 queries) the rounds should have sent: one batched v1 query, one per v2 song."""
        return sum(1 for _, v1, _ in self.rounds if v1), sum(v2 for _, _, v2 in self.rounds)


def served(sandbox: Sandbox) -> tuple[int, int]:
    counts = sandbox.request_counts()
    return counts.get(TASKS, 0), counts.get(V2_QUERY, 0)


@pytest.fixture
def ip(sandbox_shell: InteractiveShell) -> InteractiveShell:
    return sandbox_shell


@pytest.mark.slow
def test_the_magics_watcher_draws_the_batchs_rounds_without_querying_again(
    ip: InteractiveShell, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = session.get_client()
    log = PollLog(client)
    monkeypatch.setattr(client, "poll", log)
    body = '--style polka one\n--style waltz two\n--v2 --title "Night Drive" synthwave drive at night\n'
    with capture_output():
        batch = ip.run_cell_magic("musicgen_batch", f"--name b{uuid.uuid4().hex[:8]} --wait -o made", body)
    batch = ip.user_ns.pop("made")
    assert isinstance(batch, Batch) and batch.counts()["complete"] == 3
    (view,) = [cb.__self__ for cb in batch._listeners if isinstance(getattr(cb, "__self__", None), BatchView)]
    watcher = view.watcher
    assert isinstance(watcher, TaskWatcher)
    assert log.threads() == {"batch"}  # every round came from the batch; the watcher never polled
    assert len(log.rounds) >= 2 and served(sandbox) == log.expected()  # one query per round, server-side
    assert sorted(watcher.ids) == sorted(batch.ids) and watcher.done and not watcher.running
    finished = {r.id: r for r in watcher.records}
    assert all(r.state.value == "complete" for r in finished.values()) and len(finished) == len(batch.ids)
    v2_row = batch.rows[2]
    assert all(watcher.card(i).record.title == "Night Drive" for i in v2_row.ids)  # the submit answer's title
    assert watcher.batch_line == "" and "3/3 done" in view.data["line"]  # one progress line: the view's
    watcher.close()


@pytest.mark.slow
def test_a_watcher_following_a_running_batch_waits_on_its_rounds(sandbox: Sandbox) -> None:
    with sandbox.client() as client:
        log = PollLog(client)
        client.poll = log  # type: ignore[method-assign]
        watcher = TaskWatcher(client=client, interval=0.05)
        view = BatchView(watcher=watcher)
        rows = [{"style": f"lo-fi {n}", "mv": "MFV2.0"} for n in range(3)]
        batch = run_batch(client, rows, concurrency=2, wait=False, on_update=view.update, store=BatchStore(None))
        view.update(batch)  # as the magic does: the watcher follows the batch from here
        records = watcher.wait(timeout=120)  # woken by the batch's rounds: nothing of its own to poll
        batch.wait(120)
        assert len(records) == 6 and all(r.state.value == "complete" for r in records)
        assert log.threads() == {"batch"} and served(sandbox) == log.expected()
        assert not watcher.running
        watcher.close()


@pytest.mark.slow
def test_show_draws_records_polled_elsewhere_and_never_polls_them(sandbox: Sandbox) -> None:
    with sandbox.client() as client:
        ids = client.generate(action="auto", style="ambient").ids
        records = client.wait(ids)
        before = served(sandbox)
        watcher = TaskWatcher(client=client, interval=0.05)
        changed = watcher.show(records)
        assert {r.id for r in changed} == set(ids) and watcher.ids == ids
        assert watcher.done and not watcher.running and watcher.poll_once() == []
        assert served(sandbox) == before  # drawn from what was handed in: no query
        (group,) = watcher.snapshot()["groups"]  # the two takes of the call side by side
        drawn = [(card["id"], card["take"], card["state"]) for card in group]
        assert drawn == [(ids[0], 1, "ready"), (ids[1], 2, "ready")]
        watcher.close()
