"""A card's Extend opens a studio through an opener its watcher was given when it was built (by the magics, the
studio, `ipymusicgen.watch_unfinished()`), never through a slot some module fills when it is imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.studio import SongPane, Studio
from ipymusicgen.widgets.watcher import TaskWatcher
from ipymusicgen.workspace import session


def test_importing_the_studio_changes_nothing_in_the_watchers_modules() -> None:
    """The watcher's modules hold no slot the studio fills at import: their globals are the same objects before
    and after the studio is imported (in a fresh process, where nothing imported it yet)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(
            """
            import sys
            from ipymusicgen.widgets import watch_actions, watcher  # the package imports the studio too
            assert "ipymusicgen.widgets.studio" in sys.modules
            names = [m for m in sys.modules if m.startswith("ipymusicgen.widgets.watch")]
            print(sorted(n for m in names for n in vars(sys.modules[m]) if "extend_studio" in n))
            """
        )],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"  # no module-level opener (provide_extend_studio, _open_extend_studio)


def test_no_widget_module_fills_a_slot_when_it_is_imported() -> None:
    """No `global` rebinding and no call made at a module's top level in `widgets/`: collaborators are passed in
    when views are built (`widgets/ui.py`), never installed by importing a module (as `provide_extend_studio`
    was)."""
    import ast
    from pathlib import Path

    import ipymusicgen.widgets

    found = []
    for path in sorted(Path(ipymusicgen.widgets.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        found += [f"{path.name}:{n.lineno} global" for n in ast.walk(tree) if isinstance(n, ast.Global)]
        found += [
            f"{path.name}:{n.lineno} {ast.unparse(n)[:60]}"
            for n in tree.body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
        ]
    assert found == []


@pytest.fixture
def finished(client: MusicClient) -> Iterator[list[str]]:
    ids = list(client.generate(action="auto", style="lo-fi piano").ids)
    client.wait(ids, timeout=60)
    yield ids


def test_a_watcher_made_by_hand_without_an_opener_says_in_one_line_what_to_do(
    client: MusicClient, finished: list[str]
) -> None:
    watcher = TaskWatcher(finished, client=client, autostart=False)
    try:
        watcher.poll_once()
        watcher._handle_custom_msg({"kind": "extend", "id": finished[0]}, [])
        note = watcher.card(finished[0]).note
        assert note.startswith("Extend failed:") and "open_extend_studio=" in note and "\n" not in note, note
        assert "import ipymusicgen.widgets" not in note and watcher.extend_studio is None
    finally:
        watcher.close()


def test_a_watcher_given_an_opener_opens_its_studio_on_extend(client: MusicClient, finished: list[str]) -> None:
    opened: list[Studio] = []

    def opener(watcher: TaskWatcher) -> Studio:
        opened.append(Studio(watcher.client, watcher=watcher))
        return opened[-1]

    watcher = TaskWatcher(finished, client=client, autostart=False, open_extend_studio=opener)
    try:
        watcher.poll_once()
        watcher._handle_custom_msg({"kind": "extend", "id": finished[0]}, [])
        assert opened == [watcher.extend_studio] and watcher.extend_form is opened[0].song
        watcher._handle_custom_msg({"kind": "extend", "id": finished[1]}, [])  # the same studio again
        assert len(opened) == 1 and watcher.extend_form.values()["continue_song_id"]
    finally:
        for made in opened:
            made.close()
        watcher.close()


def test_the_musicgen_magics_watcher_opens_a_studio_on_extend(
    sandbox_shell: InteractiveShell, sandbox: Sandbox
) -> None:
    """`%musicgen` shows a lone watcher; its card's Extend (the browser's message) prefills a studio's Song pane
    that sends into that watcher."""
    from helpers import wait_until

    sandbox_shell.run_line_magic("musicgen", "lo-fi harbour at night")
    (watcher,) = [w for w in session.watchers() if isinstance(w, TaskWatcher)]
    wait_until(lambda: watcher.done, "the magic's songs to finish")
    task_id = watcher.ids[0]
    watcher._handle_custom_msg({"kind": "extend", "id": task_id}, [])
    assert "Extend form ready" in watcher.card(task_id).note, watcher.card(task_id).note
    made = watcher.extend_studio
    assert isinstance(made, Studio) and made.watcher is watcher
    form = watcher.extend_form
    assert isinstance(form, SongPane) and form.values()["action"] == "extend"
    assert form.values()["continue_song_id"] == watcher.card(task_id).record.song_id
    sent = sandbox.request_counts()["/v1/music/generate"]
    form.submit()
    assert len(watcher.ids) == 4 and sandbox.request_counts()["/v1/music/generate"] == sent + 1
    made.close()


def test_watch_unfinished_opens_a_studio_on_extend(client: MusicClient, finished: list[str]) -> None:
    """The public `ipymusicgen.watch_unfinished()` builds its watcher with the studio's opener."""
    import ipymusicgen

    watcher = ipymusicgen.watch_unfinished(client)
    try:
        assert watcher.open_extend_studio is not None
    finally:
        watcher.close()


def test_the_batch_magics_cards_open_a_studio_on_extend(sandbox_shell: InteractiveShell, sandbox: Sandbox) -> None:
    """`%%musicgen_batch`'s song cards are a lone watcher too: a finished row's Extend prefills a studio pane."""
    from IPython.utils.capture import capture_output

    sandbox_shell.user_ns["rows"] = [{"style": "waltz on a ferry"}]
    with capture_output():
        sandbox_shell.run_line_magic("musicgen_batch", "--from rows --name extend-from-a-batch --wait")
    (watcher,) = [w for w in session.watchers() if isinstance(w, TaskWatcher)]
    task_id = watcher.ids[0]
    watcher._handle_custom_msg({"kind": "extend", "id": task_id}, [])
    assert "Extend form ready" in watcher.card(task_id).note, watcher.card(task_id).note
    assert isinstance(watcher.extend_studio, Studio) and watcher.extend_studio.watcher is watcher
    assert watcher.extend_form.values()["continue_song_id"]
    watcher.extend_studio.close()


def test_the_public_studio_and_watch_unfinished_are_the_ui_factorys() -> None:
    import ipymusicgen
    from ipymusicgen.widgets import ui

    assert ipymusicgen.studio is ui.studio and ipymusicgen.watch_unfinished is ui.watch_unfinished
