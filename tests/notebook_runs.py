"""Each demo notebook executed once per test run, shared by the tests that read it (`notebook_runs` fixture).

The notebooks run as a user with a real key would run them: a key (the canary, `CANARY`) on a keyed
sandbox that plays the paid service, so the journal, the archive, the library and the confirm rules
all take part. `test_notebooks` checks what each notebook shows; `test_security` searches the same
executed JSON, widget state and journal for the key. Executed copies land in artifacts/notebooks/.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import nbformat
from jupyter_utils import ARTIFACTS, notebook_path, sandbox_env
from nbclient import NotebookClient

from ipymusicgen.sandbox import Sandbox

CANARY = "canary-" + secrets.token_hex(16)
"""The key of this test run: every test that looks for a leaked key looks for it (and pieces of it)."""
CELL_TIMEOUT = 180
"""Seconds per cell: a kernel start or a wait on a slow shared machine, never a real song."""


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


@dataclass
class NotebookRun:
    notebook: nbformat.NotebookNode
    workdir: Path

    @property
    def journal(self) -> Path:
        return self.workdir / "journal.sqlite3"


class NotebookRuns:
    """The executed notebooks of this test run, each run the first time a test asks for it."""

    def __init__(self, service: Sandbox, folder: Path) -> None:
        self.service = service
        self.key = CANARY
        self._folder = folder
        self._runs: dict[str, NotebookRun] = {}

    def __getitem__(self, name: str) -> NotebookRun:
        if name not in self._runs:
            workdir = self._folder / name
            workdir.mkdir()
            # Each notebook is a fresh user: its own journal and data folder (a library's spend counts its own calls).
            env = sandbox_env(
                **self.service.env(),
                MUSICGEN_JOURNAL=str(workdir / "journal.sqlite3"),
                XDG_DATA_HOME=str(workdir / "data"),
            )
            assert env["MUSICGEN_API_KEY"] == self.key
            self._runs[name] = NotebookRun(execute(name, workdir, env), workdir)
        return self._runs[name]
