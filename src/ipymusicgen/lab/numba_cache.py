"""Where librosa's compiled functions are cached, and the lock under which a process first loads or writes them.

librosa compiles with numba (`cache=True`). Two processes compiling into, or loading from, one cache at once is a
known numba race that ends in SIGSEGV inside librosa; so the analysis worker (and benchmark figure 14's in-process
child) first use librosa under a file lock beside the cache they use (the worker's own, or numba's in-tree one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

LOCK_SECONDS = 600.0
"""How long a process waits for another process's compile before compiling anyway."""


def default_cache_dir() -> Path:
    """The project's numba cache: per user, per numba, librosa and Python version."""
    import platformdirs

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "none"

    tag = f"numba-{of('numba')}-librosa-{of('librosa')}-py{sys.version_info[0]}.{sys.version_info[1]}"
    return Path(platformdirs.user_cache_dir("ipymusicgen", appauthor=False)) / tag


def lock_path(cache_dir: Path) -> Path:
    """The compile lock sits beside the cache, so clearing the cache never removes the lock."""
    return cache_dir.with_name(cache_dir.name + ".lock")


def current_cache_dir() -> Path:
    """The cache this process's numba writes to: `NUMBA_CACHE_DIR`, else (numba's in-tree `__pycache__` folders) the
    project's cache folder stands in, for the lock only."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    return Path(given) if given else default_cache_dir()


def compile_locked(warm_up: Callable[[], None]) -> None:
    """Call `warm_up()` (which loads or compiles every function the analysis uses) under the cache's file lock; a
    lock held past `LOCK_SECONDS` (a stuck process) is waited out, then ignored. A process calls it once, before
    its first measure (the analysis worker does; so does benchmark figure 14's in-process child)."""
    from filelock import FileLock, Timeout

    cache_dir = current_cache_dir()
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(lock_path(cache_dir)), timeout=LOCK_SECONDS):
            warm_up()
    except Timeout:
        warm_up()
