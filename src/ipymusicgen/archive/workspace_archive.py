"""A workspace's archive: where its songs are kept, which archiver follows which of its clients, who hears of each
song kept, and the throwaway places it makes (the sandbox's songs, the extras of clients with no journal).

A `Workspace` holds one and gives it to the clients it builds (through its wiring, `client.wiring.archive`); a client
made by hand gets the default wiring's. Two workspaces share nothing of it: a song made in one is announced only to
its own `events`, a sandbox song lands in its own throwaway folder, and closing one stops its archivers and removes
its throwaway folders while the other goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..lifecycle import close_at_exit
from .archiver import ENV_ARCHIVE, Archiver, default_archive_dir
from .events import ArchiveEvents

if TYPE_CHECKING:
    from ..client.faces import MusicClient, _Core

SANDBOX_EXIT_WAIT = 5.0
"""How long closing waits for a song being archived into the sandbox folder before removing it."""
OFF = frozenset({"0", "false", "off", "no"})


class WorkspaceArchive:
    """One workspace's archive (see the module): `events` to subscribe views to, `attach` for its clients."""

    def __init__(self, chosen: str | Path | Literal[False] | None = None) -> None:
        self.chosen: str | Path | Literal[False] | None = chosen
        """Where its real-service songs go (`choose`): a path, False (off), or None (MUSICGEN_ARCHIVE, the default)."""
        self.events = ArchiveEvents()
        self.swept: set[Path] = set()
        """Folders whose staging leftovers of dead processes were removed already (`archiver._staging_dir`)."""
        self._archivers: weakref.WeakSet[Archiver] = weakref.WeakSet()
        """Held weakly: a client holds its archiver (as a record listener), and a collected client takes it along."""
        self._lock = threading.Lock()
        self._sandbox: Path | None = None
        self._sandbox_lock = threading.Lock()
        """Held while a song is archived into the sandbox folder, and (for good) once the folder is removed."""
        self._removed: Path | None = None
        self._removed_once = False
        self._extras: Path | None = None
        self._closed = False
        close_at_exit(self)  # a workspace never closed still removes its throwaway folders at exit

    def __repr__(self) -> str:
        return f"WorkspaceArchive(chosen={self.chosen!r}, archivers={len(self._archivers)}, closed={self._closed})"

    def choose(self, directory: str | Path | bool | None) -> None:
        """Where this workspace archives (as `%config MusicGen.archive_dir`): a path, False (off) or None (default)."""
        self.chosen = None if directory is None or directory is True or directory == "" else directory

    def directory_for(self, client: _Core, choice: Any = True) -> Path | None:
        """The directory a client archives to, or None when archiving is off.

        `choice` (the client's `archive=`) wins: False is off, a path is used as given. Otherwise the sandbox gets
        this workspace's throwaway folder, and a real service `choose()`, then MUSICGEN_ARCHIVE, then the default.
        """
        if choice is False:
            return None
        if choice not in (True, None):
            return Path(choice).expanduser()
        if client.settings.is_embedded_sandbox:  # known by identity (the one rule), never by host
            return self.sandbox_dir()
        if self.chosen is not None:
            return None if self.chosen is False else Path(self.chosen).expanduser()
        env = os.environ.get(ENV_ARCHIVE, "").strip()
        if env.lower() in OFF:
            return None
        return Path(env).expanduser() if env else default_archive_dir()

    def sandbox_dir(self) -> Path:
        """This workspace's throwaway folder for sandbox songs (never the user's archive), removed on `close()`."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox = Path(tempfile.mkdtemp(prefix="ipymusicgen-sandbox-songs-"))
            return self._sandbox

    @contextlib.contextmanager
    def archiving_into(self, directory: Path) -> Iterator[bool]:
        """Whether a song may be archived into `directory` now (False once the sandbox folder is removed)."""
        if self._sandbox is None or directory != self._sandbox:
            yield True
            return
        if self._removed == directory or not self._sandbox_lock.acquire(timeout=SANDBOX_EXIT_WAIT):
            yield False
            return
        try:
            yield directory.is_dir()
        finally:
            self._sandbox_lock.release()

    def extras_file(self) -> Path:
        """A file of this workspace's own for the paid extras of clients that keep no journal, removed on close."""
        with self._lock:
            if self._extras is None:
                self._extras = Path(tempfile.mkdtemp(prefix="ipymusicgen-extras-"))
            return self._extras / "extras.sqlite3"

    def attach(
        self, client: _Core, choice: Any = True, downloader: MusicClient | Callable[[], MusicClient] | None = None
    ) -> Archiver | None:
        """Give a client its archiver (a record listener). Cheap: nothing is opened until a song arrives."""
        if choice is False:
            return None
        archiver = Archiver(client, choice, downloader, home=self)
        client.add_record_listener(archiver)
        client.add_resume_listener(archiver.retry)  # every resume(), whatever its face or `wait`, retries failures
        with self._lock:
            if self._closed:
                archiver.stop()  # a closed workspace's late client archives nothing
            self._archivers.add(archiver)
        return archiver

    def archiver_of(self, client: _Core) -> Archiver | None:
        """The archiver following `client` (None: it archives nothing, or is not this workspace's)."""
        with self._lock:
            return next((a for a in self._archivers if a.client is client), None)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop this workspace's archivers (each finishes the song in hand, bounded), close their connections, and
        remove its throwaway folders. Closing twice is harmless."""
        with self._lock:
            self._closed = True
            archivers = list(self._archivers)
        for archiver in archivers:
            archiver.stop()  # all told first, so they wind down together
        for archiver in archivers:
            with contextlib.suppress(Exception):
                archiver.close()
        with self._lock:
            sandbox = self._sandbox if self._sandbox != self._removed else None
            self._removed, self._extras, extras = self._sandbox, None, self._extras
        if sandbox is not None:
            if not self._removed_once:  # the lock is kept for good: nothing more lands there
                self._sandbox_lock.acquire(timeout=SANDBOX_EXIT_WAIT)
            self._removed_once = True
            shutil.rmtree(sandbox, ignore_errors=True)
        if extras is not None:
            shutil.rmtree(extras, ignore_errors=True)
