"""ipymusicgen: make songs with an AI music service from Jupyter.

`%load_ext ipymusicgen` for the magics, `ipymusicgen.studio()` for the forms, or the clients directly.
Heavy parts (the sandbox, numpy, FastAPI, the widgets) are imported only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .client import AsyncMusicClient, MusicClient
from .config import Settings
from .errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    CreateOutcomeUnknownError,
    InsufficientCreditsError,
    MusicGenError,
    RateLimitError,
    RequestValidationError,
    TaskFailedError,
    UnprocessableEntityError,
)
from .tasks import TaskState

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncMusicClient",
    "AuthenticationError",
    "CreateOutcomeUnknownError",
    "InsufficientCreditsError",
    "MusicClient",
    "MusicGenError",
    "RateLimitError",
    "RequestValidationError",
    "Settings",
    "TaskFailedError",
    "TaskState",
    "UnprocessableEntityError",
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
]

_LAZY = {
    "Sandbox": ("ipymusicgen.sandbox", "Sandbox"),
    "studio": ("ipymusicgen.widgets", "studio"),
    "TaskWatcher": ("ipymusicgen.widgets", "TaskWatcher"),
    "get_client": ("ipymusicgen.session", "get_client"),
    "watch_unfinished": ("ipymusicgen.session", "watch_unfinished"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ipymusicgen' has no attribute {name!r}")


def load_ipython_extension(ipython: InteractiveShell) -> None:
    from .magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    from .magics import unload_ipython_extension as unload

    unload(ipython)
