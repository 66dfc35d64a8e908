"""A view of one workspace reads and writes that workspace's library, never the session's (issue 38: two
workspaces on two journal files share nothing). A watcher built over a workspace that is not the session's current
one keeps a take in its own file, and pressing Keep neither opens nor builds the session's workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until

from ipymusicgen.config import Settings
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.ui import UI
from ipymusicgen.workspace import session
from ipymusicgen.workspace.workspace import Workspace

pytestmark = pytest.mark.slow  # a song made on a uvicorn sandbox and followed by a watcher's thread


@pytest.fixture
def two(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Workspace, Workspace]]:
    """Two workspaces of the test's own (neither is the session's), each on a journal file in its own folder."""
    session.reset()
    settings = Settings.from_env().with_changes(
        api_key=sandbox.api_key, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, poll_interval=0.05
    )
    made = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        made.append(workspace := Workspace(settings, journal_path=tmp_path / name / "journal.sqlite3"))
        workspace.archive.choose(tmp_path / name / "songs")
    try:
        yield made[0], made[1]
    finally:
        for workspace in made:
            workspace.close()
        session.reset()


def test_keep_in_a_watcher_of_one_workspace_marks_the_take_in_that_workspaces_library(
    two: tuple[Workspace, Workspace],
) -> None:
    first, second = two
    ids = list(second.client.generate(action="auto", style="keep, second").ids)
    watcher = UI(second).watcher(ids)
    try:
        wait_until(lambda: all(watcher.card(i).state is TaskState.COMPLETE for i in ids), "both takes complete")
        assert watcher.keep(ids[1]) is True  # the song is in the watcher's workspace's library
        assert [second.songs.song(i).kept for i in ids] == [False, True]
        assert not first.songs.store.song_count()  # nothing of it reached the other file
        assert session.current_client() is None  # the session's workspace was never built for it
    finally:
        watcher.close()
