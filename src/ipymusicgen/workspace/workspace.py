"""The composition root: a `Workspace` per journal file, and the one place that wires a client to its journal,
archiver and batches.

The client layer imports nothing above itself; what it needs from above is passed in (`ClientWiring`, given to
each client a workspace builds; the session module installs one as the default for clients made by hand).
Everything that needs "a client with everything attached" (the session's current workspace, magics, widgets, the
CLI, an agent server) gets it from a `Workspace`, so the wiring is never copied.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client.faces import AsyncMusicClient, MusicClient
from ..errors import MusicGenError

if TYPE_CHECKING:
    from ..archive.workspace_archive import WorkspaceArchive
    from ..batch import Batch
    from ..batch.key_activity import KeyActivity
    from ..client.core import _Core
    from ..config import Settings
    from ..lab.analysis import Analysis
    from ..lab.analyst import Analysts
    from ..lab.grid import Grid
    from ..song_library import Library
    from ..storage.batches import BatchStore
    from ..storage.database import Database
    from ..storage.journal import Journal

CLOSE_BATCHES_SECONDS = 30.0
"""How long closing a workspace waits for its stopped batches to follow the rows they already sent (their stores
close after them)."""
ARCHIVE_GRACE_SECONDS = 10.0
"""How long `waveform(id)` / `analyze(id)` wait for a song whose archive is on its way (it lands a moment after
the song finishes; longer on a busy machine) before saying there is no file."""


class ClientWiring:
    """What every client gets from the layers above it: the SQLite journal, an archiver, the batch engine, and
    what its batches share on a key (`keys`). Each wiring owns what it opens: the `Database` of each journal file
    its clients' batches, archivers, analysts and extras use, and an in-memory store for a client with no journal;
    `close()` closes them. The session's default wiring serves clients made by hand; a workspace has its own.

    A file's `Database` is held weakly: it lives while a user holds it or one of its stores (a batch its store, an
    archiver or analyst its worker's run), then goes, and its stores give the file back (`shared_connection`).
    Held for the wiring's life, the default wiring kept every journal file a hand-made client ever used open (three
    descriptors each: the file, -wal and -shm) until the process ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._databases: weakref.WeakValueDictionary[Path, Database] = weakref.WeakValueDictionary()
        self._memory: BatchStore | None = None
        self._keys: KeyActivity | None = None
        self._running: list[Batch] = []
        """Batches this wiring started that had not ended when the last one started (stopped by `close()`)."""
        self._archive: WorkspaceArchive | None = None
        self._analysts: Analysts | None = None

    @property
    def archive(self) -> WorkspaceArchive:
        """Where this wiring's clients archive, their archivers and the views' `events` (made on first need)."""
        with self._lock:
            if self._archive is None:
                from ..archive.workspace_archive import WorkspaceArchive

                self._archive = WorkspaceArchive()
            return self._archive

    @property
    def analysts(self) -> Analysts:
        """What measures the songs this wiring's archivers keep (made on first need)."""
        with self._lock:
            if self._analysts is None:
                from ..lab.analyst import Analysts

                self._analysts = Analysts(self.database_at)
            return self._analysts

    @property
    def keys(self) -> KeyActivity:
        """What the batches (and an agent server's calls) over this wiring's clients share on a key."""
        with self._lock:
            if self._keys is None:
                from ..batch.key_activity import KeyActivity  # the batch layer loads with the first batch

                self._keys = KeyActivity()
            return self._keys

    def database_at(self, path: str | Path) -> Database:
        """The `Database` of the file at `path` that this wiring's clients use (the same one while anyone holds it;
        still open at `close()`, closed then): where their batch rows, archive and paid extras are kept."""
        key = Path(path).resolve()
        with self._lock:
            found = self._databases.get(key)
            if found is None:
                from ..storage.database import Database

                self._databases[key] = found = Database(key)
            return found

    def batch_store(self, client: Any) -> BatchStore:
        """Where a batch of `client` keeps its rows: its journal file's store, or memory when it has no journal
        (this process only; a re-run in the same kernel is still safe, a restart forgets)."""
        journal = client.journal
        path = getattr(journal, "path", None) if journal is not None else None
        if path is not None:
            return self.database_at(path).batches
        with self._lock:
            if self._memory is None:
                from ..storage.batches import BatchStore

                self._memory = BatchStore(None)
            return self._memory

    def close(self) -> None:
        """Stop its archivers and analysts (removing their throwaway folders) and close the stores it opened."""
        self.stop_archiving()
        with self._lock:
            opened = list(self._databases.values())
            self._databases.clear()
            memory, self._memory = self._memory, None
        for database in opened:
            database.close()
        if memory is not None:
            memory.close()

    def open_journal(self, settings: Settings) -> Journal:
        """A hand-made client's journal: that of a `Database` of its own over the settings' file (nothing else of
        it opens), which the client closes with itself."""
        from ..storage.database import Database

        return Database(settings.journal_path).journal

    def attach(self, client: _Core, archive: Any) -> None:
        if archive is False:
            return
        if isinstance(client, MusicClient):  # the client it was given downloads (any thread)
            archiver = self.archive.attach(client, archive, downloader=client)
        else:  # an async client belongs to its event loop: the archive's thread downloads with a sync twin
            settings = client.settings
            archiver = self.archive.attach(
                client, archive, downloader=lambda: MusicClient(settings=settings, journal=False, archive=False)
            )
        if archiver is not None:
            archiver.followers.append(self.analysts.after_archive)  # each kept song measured (with the extra)

    def wait_archived(self, client: _Core, records: list[Any], timeout: float) -> dict[str, Any] | None:
        archiver = self.archive.archiver_of(client)
        if archiver is None or archiver.journal_path is None or archiver.directory is None:
            return None
        return archiver.wait_archived(records, timeout)

    def run_batch(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch:
        from ..batch import run_batch

        return self._started(run_batch(client, requests, **options))

    async def run_batch_async(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch:
        from ..batch import run_batch_async

        return self._started(await run_batch_async(client, requests, **options))

    def _started(self, batch: Batch) -> Batch:
        with self._lock:
            self._running = [b for b in self._running if not b.done]
            if not batch.done:
                self._running.append(batch)
        return batch

    def stop_archiving(self) -> None:
        """Stop its archivers and analysts (each finishes the song in hand, bounded) while the clients they download
        with are still open, and remove their throwaway folders; `close()` lets go of the rest."""
        with self._lock:
            archive, analysts = self._archive, self._analysts
        if archive is not None:
            archive.close()
        if analysts is not None:
            analysts.close()

    def stop_batches(self, timeout: float = CLOSE_BATCHES_SECONDS) -> None:
        """Make the batches still running leave (no row starts, the rows sent are followed no more: a re-run follows
        them) and wait, within `timeout` in all, for the creates being sent to answer: their stores close next."""
        with self._lock:
            running, self._running = [b for b in self._running if not b.done], []
        for batch in running:
            batch.leave()
        deadline = time.monotonic() + timeout
        for batch in running:
            with contextlib.suppress(Exception):  # a crash is the batch's to report (its `.error`)
                batch.wait(max(0.0, deadline - time.monotonic()))


class WorkspaceWiring(ClientWiring):
    """A workspace's wiring: its clients' batches and paid extras are kept in the workspace's `Database`
    (`db.batches`, `db.extras`) rather than stores of their own. A client whose journal is another file's (built
    by hand with this wiring) gets that file's, as any client does."""

    def __init__(self, db: Database) -> None:
        super().__init__()
        self.db = db

    def database_at(self, path: str | Path) -> Database:
        """The workspace's own `Database` for its file; another file's is opened by the wiring as for any client."""
        if Path(path).resolve() == self.db.path.resolve():
            return self.db
        return super().database_at(path)


def build_client(settings: Settings, *, journal: Any = True, archive: Any = True) -> MusicClient:
    """A sync client made by hand on the default wiring (the session's): a script's or a test's own client, not
    a workspace's (a `Workspace` builds its own over its `Database`)."""
    return MusicClient(settings=settings, journal=journal, archive=archive)


def build_async_client(settings: Settings, *, journal: Any = True, archive: Any = True) -> AsyncMusicClient:
    """An async client made by hand on the default wiring (see `build_client`)."""
    return AsyncMusicClient(settings=settings, journal=journal, archive=archive)


class Workspace:
    """One journal file's world, built at the top and passed down: the settings its clients use, the file's one
    `Database` (its journal, library, batches and extras), the shared client wired to them (the journal passed
    in, the archive and the analysis as its listeners, its batches on `db.batches`), what its batches share on a
    key (`keys`) and the libraries over it; `close()` closes what it made. The verbs of the package
    (`ipymusicgen.library()`, `analyze`, `waveform`, `grid`, `export`, `make_extra`) are its methods, called on
    the session's current workspace.
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
        self._closed = False

    def __repr__(self) -> str:
        return f"Workspace({str(self.db.path)!r}{', closed' if self._closed else ''})"

    def _open(self) -> None:
        """Refuse (in one line) what would open the file again after `close()`: a closed workspace stays closed."""
        if self._closed:
            raise MusicGenError(f"This workspace on {self.db.path} is closed; build a new Workspace to use the file.")

    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def journal(self) -> Journal:
        """The file's journal of paid attempts and tasks (the `Database`'s, shared by every client built here)."""
        return self.db.journal

    @property
    def keys(self) -> KeyActivity:
        """What this workspace's batches and its agent server's calls share on a key (overlaps, 429s, rows sent)."""
        return self.wiring.keys

    @property
    def archive(self) -> WorkspaceArchive:
        """Its archive: where its songs are kept, its clients' archivers, and the `events` its views subscribe to."""
        return self.wiring.archive

    @property
    def analysts(self) -> Analysts:
        """What measures the songs its archivers keep (stopped on `close()`)."""
        return self.wiring.analysts

    @property
    def client(self) -> MusicClient:
        """The shared sync client over this file, built on first use with the workspace's settings."""
        with self._lock:
            if self._client is None:
                self._open()
                self._refresh_settings()
                self._client = MusicClient(settings=self.settings, journal=self.journal, wiring=self.wiring)
            return self._client

    def current_client(self) -> MusicClient | None:
        """The shared client if one was built, without building one."""
        with self._lock:
            return self._client

    def async_client(self) -> AsyncMusicClient:
        """A new async client over this file (async clients belong to one event loop, so each caller gets one)."""
        with self._lock:
            self._open()
            self._refresh_settings()
            return AsyncMusicClient(settings=self.settings, journal=self.journal, wiring=self.wiring)

    def _refresh_settings(self) -> None:
        if self._client_settings is not None:
            self.settings = self._client_settings()

    def reconfigure(self, settings: Settings) -> None:
        """New settings for the clients built from now on (the shared one is closed and rebuilt on next use)."""
        with self._lock:
            self.close_client()
            self.settings = settings

    def library(self) -> Library:
        """A library over this file for the caller to keep and close (the file's one connection is shared); a
        song whose archiving failed before is retried."""
        from ..song_library import Library  # the library and its song queries load on first use (figure 3)

        self._open()
        opened = Library(self.db, events=self.archive.events)  # its views hear this workspace's archive, no other
        self.retry_archives()
        return opened

    @property
    def songs(self) -> Library:
        """The workspace's own library, opened (and brought up to date with the journal) once, for looking songs
        up again and again (`waveform()`, `analyze()`); it closes with the workspace."""
        with self._lock:
            self._open()
            if self._songs is None:
                self._songs = self.library()
            return self._songs

    def retry_archives(self) -> None:
        """Ask the shared client's archiver to archive complete songs not archived yet. A keyed workspace builds
        its client for it; one without a key (the session's sandbox, started by its first client) only asks a
        client already built."""
        from ..archive.archiver import archiver_of

        client = self.current_client()
        if client is None and self.settings.has_key and not self._closed:
            client = self.client
        archiver = archiver_of(client) if client is not None else None
        if archiver is not None:
            archiver.retry()

    def _found_songs(self) -> Library:
        """The workspace's own library, to look songs up without opening one per call (archives retried)."""
        opened = self.songs
        self.retry_archives()
        return opened

    def _archived(self, opened: Library) -> Callable[[str], Path | None]:
        """The library's file for a song id; when there is none yet, wait (at most ARCHIVE_GRACE_SECONDS) for the
        shared client's archiver to finish what it has in hand, then look again: a song being archived right now
        is found, an unknown id is refused once the archiver is idle."""
        from ..archive.archiver import archiver_of

        def find(task_id: str) -> Path | None:
            found = opened.archived_path(task_id)
            client = self.current_client() if found is None else None
            archiver = archiver_of(client) if client is not None else None
            if archiver is not None:
                archiver.join(ARCHIVE_GRACE_SECONDS)
                found = opened.archived_path(task_id)
            return found

        return find

    def _find_archived(self, task_id: str) -> Path | None:
        return self._archived(self._found_songs())(task_id)

    def analyze(self, song_or_path: Any) -> Analysis:
        """Measure a song (`ipymusicgen.analyze`); a song the library knows keeps its measures there."""
        import dataclasses

        from ..archive.waveform import song_path, task_id_of
        from ..lab.adherence import asked_of
        from ..lab.analysis_worker import measure  # in a worker process: a crash in librosa spares the kernel
        from ..lab.song_analysis import analyse_song

        task_id = task_id_of(song_or_path)
        opened = self._found_songs() if task_id is not None else None
        path = song_path(song_or_path, find=self._archived(opened) if opened is not None else None)
        if opened is None or task_id is None:
            return measure(path)
        try:  # with what the song's request named ("128 bpm", "in D minor" in its style or prompt, `--seconds 90`)
            song = opened.song(task_id)
        except KeyError:
            song = None
        wav = song.wav_path if song is not None and song.wav_path and Path(song.wav_path).is_file() else None
        measures = analyse_song(opened.store, task_id, path, wav=wav)  # kept whole: measured once per file
        if song is None:
            return measures
        asked = asked_of((song.style, song.prompt, song.title), seconds=song.asked_seconds)
        return dataclasses.replace(measures, asked=asked) if asked else measures

    def waveform(self, song_or_path: Any, points: int | None = None) -> Any:
        """Peak envelope of a song (`ipymusicgen.waveform`)."""
        from ..archive.waveform import DEFAULT_POINTS, waveform

        return waveform(song_or_path, points or DEFAULT_POINTS, find=self._find_archived)

    def grid(
        self,
        base: dict[str, Any] | None = None,
        *,
        repeat: int = 1,
        name: str | None = None,
        client: MusicClient | None = None,
        view: Callable[[Grid], Any] | None = None,
        **axes: Any,
    ) -> Grid:
        """A prompt grid on the shared client (`ipymusicgen.grid`); `view` draws it in a notebook."""
        from ..lab.grid import Grid

        return Grid(client or self.client, base, axes, repeat=repeat, name=name, view=view)

    def export(self, song_or_ids: Any, folder: str | Path, *, journal_path: str | Path | None = None) -> list[Path]:
        """Export songs as folders under `folder` (`ipymusicgen.export`), read from this workspace's library (or
        the one at `journal_path`)."""
        from ..archive.export import export_songs
        from ..song_library import Library

        with self.library() if journal_path is None else Library(journal_path) as opened:
            return export_songs(opened, song_or_ids, folder)

    def make_extra(self, song_or_id: Any, kind: str, *, force: bool = False, client: MusicClient | None = None) -> Any:
        """A finished song's paid extra, made at most once (`ipymusicgen.make_extra`)."""
        from ..archive.extras import make_extra

        task_id = song_or_id if isinstance(song_or_id, str) else getattr(song_or_id, "id", song_or_id)
        return make_extra(client or self.client, task_id, kind, force=force)

    def close_client(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def close(self) -> None:
        """Close the shared client, the libraries and stores it opened and the file's concerns; a throwaway folder
        goes with them."""
        self.wiring.stop_batches()  # before the client and the stores they use close (outside the lock: they
        self.wiring.stop_archiving()  # may build the shared client while they end); a download in hand finishes
        with self._lock:
            self._closed = True  # from here nothing opens the file again (the batches above have ended)
            self.close_client()
            if self._songs is not None:
                self._songs.close()
                self._songs = None
            self.wiring.close()
            self.db.close()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
