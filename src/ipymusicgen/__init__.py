"""ipymusicgen: make songs with an AI music service from Jupyter.

`%load_ext ipymusicgen` for the magics, `ipymusicgen.studio()` for the forms, or the clients directly.
Heavy parts (the sandbox, numpy, FastAPI, the widgets) are imported only when first used. The verbs (`library`,
`analyze`, `waveform`, `export`, `make_extra`, `get_client`) are the session's, each one line over its current
workspace (`ipymusicgen.workspace`); `grid` is defined here, where the widgets' grid view may be named, and
`studio` in `ipymusicgen.widgets`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

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
from .workspace.session import (
    analyze,
    current_workspace,
    export,
    get_async_client,
    get_client,
    library,
    make_extra,
    waveform,
)

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

_LAZY = MappingProxyType(
    {
        "Batch": ("ipymusicgen.batch", "Batch"),
        "BatchError": ("ipymusicgen.batch", "BatchError"),
        "BatchRow": ("ipymusicgen.batch", "BatchRow"),
        "Sandbox": ("ipymusicgen.sandbox", "Sandbox"),
        "studio": ("ipymusicgen.widgets", "studio"),
        "compare": ("ipymusicgen.widgets.compare", "compare"),
        "CompareView": ("ipymusicgen.widgets.compare", "CompareView"),
        "TaskWatcher": ("ipymusicgen.widgets", "TaskWatcher"),
        "watch_unfinished": ("ipymusicgen.widgets", "watch_unfinished"),
    }
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name)


def grid(base: dict[str, Any] | None = None, *, repeat: int = 1, name: str | None = None,
         client: MusicClient | None = None, **axes: Any) -> Any:  # fmt: skip
    """A prompt grid on the shared client: `grid({"action": "auto"}, style=["lo-fi", "jazz"], mv=["MFV2.0",
    "MFV3.0"], repeat=2)`. Each cell priced and the total; `.run()` sends it as one named batch; `.to_pandas()`
    gives the results. Shown in a notebook it is drawn as rows × columns of song cards (Run, compare blind)."""
    return current_workspace().grid(base, repeat=repeat, name=name, client=client, view=_grid_view, **axes)


def _grid_view(plan: Any) -> Any:
    """A grid's view, made when it is first drawn (a script that never shows its grid loads no widgets)."""
    from .widgets.ui import grid_view

    return grid_view(plan)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    from .notebook.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    from .notebook.magics import unload_ipython_extension as unload

    unload(ipython)
