"""Collaborators are passed in, never found through a slot a side-effect import fills: a grid is drawn by the view
`ipymusicgen.grid()` gives it, in a fresh process that imported nothing else first."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from jupyter_utils import QUICK_SANDBOX, sandbox_env

from ipymusicgen.sandbox import Sandbox


def run_fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=180, check=False, env=sandbox_env(**QUICK_SANDBOX),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_grid_is_drawn_by_its_view_with_no_side_effect_import() -> None:
    """`grid()` loads no widgets (a script never showing it stays light); shown, it is drawn as its grid view."""
    said = run_fresh(
        """
        import sys
        import IPython  # a notebook's process: someone may display the grid
        import ipymusicgen
        plan = ipymusicgen.grid({"action": "auto"}, style=["lo-fi", "jazz"], name="fresh")
        assert not [m for m in sys.modules if m.startswith("ipymusicgen.widgets")], "grid() imported the widgets"
        bundle = plan._repr_mimebundle_()
        from ipymusicgen.widgets.grid import GridView
        assert isinstance(plan.view, GridView) and plan.view.grid is plan
        assert "application/vnd.jupyter.widget-view+json" in bundle
        print("drawn")
        """
    )
    assert said == "drawn"


def test_a_grid_made_in_the_lab_without_a_view_shows_its_table() -> None:
    said = run_fresh(
        """
        import ipymusicgen
        from ipymusicgen.lab.grid import Grid
        from ipymusicgen.workspace.session import get_client
        plan = Grid(get_client(), {"action": "auto"}, {"style": ["lo-fi", "jazz"]}, name="bare")
        import ipymusicgen.widgets.grid  # loading the widgets installs nothing
        assert plan.view is None and plan._repr_mimebundle_() is None
        print("table")
        """
    )
    assert said == "table"


# -- the workspace: one journal file, built at the top and passed down --------------------------------


def test_a_workspace_owns_its_file_and_wires_its_client_to_it(tmp_path: Path) -> None:
    from ipymusicgen.config import Settings
    from ipymusicgen.workspace.workspace import Workspace

    folder = tmp_path / "throwaway"
    folder.mkdir()
    settings = Settings.from_env().with_changes(api_key="sk-workspace-test", base_url="http://127.0.0.1:9")
    workspace = Workspace(settings, journal_path=folder / "journal.sqlite3", folder=folder)
    client = workspace.client
    assert client is workspace.client and client.journal is workspace.journal is workspace.db.journal
    assert client.wiring is workspace.wiring and workspace.path == folder / "journal.sqlite3"
    opened = workspace.library()
    try:
        assert opened.path == workspace.path
    finally:
        opened.close()
    workspace.reconfigure(settings.with_changes(poll_interval=0.5))
    assert workspace.current_client() is None and workspace.client.settings.poll_interval == 0.5
    workspace.close()
    assert workspace.current_client() is None and not folder.exists()


def test_a_workspaces_batches_keep_their_rows_in_its_database_and_open_no_store_of_their_own(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    from ipymusicgen.config import Settings
    from ipymusicgen.workspace.workspace import Workspace

    settings = Settings.from_env().with_changes(
        api_key=sandbox.api_key, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, poll_interval=0.05
    )
    workspace = Workspace(settings, journal_path=tmp_path / "journal.sqlite3")
    try:
        batch = workspace.client.batch([{"style": "lo-fi", "mv": "MFV2.0"}], name="mine", wait=False)
        batch.stop()
        assert batch.store is workspace.db.batches and "mine" in workspace.db.batches.names()
        batch.wait(timeout=60)
    finally:
        workspace.close()


def test_the_session_is_the_current_workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ipymusicgen.workspace import session

    monkeypatch.setenv("MUSICGEN_API_KEY", "sk-session-workspace")
    monkeypatch.setenv("MUSICGEN_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MUSICGEN_JOURNAL", str(tmp_path / "journal.sqlite3"))
    session.shutdown()
    session.configure(api_key="sk-session-workspace", journal_path=str(tmp_path / "journal.sqlite3"))
    try:
        workspace = session.current_workspace()
        assert session.get_client() is workspace.client and session.get_journal() is workspace.journal
        assert str(workspace.path) == str(tmp_path / "journal.sqlite3")
        session.configure(poll_interval=0.7)  # the client is rebuilt, the file stays
        assert session.current_workspace() is workspace and session.get_client().settings.poll_interval == 0.7
    finally:
        session.reset()


def test_the_command_line_uses_the_workspace_it_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ipymusicgen.__main__ import main
    from ipymusicgen.config import Settings
    from ipymusicgen.sandbox import Sandbox
    from ipymusicgen.song_library import Library
    from ipymusicgen.workspace.workspace import Workspace

    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={"cli-key": 100}) as service:
        settings = Settings.from_env().with_changes(
            api_key="cli-key", base_url=service.base_url, v2_base_url=service.v2_base_url, poll_interval=0.05
        )
        workspace = Workspace(settings, journal_path=tmp_path / "journal.sqlite3")
        try:
            code = main(
                ["generate", "rain", "--download", str(tmp_path / "songs"), "--interval", "0.05"], workspace=workspace
            )
            assert code == 0
            opened = Library(workspace.path)
            try:
                assert len(opened.songs()) == 2  # the songs went to the given file, nowhere else
            finally:
                opened.close()
        finally:
            workspace.close()


def test_a_clients_batch_is_typed() -> None:
    import inspect

    from ipymusicgen.client.faces import AsyncMusicClient, MusicClient

    assert inspect.signature(MusicClient.batch).return_annotation == "Batch"
    assert inspect.signature(AsyncMusicClient.batch).return_annotation == "Batch"


def test_waveform_looks_songs_up_in_the_workspaces_own_library_without_opening_one_per_call() -> None:
    said = run_fresh(
        """
        import ipymusicgen
        from ipymusicgen.workspace import session
        from ipymusicgen.song_library import Library

        opened = []
        original = Library.__init__
        def counting(self, *args, **kwargs):
            opened.append(self)
            original(self, *args, **kwargs)
        Library.__init__ = counting

        client = ipymusicgen.get_client()
        ids = list(client.generate(action="auto", style="lo-fi").ids)
        client.wait(ids, timeout=120, archived=True)
        shapes = {ipymusicgen.waveform(task_id, points=20).shape for task_id in ids * 3}
        assert shapes == {(20, 2)} and len(opened) == 1, (shapes, len(opened))
        assert opened[0] is session.current_workspace().songs
        print("one library")
        """
    )
    assert said == "one library"


def test_a_cards_extend_opens_the_studio_its_watcher_was_given() -> None:
    """A lone watcher's Extend prefills a studio pane that sends into that watcher: the opener is passed in when
    the watcher is built (in a fresh process, through the package's public `TaskWatcher`), no import fills it."""
    said = run_fresh(
        """
        import ipymusicgen
        from ipymusicgen.widgets.studio import extend_studio

        client = ipymusicgen.get_client()
        ids = list(client.generate(action="auto", style="lo-fi").ids)
        client.wait(ids, timeout=120)
        watcher = ipymusicgen.TaskWatcher(ids, client=client, autostart=False, open_extend_studio=extend_studio)
        watcher.poll_once()
        watcher._handle_custom_msg({"kind": "extend", "id": ids[0]}, [])
        form = watcher.extend_form
        assert form is not None and form.studio.watcher is watcher, watcher.card(ids[0]).note
        assert form.values()["action"] == "extend" and form.values()["continue_song_id"]
        print(type(watcher.extend_studio).__name__)
        """
    )
    assert said == "Studio"
