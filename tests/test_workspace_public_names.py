"""No public name a user may have written in a notebook is lost without a one-line error saying what replaced it:
every name of the package, its widgets and its client as they were before the workspace was built (frozen below,
from commit 7a0934a, before issue 30), every magic and every command-line command either still works or says, in
one line, where it went."""

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
    "ipymusicgen.widgets": [
        "GenerateForm",
        "KeyInfoPanel",
        "LyricsForm",
        "Studio",
        "TaskCard",
        "TaskWatcher",
        "V2Form",
        "song_card",
        "studio",
        "watch_unfinished",
    ],
    "ipymusicgen.client": [
        "DOUBTFUL_STATUS",
        "IDS_QUERY_BUDGET",
        "RETRYABLE_STATUS",
        "AsyncMusicClient",
        "Endpoint",
        "Journal",
        "MusicClient",
        "Record",
        "Resumed",
        "TaskJournal",
        "UpdateCallback",
        "backoff_delay",
        "chunk_ids",
        "is_transient",
    ],
}
"""The widgets' and the client package's `__all__` before the workspace."""
MODULES = ("ipymusicgen.journal", "ipymusicgen.library", "ipymusicgen.costs", "ipymusicgen.tasks",
           "ipymusicgen.batch.drivers", "ipymusicgen.workspace.session", "ipymusicgen.song_library",
           "ipymusicgen.workspace.workspace",
           "ipymusicgen.lab.grid", "ipymusicgen.archive.export", "ipymusicgen.widgets.studio",
           "ipymusicgen.widgets.watcher", "ipymusicgen.sandbox")  # fmt: skip
"""Modules a notebook may have imported from."""
MAGICS = ("musicgen", "lyrics", "musicgen_batch", "musicgen_grid", "musicgen_key", "musicgen_library",
          "musicgen_login", "musicgen_resume", "musicgen_tasks", "musicgen_ui")  # fmt: skip
COMMANDS = ("generate", "demo", "mcp")


def names_a_replacement(text: str, old: str) -> bool:
    """One line that names another ipymusicgen name than the one that went."""
    return "\n" not in text.strip() and "ipymusicgen." in text.replace(old, "")


def test_every_name_the_package_had_is_there_or_says_what_replaced_it() -> None:
    for name in PACKAGE_NAMES:
        assert getattr(ipymusicgen, name) is not None, name
    for module, names in MODULE_NAMES.items():
        imported = importlib.import_module(module)
        for name in names:
            try:
                assert getattr(imported, name) is not None
            except AttributeError as exc:
                assert names_a_replacement(str(exc), f"{module}.{name}"), (module, name, str(exc))


@pytest.mark.parametrize("module", MODULES)
def test_every_module_a_notebook_imported_is_there_or_says_what_replaced_it(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError:") and names_a_replacement(last, module), done.stderr[-1500:]


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
