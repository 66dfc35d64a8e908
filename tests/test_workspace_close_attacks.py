"""Closing a `Workspace` (issue 38: `close()` closes what it made): a closed workspace stays closed (asking it for
a client or a library is refused in one line, its journal file is not opened again behind its owner's back),
closing twice or from another thread is harmless, and the other workspace of the process goes on working."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import ManualClock, advance_until_done, wait_until

from ipymusicgen.config import Settings
from ipymusicgen.errors import MusicGenError
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.shared_connection import open_connections
from ipymusicgen.workspace.workspace import Workspace

GENERATE = "/v1/music/generate"


@pytest.fixture
def open_workspace(tmp_path: Path) -> Iterator[Callable[[str], Workspace]]:
    """Workspaces on files of the test's own; the key and the service are never reached (nothing is sent)."""
    settings = Settings.from_env().with_changes(
        api_key="test-key-never-sent", base_url="http://127.0.0.1:9", v2_base_url="http://127.0.0.1:9"
    )
    made: list[Workspace] = []

    def open_one(name: str) -> Workspace:
        made.append(workspace := Workspace(settings, journal_path=tmp_path / f"{name}.sqlite3"))
        workspace.archive.choose(False)
        return workspace

    yield open_one
    for workspace in made:
        workspace.close()


def files_open() -> set[Path]:
    return {shared.path for shared in open_connections()}


def test_a_closed_workspace_stays_closed_and_never_opens_its_file_again(
    open_workspace: Callable[[str], Workspace],
) -> None:
    closed, other = open_workspace("closed"), open_workspace("other")
    assert closed.client is closed.client and closed.songs.store.song_count() == 0
    other.client.journal.history()
    closed.close()
    assert closed.path.resolve() not in files_open()
    for ask in (
        lambda: closed.client,
        closed.async_client,
        closed.library,
        lambda: closed.songs,
        lambda: closed.grid({"action": "auto"}, style=["a", "b"]),
    ):
        with pytest.raises(MusicGenError, match="closed"):
            ask()
    assert closed.path.resolve() not in files_open()  # nothing asked of it opened the file again
    assert closed.current_client() is None
    closed.close()  # twice: harmless
    assert other.client.journal.history() == [] and other.songs.store.song_count() == 0


def test_closing_from_another_thread_while_the_other_workspace_is_used(
    open_workspace: Callable[[str], Workspace],
) -> None:
    closed, other = open_workspace("closed"), open_workspace("other")
    closed.client, other.client  # noqa: B018 (built: the close has something to close)
    closed.songs  # noqa: B018
    errors: list[BaseException] = []

    def close_twice() -> None:
        try:
            closed.close()
            closed.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    closers = [threading.Thread(target=close_twice) for _ in range(3)]
    for thread in closers:
        thread.start()
    for _ in range(20):
        assert other.songs.store.song_count() == 0 and other.client.journal.history() == []
    for thread in closers:
        thread.join(30)
    assert errors == [] and not any(thread.is_alive() for thread in closers)
    assert closed.path.resolve() not in files_open() and other.path.resolve() in files_open()


def test_closing_one_workspace_mid_batch_leaves_the_other_batch_on_the_same_key_running(
    sandbox: Sandbox, tmp_path: Path, clock: ManualClock
) -> None:
    """Both workspaces run a batch on one key of one service; one is closed while its rows are in flight: its batch
    stops (no row starts after the close) and its file is let go, the other's batch finishes every row."""
    settings = Settings.from_env().with_changes(
        api_key=sandbox.api_key, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, poll_interval=0.05
    )
    closed = Workspace(settings, journal_path=tmp_path / "closed.sqlite3")
    other = Workspace(settings, journal_path=tmp_path / "other.sqlite3")
    try:
        for workspace in (closed, other):
            workspace.archive.choose(False)
        rows = [{"style": f"row {i}", "mv": "MFV2.0"} for i in range(6)]
        stopped = closed.client.batch(rows, name="closed", concurrency=2, wait=False)
        running = other.client.batch(rows, name="other", concurrency=2, wait=False)
        wait_until(lambda: sandbox.request_counts().get(GENERATE, 0) >= 4, "both batches' first creates")
        closer = threading.Thread(target=closed.close)
        closer.start()
        wait_until(lambda: stopped.done, "the closed workspace's batch to end")  # its two songs are still making
        closer.join(60)
        assert not closer.is_alive() and stopped.error is None
        assert [row.state for row in stopped.rows].count("skipped") == 4  # never started after the close
        assert closed.path.resolve() not in files_open() and other.path.resolve() in files_open()
        advance_until_done(running, clock, sandbox)
        assert [row.state for row in running.rows] == ["complete"] * 6
        reopened = Workspace(settings, journal_path=closed.path)  # the file again: its rows sent are followed
        reopened.archive.choose(False)
        before = sandbox.request_counts().get(GENERATE, 0)
        rerun = reopened.client.batch(rows, name="closed", concurrency=2, wait=False)
        advance_until_done(rerun, clock, sandbox)
        reopened.close()
        assert [row.state for row in rerun.rows] == ["complete"] * 6
        assert sandbox.request_counts().get(GENERATE, 0) - before == 4  # the two sent before the close: not again
    finally:
        closed.close()
        other.close()


def test_a_workspace_collected_without_close_lets_its_file_go(tmp_path: Path) -> None:
    settings = Settings.from_env().with_changes(
        api_key="test-key-never-sent", base_url="http://127.0.0.1:9", v2_base_url="http://127.0.0.1:9"
    )
    paths = []
    for i in range(5):
        workspace = Workspace(settings, journal_path=tmp_path / f"dropped-{i}.sqlite3")
        workspace.archive.choose(False)
        workspace.client.journal.history()  # the file opened by its client's journal
        paths.append(workspace.path.resolve())
        del workspace
    gc.collect()
    kept = Workspace(settings, journal_path=tmp_path / "kept.sqlite3")
    try:
        kept.client.journal.history()
        assert not set(paths) & files_open()
    finally:
        kept.close()
