"""Every demo notebook runs top to bottom in a real kernel against the embedded sandbox, and checks itself.

A notebook that only runs proves little, so each ends in a cell tagged `check` that asserts what the
notebook showed (songs complete, audio URLs, a valid MP3 on disk); here we make sure that cell ran
and printed its OK line, that no cell errored except those tagged `raises-exception` (which must
show the one-line UsageError they are there to teach), and that the watchers' players were rendered.
Executed copies are kept in artifacts/notebooks/ to look at when something fails.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_utils import ARTIFACTS, NOTEBOOK_NAMES, notebook_path, sandbox_env
from nbclient import NotebookClient

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.session import SANDBOX_NOTICE

CELL_TIMEOUT = 180
"""Seconds per cell: a kernel start or a wait on a slow shared machine, never a real song."""
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def execute(
    name: str, workdir: Path, env: dict[str, str] | None = None, saved_as: str | None = None
) -> nbformat.NotebookNode:
    """Run the notebook in `workdir` (downloads land there); the executed copy is saved even if a cell fails."""
    notebook = nbformat.read(notebook_path(name), as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(workdir)}},
    )
    out = ARTIFACTS / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    try:
        client.execute(env=env or sandbox_env(), cwd=str(workdir))
    finally:
        nbformat.write(notebook, str(out / f"{saved_as or name}.ipynb"))
    return notebook


def code_cells(notebook: nbformat.NotebookNode) -> list[Any]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def tags(cell: Any) -> list[str]:
    return list(cell.metadata.get("tags", []))


def stream_text(cell: Any, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == name)


def errors(cell: Any) -> list[Any]:
    return [o for o in cell.outputs if o.output_type == "error"]


def widget_models(notebook: nbformat.NotebookNode) -> dict[str, Any]:
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {})
    return state.get("state", {})


Executed = dict[str, tuple[nbformat.NotebookNode, Path]]


@pytest.fixture(scope="module")
def executed() -> Executed:
    """The notebooks run so far in this module: each runs once, whichever tests ask for it first."""
    return {}


def run(name: str, cache: Executed, tmp: pytest.TempPathFactory) -> tuple[nbformat.NotebookNode, Path]:
    """The executed notebook and its working directory."""
    if name not in cache:
        workdir = tmp.mktemp(name)
        cache[name] = (execute(name, workdir), workdir)
    return cache[name]


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_runs_and_checks_itself(
    name: str, executed: Executed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    notebook, _workdir = run(name, executed, tmp_path_factory)
    cells = code_cells(notebook)
    assert all(cell.execution_count for cell in cells), "every code cell ran"
    for cell in cells:
        assert not errors(cell), f"traceback in {cell.source!r}: {errors(cell)}"
        usage_errors = [line for line in stream_text(cell, "stderr").splitlines() if line.startswith("UsageError: ")]
        expected = 1 if "raises-exception" in tags(cell) else 0
        assert len(usage_errors) == expected, f"{cell.source!r}: {usage_errors}"
    checks = [cell for cell in cells if "check" in tags(cell)]
    assert len(checks) == 1 and cells.index(checks[0]) >= len(cells) - 2, "one check cell, at the end"
    assert f"{name} OK" in stream_text(checks[0])


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_is_committed_without_outputs(name: str) -> None:
    notebook = nbformat.read(notebook_path(name), as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    for cell in code_cells(notebook):
        assert not cell.outputs and cell.execution_count is None, f"stored output in {name}: {cell.source!r}"
    assert "widgets" not in notebook.metadata, "no stored widget state"


def test_quickstart_shows_players_and_saves_an_mp3(
    executed: Executed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The watcher's players play the songs `wait()` printed, and the download is on disk.

    A player may still hold the preview when the kernel stops (the watcher polls on its own thread),
    so either the final file or its preview counts here; the browser test waits for the final one.
    """
    notebook, workdir = run("quickstart", executed, tmp_path_factory)
    models = widget_models(notebook)
    players = sorted(_buffer_text(m, "value") for m in models.values() if m["model_name"] == "AudioModel")
    waited = next(cell for cell in code_cells(notebook) if "client.wait(" in cell.source)
    final_urls = sorted(re.findall(r"(http://127\.0\.0\.1:\d+/\S+)\.mp3", stream_text(waited)))
    assert len(final_urls) == 2 and len(players) == 2
    for player, final in zip(players, final_urls, strict=True):
        assert player in (f"{final}.mp3", f"{final}-preview.mp3")
    shown = [view for cell in code_cells(notebook) for view in _widget_views(cell)]
    assert len(shown) == 2 and all(view in models for view in shown), "the watcher and the studio were displayed"
    saved = list((workdir / "downloads").glob("*.mp3"))
    assert len(saved) == 1 and saved[0].stat().st_size > 1000


def _buffer_text(model: dict[str, Any], name: str) -> str:
    """A bytes trait (e.g. an Audio's URL) from the stored widget state, where it is a base64 buffer."""
    found = [b["data"] for b in model.get("buffers", []) if b["path"] == [name]]
    return base64.b64decode(found[0]).decode() if found else ""


def _widget_views(cell: Any) -> list[str]:
    views = []
    for output in cell.outputs:
        data = output.get("data", {})
        if WIDGET_VIEW in data:
            view = data[WIDGET_VIEW]
            views.append((json.loads(view) if isinstance(view, str) else view)["model_id"])
    return views


def test_quickstart_with_a_key_goes_where_the_settings_point_and_makes_one_song_pair(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """With MUSICGEN_API_KEY and the hosts set (as for the real, paid service), no embedded sandbox is
    started, every request goes to the configured service, and the quickstart makes exactly one song request.
    """
    env = sandbox_env(**sandbox.env(), MUSICGEN_JOURNAL=str(tmp_path / "journal.sqlite3"))
    credits = sandbox.credits()
    notebook = execute("quickstart", tmp_path, env=env, saved_as="quickstart-with-key")
    outputs = "".join(stream_text(cell) for cell in code_cells(notebook))
    assert SANDBOX_NOTICE not in outputs and "quickstart OK" in outputs
    waited = next(cell for cell in code_cells(notebook) if "client.wait(" in cell.source)
    assert stream_text(waited).count(f"{sandbox.base_url}/files/") == 2
    assert sandbox.request_counts()["/v1/music/generate"] == 1
    assert 0 < credits - sandbox.credits() <= 3, "one request's worth of credits"
    assert (tmp_path / "journal.sqlite3").is_file()
