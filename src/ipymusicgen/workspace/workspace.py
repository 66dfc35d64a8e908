"""The composition root: a `Workspace` per journal file, and the one place that wires a client to its journal,
archiver and batches.

The client layer imports nothing above itself; what it needs from above is passed in (`ClientWiring`, given to
each client a workspace builds; the package installs one as the default for clients made by hand). Everything
that needs "a client with everything attached" (the session's current workspace, magics, widgets, the CLI, an
agent server) gets it from a `Workspace`, or `build_client` / `build_async_client`, so the wiring is never copied.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client import wiring
from ..client.faces import AsyncMusicClient, MusicClient

if TYPE_CHECKING:
    from ..batch import Batch
    from ..client.core import _Core
    from ..config import Settings
    from ..song_library import Library
    from ..storage.database import Database
    from ..storage.journal import Journal


class ClientWiring:
    """What every client gets from the layers above it: the SQLite journal, an archiver, the batch engine."""

    def open_journal(self, settings: Settings) -> Journal:
        from ..storage.journal import Journal

        return Journal(settings.journal_path)

    def attach(self, client: _Core, archive: Any) -> None:
        from ..archive.archiver import attach
        from ..lab.analyst import analyse_after_archive

        if archive is False:
            return
        if isinstance(client, MusicClient):
            archiver = attach(client, archive, downloader=client)  # the client it was given downloads (any thread)
        else:  # an async client belongs to its event loop: the archive's thread downloads with a sync twin
            settings = client.settings
            archiver = attach(
                client, archive, downloader=lambda: MusicClient(settings=settings, journal=False, archive=False)
            )
        if archiver is not None:
            archiver.followers.append(analyse_after_archive)  # each kept song measured (when the extra is there)

    def wait_archived(self, client: _Core, records: list[Any], timeout: float) -> dict[str, Any] | None:
        from ..archive.archiver import archiver_of

        archiver = archiver_of(client)
        if archiver is None or archiver.journal_path is None or archiver.directory is None:
            return None
        return archiver.wait_archived(records, timeout)

    def run_batch(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch:
        from ..batch import run_batch

        return run_batch(client, requests, **options)

    async def run_batch_async(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch:
        from ..batch import run_batch_async

        return await run_batch_async(client, requests, **options)


class WorkspaceWiring(ClientWiring):
    """A workspace's wiring: its clients' batches keep their rows in the workspace's `Database` (`db.batches`)
    rather than opening a store for the journal file of their own. A batch given a `store` keeps it, and a client
    whose journal is another file's (built by hand with this wiring) gets that file's store, as any client does."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _on_my_file(self, client: Any, options: dict[str, Any]) -> dict[str, Any]:
        journal_path = getattr(client.journal, "path", None)
        if "store" in options or journal_path is None or Path(journal_path).resolve() != self.db.path.resolve():
            return options
        return {**options, "store": self.db.batches}

    def run_batch(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch:
        return super().run_batch(client, requests, self._on_my_file(client, options))

    async def run_batch_async(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch:
        return await super().run_batch_async(client, requests, self._on_my_file(client, options))


DEFAULT_WIRING = ClientWiring()
wiring.install(DEFAULT_WIRING)  # the default of a client made by hand; a workspace passes its own


def build_client(
    settings: Settings, *, journal: Any = True, archive: Any = True, wiring: ClientWiring | None = None
) -> MusicClient:
    """A sync client with everything attached (the journal opens on first paid call, the archive listens)."""
    return MusicClient(settings=settings, journal=journal, archive=archive, wiring=wiring or DEFAULT_WIRING)


def build_async_client(
    settings: Settings, *, journal: Any = True, archive: Any = True, wiring: ClientWiring | None = None
) -> AsyncMusicClient:
    """An async client with everything attached; async clients belong to one event loop, so each caller gets one."""
    return AsyncMusicClient(settings=settings, journal=journal, archive=archive, wiring=wiring or DEFAULT_WIRING)


class Workspace:
    """One journal file's world, built at the top and passed down: the settings its clients use, the file's one
    `Database` (its journal, library, batches and extras), the shared client wired to them (the journal passed
    in, the archive and the analysis as its listeners, its batches on `db.batches`) and the libraries over it.
    Its UI factories (studio, lone watchers, grid and batch views) are `ipymusicgen.widgets.ui.UI(workspace)`:
    the widgets sit above this layer, so they take the workspace rather than the workspace importing them.

    `folder`: a throwaway folder the file lives in (the embedded sandbox's journal), removed on `close()`;
    `client_settings`: how the settings of a client are decided when one is built (the session's: the embedded
    sandbox it starts when there is no key), instead of `settings` as given.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        journal_path: str | Path | None = None,
        folder: str | Path | None = None,
        client_settings: Callable[[], Settings] | None = None,
    ) -> None:
        from ..storage.database import Database  # loads with the first workspace, not at `%load_ext` (figure 3)

        self.settings = settings
        self._client_settings = client_settings
        self.db = Database(journal_path if journal_path is not None else settings.journal_path)
        self.wiring = WorkspaceWiring(self.db)
        self.folder = Path(folder) if folder is not None else None
        self._lock = threading.RLock()
        self._client: MusicClient | None = None
        self._songs: Library | None = None

    def __repr__(self) -> str:
        return f"Workspace({str(self.db.path)!r})"

    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def journal(self) -> Journal:
        """The file's journal of paid attempts and tasks (the `Database`'s, shared by every client built here)."""
        return self.db.journal

    @property
    def client(self) -> MusicClient:
        """The shared sync client over this file, built on first use with the workspace's settings."""
        with self._lock:
            if self._client is None:
                self._refresh_settings()
                self._client = build_client(self.settings, journal=self.journal, wiring=self.wiring)
            return self._client

    def current_client(self) -> MusicClient | None:
        """The shared client if one was built, without building one."""
        with self._lock:
            return self._client

    def async_client(self) -> AsyncMusicClient:
        """A new async client over this file (async clients belong to one event loop, so each caller gets one)."""
        with self._lock:
            self._refresh_settings()
            return build_async_client(self.settings, journal=self.journal, wiring=self.wiring)

    def _refresh_settings(self) -> None:
        if self._client_settings is not None:
            self.settings = self._client_settings()

    def reconfigure(self, settings: Settings) -> None:
        """New settings for the clients built from now on (the shared one is closed and rebuilt on next use)."""
        with self._lock:
            self.close_client()
            self.settings = settings

    def library(self) -> Library:
        """A library over this file for the caller to keep and close (the file's one connection is shared)."""
        from ..song_library import Library

        return Library(self.db.path)

    @property
    def songs(self) -> Library:
        """The workspace's own library, opened (and brought up to date with the journal) once, for looking songs
        up again and again (`waveform()`, `analyze()`); it closes with the workspace."""
        with self._lock:
            if self._songs is None:
                self._songs = self.library()
            return self._songs

    def close_client(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def close(self) -> None:
        """Close the shared client and the file's concerns; a throwaway folder goes with them."""
        with self._lock:
            self.close_client()
            if self._songs is not None:
                self._songs.close()
                self._songs = None
            self.db.close()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
