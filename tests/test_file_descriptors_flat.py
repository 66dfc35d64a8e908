"""Opening and closing the package's parts again and again leaves the process's file descriptors flat (a long test
worker ran out at ulimit 1024 on CI). Measured before the fix: every hand-made client's journal file stayed open
for good in the default wiring (three descriptors each: the file, -wal and -shm): 20 such clients left 60 descriptors
behind (21 files with the first round's); none now."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.shared_connection import open_connections
from ipymusicgen.workspace.workspace import Workspace

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd (Linux)")
SLACK = 6
"""Descriptors a round may leave that are not the part's (a thread's, the allocator's): far below one per round."""


def descriptors() -> int:
    gc.collect()
    open_connections()  # gives back the uses of stores collected unclosed, as the next open of a file would
    return len(os.listdir("/proc/self/fd"))


def journal_files_open(folder: Path) -> list[Path]:
    return [shared.path for shared in open_connections() if shared.path.is_relative_to(folder.resolve())]


@pytest.fixture
def settings() -> Settings:
    """A keyed service that is never reached: nothing here sends a request."""
    return Settings.from_env().with_changes(
        api_key="test-key-never-sent", base_url="http://127.0.0.1:9", v2_base_url="http://127.0.0.1:9"
    )


def test_hand_made_clients_on_their_own_journals_leave_no_file_open(settings: Settings, tmp_path: Path) -> None:
    """Clients made by hand (the default wiring), each on a journal file of its own, using what their batches and
    paid extras use there, then closed: none of the files stays open, and the descriptors stay flat."""

    def one_round(i: int) -> None:
        with MusicClient(settings=settings, journal=Journal(tmp_path / f"hand-{i}.sqlite3"), archive=False) as client:
            assert client.wiring.batch_store(client).names() == []  # where its batches keep their rows
            extras = client.wiring.database_at(client.journal.path).extras  # where its paid extras are kept
            assert extras.made_kinds([f"song-{i}"]) == {f"song-{i}": []}

    one_round(-1)  # the first round loads what every round shares
    before = descriptors()
    for i in range(20):
        one_round(i)
    after = descriptors()
    assert journal_files_open(tmp_path) == []
    assert after - before <= SLACK, f"{after - before} descriptors left by 20 clients"


def test_workspaces_opened_and_closed_again_and_again_leave_no_descriptor(settings: Settings, tmp_path: Path) -> None:
    def one_round(i: int, close: bool) -> None:
        workspace = Workspace(settings, journal_path=tmp_path / f"ws-{i % 5}.sqlite3")  # files used again too
        workspace.archive.choose(False)
        assert workspace.client.journal.history() == []
        assert workspace.client.wiring.batch_store(workspace.client).names() == []
        if close:  # its libraries too (their archive retry wakes the archiver, whose idle run close() ends)
            with workspace.library() as library:
                assert library.count() == 0
            assert workspace.songs.count() == 0
            workspace.close()

    one_round(-1, True)
    before = descriptors()
    for i in range(24):
        one_round(i, close=i % 2 == 0)  # every other one dropped without close(): collected, it lets go too
    after = descriptors()
    assert journal_files_open(tmp_path) == []
    assert after - before <= SLACK, f"{after - before} descriptors left by 24 workspaces"
