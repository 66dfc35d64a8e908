"""Closing a `Workspace` (issue 38: `close()` closes what it made): a closed workspace stays closed (asking it for
a client or a library is refused in one line, its journal file is not opened again behind its owner's back),
closing twice or from another thread is harmless, and the other workspace of the process goes on working."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ipymusicgen.config import Settings
from ipymusicgen.errors import MusicGenError
from ipymusicgen.storage.shared_connection import open_connections
from ipymusicgen.workspace.workspace import Workspace


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
