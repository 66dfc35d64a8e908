"""The public names that stay: every name of the package and of its widgets as they were before the workspace was
built (frozen below, from commit 7a0934a, before issue 30) that was kept, every module a notebook imported that
was kept, every magic and every command-line command still work. The names the unreleased 0.1 had and replaced
(the old forms, the client package's re-exports, `ipymusicgen.journal` and its kind) went with their tombstones
(issue 38): they are not listed here."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from IPython.core.interactiveshell import InteractiveShell

import ipymusicgen

PACKAGE_NAMES = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncMusicClient",
    "AuthenticationError",
    "BadRequestError",
    "Batch",
    "BatchError",
    "BatchRow",
    "CompareView",
    "CreateOutcomeUnknownError",
    "DownloadError",
    "EnvelopeAuthenticationError",
    "EnvelopeError",
    "IgnoredFieldsWarning",
    "InsecureTransportError",
    "InsufficientCreditsError",
    "InternalServerError",
    "Journal",
    "JournalUnavailableError",
    "JournalWriteWarning",
    "MissingKeyError",
    "MusicClient",
    "MusicGenError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RedirectRefusedError",
    "RequestValidationError",
    "Resumed",
    "Sandbox",
    "ServerAuthenticationError",
    "Settings",
    "TaskFailedError",
    "TaskRecord",
    "TaskState",
    "TaskWatcher",
    "UnprocessableEntityError",
    "V2Song",
    "WaitTimeoutError",
    "__version__",
    "analyze",
    "compare",
    "export",
    "get_async_client",
    "get_client",
    "grid",
    "library",
    "load_ipython_extension",
    "studio",
    "unload_ipython_extension",
    "watch_unfinished",
    "waveform",
]
"""`ipymusicgen.__all__` before the workspace (7a0934a)."""
MODULE_NAMES = {
    "ipymusicgen.widgets": ["Studio", "TaskCard", "TaskWatcher", "song_card", "studio", "watch_unfinished"],
    "ipymusicgen.client.faces": ["AsyncMusicClient", "MusicClient", "Resumed", "chunk_ids"],
}
"""The widgets' `__all__` before the workspace that stayed, and the client's faces (the client package no longer
re-exports them)."""
MODULES = ("ipymusicgen.batch.drivers", "ipymusicgen.workspace.session", "ipymusicgen.song_library",
           "ipymusicgen.workspace.workspace", "ipymusicgen.lab.grid", "ipymusicgen.archive.export",
           "ipymusicgen.widgets.studio", "ipymusicgen.widgets.watcher", "ipymusicgen.sandbox")  # fmt: skip
"""Modules a notebook may import from."""
MAGICS = ("musicgen", "lyrics", "musicgen_batch", "musicgen_grid", "musicgen_key", "musicgen_library",
          "musicgen_login", "musicgen_resume", "musicgen_tasks", "musicgen_ui")  # fmt: skip
COMMANDS = ("generate", "demo", "mcp")


def test_every_name_that_stays_is_there() -> None:
    for name in PACKAGE_NAMES:
        assert getattr(ipymusicgen, name) is not None, name
    assert set(PACKAGE_NAMES) <= set(ipymusicgen.__all__)
    for module, names in MODULE_NAMES.items():
        imported = importlib.import_module(module)
        for name in names:
            assert getattr(imported, name) is not None, (module, name)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_a_notebook_imports_is_there(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]


def test_every_magic_is_still_there(sandbox_shell: InteractiveShell) -> None:
    found = sandbox_shell.magics_manager.lsmagic()
    known = set(found["line"]) | set(found["cell"])
    assert set(MAGICS) <= known, set(MAGICS) - known


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_line_command_is_still_there(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ipymusicgen", command, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-1500:]
