"""Tests own their world: they go through the session's public functions and the fixtures' own workspaces,
never into the session's private state, so they pass in any order and on any worker (README command 2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace import session
from ipymusicgen.workspace.workspace import Workspace

TESTS = Path(__file__).parent
PRIVATE_SESSION = re.compile(r"\bsession\._\w+")
"""`session._session.watchers`, `session._start_sandbox()`: what a test read or changed behind the session's back."""


def test_no_test_reaches_into_the_sessions_private_state() -> None:
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(TESTS.glob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE_SESSION.search(line) and path.name != Path(__file__).name
    ]
    assert found == [], "\n".join(found)


def test_the_workspace_fixture_is_the_tests_own_and_closed_after(
    workspace: Workspace, sandbox: Sandbox, tmp_path: Path
) -> None:
    assert workspace.path == tmp_path / "journal.sqlite3"
    client = workspace.client
    ids = list(client.generate(action="auto", style="a world of its own").ids)
    records = client.wait(ids, timeout=60, archived=True)
    assert all(r.audio_url for r in records)
    folder = workspace.archive.sandbox_dir()  # the demo key's songs: the workspace's throwaway folder
    kept = sorted(folder.rglob("*.mp3"))
    assert len(kept) == 2, kept
    assert session.current_client() is None or session.current_client() is not client  # not the session's


def test_the_session_says_what_it_holds_without_starting_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """`watchers()` is a copy, `embedded_sandbox()` starts nothing, and `reset()` leaves a new process's session:
    no sandbox, no watcher, no workspace, settings from the environment only."""
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    monkeypatch.setenv("MUSICGEN_SANDBOX_STAGE_SECONDS", "0.05")
    monkeypatch.setenv("MUSICGEN_SANDBOX_SONG_SECONDS", "2")
    session.reset()
    try:
        assert session.embedded_sandbox() is None and session.current_client() is None  # asking started nothing

        class Widget:
            closed = 0

            def close(self) -> None:
                self.closed += 1
                session.unregister_watcher(self)

        widget = Widget()
        session.register_watcher(widget)
        copy = session.watchers()
        assert copy == (widget,) and isinstance(copy, tuple)
        session.configure(poll_interval=0.07)
        client = session.get_client()  # no key: the session starts its own sandbox
        sandbox = session.embedded_sandbox()
        assert sandbox is not None and sandbox.running and client.settings.base_url == sandbox.base_url
        folder = session.current_workspace().path.parent
        session.reset()
        assert widget.closed == 1 and session.watchers() == ()
        assert not sandbox.running and session.embedded_sandbox() is None and session.current_client() is None
        assert not folder.exists()  # the throwaway journal's folder went with it
        assert session.settings().poll_interval != 0.07  # the configure() change is forgotten
    finally:
        session.reset()


@pytest.fixture(scope="module")
def module_thing() -> object:
    """A module-scoped fixture of this module's own, as a Jupyter server or a built wheel is elsewhere."""
    return object()


def test_a_test_on_a_module_fixture_of_its_own_runs_with_its_module(
    module_thing: object, request: pytest.FixtureRequest
) -> None:
    """On `-n 2` (`--dist loadgroup`, pyproject) the module's tests go to one worker, so the fixture starts once."""
    marks = [mark.args for mark in request.node.iter_markers("xdist_group")]
    assert marks == [("module:tests/test_test_worlds.py",)]


def test_a_test_without_one_is_spread_freely(request: pytest.FixtureRequest) -> None:
    assert list(request.node.iter_markers("xdist_group")) == []


GROUPED = """
import os
import pytest

@pytest.fixture(scope="module")
def started():
    with open(os.environ["STARTS"], "a") as starts:
        starts.write(f"{os.getpid()}\\n")

@pytest.mark.xdist_group("g")
@pytest.mark.parametrize("n", range(6))
def test_grouped(started, n):
    pass
"""

RUN_ON_TWO_WORKERS = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "randomly"]


@pytest.mark.slow  # three runs of a pytest of its own on two workers
def test_a_group_stays_on_one_worker_so_its_module_fixture_starts_once(tmp_path: Path) -> None:
    """The marks above are only half of it: under pytest 9.2, xdist's loadgroup silently spread a group over both
    workers (pytest-xdist#1386), so each worker started the module's Jupyter server or benchmark run again."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    for n in range(12):
        (tmp_path / f"test_loose_{n}.py").write_text("def test_loose():\n    pass\n")
    starts = tmp_path / "starts"
    for seed in (1, 2, 3):
        done = subprocess.run(
            [*RUN_ON_TWO_WORKERS, f"--randomly-seed={seed}", "--rootdir", str(tmp_path), str(tmp_path)],
            cwd=tmp_path,
            env={**os.environ, "STARTS": str(starts)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(starts.read_text().split()) == 3, f"3 runs started the module fixture in {starts.read_text().split()}"
