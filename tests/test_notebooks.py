"""Every demo notebook runs top to bottom in a real kernel with a key on a keyed sandbox, and checks itself.

A notebook that only runs proves little, so each ends in a cell tagged `check` that asserts what the
notebook showed (songs complete, audio URLs, a valid MP3 on disk); here we make sure that cell ran
and printed its OK line, that no cell errored except those tagged `raises-exception` (which must
show the one-line UsageError they are there to teach), and that the watchers' players were rendered.
Each notebook is executed once per test run (`notebook_runs`, shared with the key-leak search of
`test_security`). Executed copies are kept in artifacts/notebooks/ to look at when something fails.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import nbformat
import pytest
from jupyter_utils import NOTEBOOK_NAMES, notebook_path
from notebook_runs import NotebookRuns

from ipymusicgen.storage.journal import Journal
from ipymusicgen.workspace.session import SANDBOX_NOTICE

pytestmark = pytest.mark.slow  # notebooks in kernels

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_runs_and_checks_itself(name: str, notebook_runs: NotebookRuns) -> None:
    notebook = notebook_runs[name].notebook
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


def test_quickstart_shows_players_and_saves_an_mp3(notebook_runs: NotebookRuns) -> None:
    """The watcher's players play the finished songs the notebook printed, and the download is on disk.

    Deterministic under load: `%%musicgen --wait` keeps its cell running until the watcher has shown the
    final files, so every widget message is sent while a cell runs (nbclient keeps only those) and the
    saved state is the final one; nothing here depends on how fast the machine is.
    """
    run = notebook_runs["quickstart"]
    notebook, workdir = run.notebook, run.workdir
    models = widget_models(notebook)
    printed = next(cell for cell in code_cells(notebook) if "for song in songs:" in cell.source)
    final_urls = sorted(set(re.findall(r"(http://127\.0\.0\.1:\d+/files/\S+?\.mp3)", stream_text(printed))))
    assert len(final_urls) == 2
    played = _player_urls(models)
    assert sorted(set(played)) == final_urls, "each song's player has its final file"
    audio_widgets = [m for m in models.values() if m.get("model_name") == "AudioModel"]
    assert len(audio_widgets) in (0, 2), "one player per song"
    made = next(cell for cell in code_cells(notebook) if cell.source.startswith("%%musicgen"))
    shown = [view for cell in code_cells(notebook) for view in _widget_views(cell)]
    assert len(shown) == 2 and all(view in models for view in shown), "the watcher and the studio were displayed"
    assert _widget_views(made), "the watcher is under the %%musicgen cell"
    saved_text = "".join(
        str(o.get("data", {}).get("text/plain", "")) for o in made.outputs if WIDGET_VIEW in o.get("data", {})
    )
    assert "2 ready" in saved_text and "running" not in saved_text, "the saved watcher text reads finished, not stale"
    html = "".join(str(o.get("data", {}).get("text/html", "")) for o in made.outputs)
    assert "<audio" not in html, "the table under the watcher does not play the songs a second time"
    saved = list((workdir / "downloads").glob("*.mp3"))
    assert len(saved) == 1 and saved[0].stat().st_size > 1000


def _player_urls(models: dict[str, Any]) -> list[str]:
    """The audio URLs the stored widgets play: `Audio` widgets' values, or an anywidget card's audio field."""
    urls: list[str] = []
    for model in models.values():
        if model.get("model_name") == "AudioModel":
            urls.append(_buffer_text(model, "value"))
        else:
            urls += _audio_fields(model.get("state", {}))
    return sorted(url for url in urls if url)


def _audio_fields(value: Any) -> list[str]:
    """Values of `audio_url`/`audio` keys anywhere in a widget's JSON state (a card list, say)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("audio_url", "audio") and isinstance(item, str) and item.startswith("http"):
                found.append(item)
            else:
                found += _audio_fields(item)
    elif isinstance(value, list):
        for item in value:
            found += _audio_fields(item)
    return found


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
    notebook_runs: NotebookRuns,
) -> None:
    """With MUSICGEN_API_KEY and the hosts set (as for the real, paid service), no embedded sandbox is
    started, every request goes to the configured service, and the quickstart makes exactly one song request.
    """
    run = notebook_runs["quickstart"]
    outputs = "".join(stream_text(cell) for cell in code_cells(run.notebook))
    assert SANDBOX_NOTICE not in outputs and "quickstart OK" in outputs
    printed = next(cell for cell in code_cells(run.notebook) if "for song in songs:" in cell.source)
    assert stream_text(printed).count(f"{notebook_runs.service.base_url}/files/") == 2
    with Journal(run.journal) as journal:
        assert [a.endpoint for a in journal.attempts() if "lyric" not in a.endpoint] == ["generate"]
