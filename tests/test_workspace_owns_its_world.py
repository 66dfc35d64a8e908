"""A `Workspace` owns its world: two workspaces on two journal files in one process share no per-key state (a
batch in one never counts the other's runs as overlapping it, as two kernels would not), and importing the
package registers nothing (no import hook, no exit callback, no thread)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ManualClock, advance_until_done, wait_until

from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace.workspace import Workspace

GENERATE = "/v1/music/generate"


@pytest.fixture
def two(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Workspace, Workspace]]:
    """Two workspaces on one key of one service, each on a journal file of its own."""
    settings = Settings.from_env().with_changes(
        api_key=sandbox.api_key, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, poll_interval=0.05
    )
    made = tuple(Workspace(settings, journal_path=tmp_path / name / "journal.sqlite3") for name in ("one", "two"))
    for workspace in made:
        workspace.path.parent.mkdir()
    try:
        yield made  # type: ignore[misc]
    finally:
        for workspace in made:
            workspace.close()


def test_a_batch_in_one_workspace_never_counts_the_other_workspaces_runs_as_overlapping(
    two: tuple[Workspace, Workspace], sandbox: Sandbox, clock: ManualClock
) -> None:
    first, second = two
    mine = first.client.batch([{"style": "dusk", "mv": "MFV3.0"}], name="mine", wait=False)
    wait_until(lambda: sandbox.request_counts().get(GENERATE, 0) >= 1, "the first workspace's create")
    theirs = second.client.batch([{"style": "dawn", "mv": "MFV3.0"}], name="theirs", wait=False)
    wait_until(lambda: sandbox.request_counts().get(GENERATE, 0) >= 2, "the second workspace's create")
    assert not mine.overlapped and not theirs.overlapped  # the other file's run is another world's
    again = first.client.batch([{"style": "noon", "mv": "MFV3.0"}], name="again", wait=False)
    assert again.overlapped and mine.overlapped and not theirs.overlapped  # a second run in one workspace does
    advance_until_done([mine, theirs, again], clock, sandbox)
    assert not theirs.overlapped


def test_closing_one_workspace_leaves_the_other_working(two: tuple[Workspace, Workspace]) -> None:
    first, second = two
    first.client.batch([{"style": "x", "mv": "MFV2.0"}], name="kept", wait=False).stop()
    first.close()
    batch = second.client.batch([{"style": "y", "mv": "MFV2.0"}], name="other", wait=False)
    batch.stop()
    batch.wait(timeout=60)
    assert second.db.batches.names() == ["other"] and batch.store is second.db.batches


def test_importing_the_package_registers_nothing() -> None:
    """No entry in `sys.meta_path`, no exit callback, no thread: a workspace or a session registers what it
    needs when it is made, not the import."""
    probe = textwrap.dedent(
        """
        import atexit, json, sys, threading
        finders, threads, seen = list(sys.meta_path), threading.active_count(), []
        register = atexit.register
        atexit.register = lambda f, *a, **k: seen.append(f"{f.__module__}.{f.__qualname__}") or register(f, *a, **k)
        import ipymusicgen, ipymusicgen.workspace.session, ipymusicgen.workspace.workspace, ipymusicgen.batch
        import ipymusicgen.storage.database, ipymusicgen.storage.journal, ipymusicgen.song_library
        import ipymusicgen.archive, ipymusicgen.lab.grid, ipymusicgen.lifecycle
        print(json.dumps({
            "finders": [repr(f) for f in sys.meta_path if f not in finders],
            "callbacks": [name for name in seen if name.startswith("ipymusicgen")],
            "threads": threading.active_count() - threads,
        }))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"finders": [], "callbacks": [], "threads": 0}


def test_a_workspaces_paid_extras_and_batches_are_kept_in_its_own_database(
    two: tuple[Workspace, Workspace], tmp_path: Path
) -> None:
    """The wiring hands out the workspace's `Database` for its file (extras, batch rows); another file's is one the
    wiring opened itself and closes with the workspace, never one found in a registry by path."""
    first, second = two
    assert first.wiring.database_at(first.path) is first.db and first.wiring.database_at(second.path) is not second.db
    assert first.wiring.batch_store(first.client) is first.db.batches
    other = first.wiring.database_at(tmp_path / "other.sqlite3")
    assert other is first.wiring.database_at(tmp_path / "other.sqlite3") and other.extras is other.extras
    extras = other.extras
    first.close()
    with pytest.raises(sqlite3.ProgrammingError):
        extras.of_song("nothing")
    assert second.db.batches.names() == []  # the other workspace still reads its file


def test_an_agent_call_and_a_batch_of_its_workspace_on_one_key_see_each_other_overlap() -> None:
    """The agent server's budget opens a single call's window in the workspace's `KeyActivity`, where its batches
    open theirs: a call during a batch is not measured (the key's counts moved for both), nor is the batch; on
    another key, or alone, a call is measured."""
    from ipymusicgen.batch.key_activity import KeyActivity
    from ipymusicgen.mcp.agent_budget import AgentBudget

    class Run:
        overlapped = False

    keys = KeyActivity()
    ledger = AgentBudget(None, activity=keys, key="key-a")
    batch, elsewhere = Run(), Run()
    keys.begin("key-a", batch)
    keys.begin("key-b", elsewhere)
    during = ledger.reserve(3)
    ledger.settle(during, 100, 97)
    assert during.measured is None and batch.overlapped and not elsewhere.overlapped
    keys.end("key-a", batch)
    assert keys.running("key-a") == 0  # the settled call's window closed with it
    alone = ledger.reserve(3)
    ledger.settle(alone, 97, 94)
    assert alone.measured == 3
