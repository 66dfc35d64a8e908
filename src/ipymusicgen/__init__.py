"""ipymusicgen: make songs with an AI music service from Jupyter.

`%load_ext ipymusicgen` for the magics, `ipymusicgen.studio()` for the forms, or the clients directly.
Heavy parts (the sandbox, numpy, FastAPI, the widgets) are imported only when first used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._removed import install_finder, missing
from ._version import __version__
from .client.faces import AsyncMusicClient, MusicClient, Resumed
from .config import Settings
from .errors import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    CreateOutcomeUnknownError,
    DownloadError,
    EnvelopeAuthenticationError,
    EnvelopeError,
    IgnoredFieldsWarning,
    InsecureTransportError,
    InsufficientCreditsError,
    InternalServerError,
    MissingKeyError,
    MusicGenError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RedirectRefusedError,
    RequestValidationError,
    ServerAuthenticationError,
    TaskFailedError,
    UnprocessableEntityError,
    WaitTimeoutError,
)
from .models.schema import TaskRecord, V2Song
from .models.tasks import TaskState
from .storage.journal import Journal, JournalUnavailableError, JournalWriteWarning
from .workspace.session import analyze, library, waveform

install_finder()  # `import ipymusicgen.journal` and other removed paths say what replaced them

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = [
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
    "make_extra",
    "studio",
    "unload_ipython_extension",
    "watch_unfinished",
    "waveform",
]

_LAZY = {
    "Batch": ("ipymusicgen.batch", "Batch"),
    "BatchError": ("ipymusicgen.batch", "BatchError"),
    "BatchRow": ("ipymusicgen.batch", "BatchRow"),
    "Sandbox": ("ipymusicgen.sandbox", "Sandbox"),
    "studio": ("ipymusicgen.widgets", "studio"),
    "compare": ("ipymusicgen.widgets.compare", "compare"),
    "CompareView": ("ipymusicgen.widgets.compare", "CompareView"),
    "TaskWatcher": ("ipymusicgen.widgets", "TaskWatcher"),
    "get_client": ("ipymusicgen.workspace.session", "get_client"),
    "get_async_client": ("ipymusicgen.workspace.session", "get_async_client"),
    "watch_unfinished": ("ipymusicgen.widgets", "watch_unfinished"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise missing(__name__, name)  # a removed name says what replaced it


def grid(
    base: dict[str, Any] | None = None,
    *,
    repeat: int = 1,
    name: str | None = None,
    client: MusicClient | None = None,
    **axes: Any,
) -> Any:
    """A prompt grid on the shared client: `grid({"action": "auto"}, style=["lo-fi", "jazz"], mv=["MFV2.0",
    "MFV3.0"], repeat=2)`. Each cell priced and the total; `.run()` sends it as one named batch; `.to_pandas()`
    gives the results. Shown in a notebook it is drawn as rows × columns of song cards (Run, compare blind)."""
    from .workspace.session import grid as plan

    return plan(base, repeat=repeat, name=name, client=client, view=_grid_view, **axes)


def _grid_view(plan: Any) -> Any:
    """A grid's view, made when it is first drawn (a script that never shows its grid loads no widgets)."""
    from .widgets.ui import grid_view

    return grid_view(plan)


def export(song_or_ids: Any, folder: str | Path, *, journal_path: str | Path | None = None) -> list[Path]:
    """Export songs as folders under `folder`: per song the tagged MP3 (and WAV/MP4 when made), the cover, the
    lyrics as text and `song.json` (request, lineage, cost estimated and measured apart, ratings, analysis), all
    read from the library in use (or the journal at `journal_path`). `song_or_ids`: a song, a task id or a list
    of them. Returns the song folders; nothing is asked of the service."""
    from .archive.export import export_songs
    from .workspace.session import library

    opened = library(journal_path)
    try:
        return export_songs(opened, song_or_ids, folder)
    finally:
        opened.close()


def make_extra(song_or_id: Any, kind: str, *, force: bool = False, client: MusicClient | None = None) -> Any:
    """A finished song's paid extra, made at most once and kept beside the song: `kind` is "wav", "mp4" or
    "vibe" (a singer id). Made before (any kernel on the journal, an agent): reused, nothing paid again. A
    request that may have been charged without an answer is not sent again unless `force=True`. Calling it is
    the consent (as `generate()` is); the card's button and `%musicgen_wav` ask first. Returns an `ExtraResult`
    (.state, .path, .value, .sent)."""
    from .archive.extras import make_extra as make
    from .workspace.session import get_client

    task_id = song_or_id if isinstance(song_or_id, str) else getattr(song_or_id, "id", song_or_id)
    return make(client or get_client(), task_id, kind, force=force)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    from .notebook.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    from .notebook.magics import unload_ipython_extension as unload

    unload(ipython)
