"""The current workspace: the one journal file, its `Database` and the shared client that magics, forms, watchers,
the command line and the agent server use in a process (`current_workspace()`). The notebook's views are built
over it by `ipymusicgen.widgets.ui.UI`, which takes it (this layer imports no UI).

With a key (MUSICGEN_API_KEY, `%musicgen_login` or `configure(api_key=...)`) it talks to the real
service; with none it starts an embedded sandbox on 127.0.0.1 and says so once, so a newcomer hears
music without an account.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..archive.archiver import archiver_of
from ..archive.waveform import DEFAULT_POINTS, song_path, task_id_of
from ..archive.waveform import waveform as archive_waveform
from ..client.faces import AsyncMusicClient, MusicClient
from ..config import Settings, env_float
from ..lifecycle import at_exit
from .workspace import Workspace

if TYPE_CHECKING:
    from ..lab.analysis import Analysis
    from ..lab.grid import Grid
    from ..sandbox import Sandbox
    from ..song_library import Library
    from ..storage.journal import Journal

SANDBOX_NOTICE = "sandbox mode: songs are synthesized locally; set MUSICGEN_API_KEY for the real service"
ENV_STAGE_SECONDS = "MUSICGEN_SANDBOX_STAGE_SECONDS"
ENV_SONG_SECONDS = "MUSICGEN_SANDBOX_SONG_SECONDS"


class _Session:
    """Process-wide state behind a lock: settings overrides, the current workspace, the sandbox."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.overrides: dict[str, Any] = {}
        self.workspace: Workspace | None = None
        """The journal file in use with its client; a sandbox's throwaway one lives in a temp folder it removes."""
        self.sandbox: Sandbox | None = None
        self.notice_shown = False
        self.watchers: list[Closable] = []


_session = _Session()


def settings() -> Settings:
    """Effective settings: environment, then anything set with `configure()`."""
    with _session.lock:
        return Settings.from_env(**_session.overrides)


def configure(**changes: Any) -> None:
    """Change settings for this kernel (as `%config MusicGen.x = ...` does); the client is rebuilt."""
    with _session.lock:
        _session.overrides.update(changes)
        if {"api_key", "journal_path"} & changes.keys():
            _close_journal()
        elif _session.workspace is not None:
            _session.workspace.close_client()  # rebuilt with the new settings on next use


def set_api_key(key: str) -> None:
    """Use a key for this kernel only: kept in memory, never written to the notebook."""
    configure(api_key=key)


def in_sandbox() -> bool:
    return not settings().has_key


def _start_sandbox() -> Sandbox:
    from ..sandbox import Sandbox

    if _session.sandbox is None:
        stage = env_float(ENV_STAGE_SECONDS) or 3.0  # a bad value is one line naming the variable
        song = env_float(ENV_SONG_SECONDS) or 30.0
        sandbox = Sandbox(stage_seconds=stage, song_seconds=song)
        sandbox.start()
        _session.sandbox = sandbox
    if not _session.notice_shown:
        _session.notice_shown = True
        print(SANDBOX_NOTICE)
    return _session.sandbox


def current_workspace() -> Workspace:
    """The workspace in use: the user's durable journal file for a key, a throwaway one for the session's own
    sandbox (which starts when its first client is built, not before).

    Decided by identity, never by host: with no key the session talks to the sandbox it started
    itself, whose songs cost nothing and stay out of the user's journal (even if `journal_path` is
    set); any keyed service, a local proxy on 127.0.0.1 included, is journalled.
    """
    with _session.lock:
        if _session.workspace is None:
            current = settings()
            if current.has_key:
                _session.workspace = Workspace(current, client_settings=_client_settings)
            else:
                folder = tempfile.mkdtemp(prefix="ipymusicgen-sandbox-")
                journal = os.path.join(folder, "journal.sqlite3")
                _session.workspace = Workspace(
                    current, journal_path=journal, folder=folder, client_settings=_client_settings
                )
        return _session.workspace


def get_journal() -> Journal:
    """The current workspace's journal: the user's durable one for a key, a throwaway one for the session's own
    sandbox."""
    return current_workspace().journal


def _close_journal() -> None:
    """Close the workspace (its client, its file); the sandbox's throwaway one leaves no temp folder behind."""
    if _session.workspace is not None:
        _session.workspace.close()
        _session.workspace = None


def _client_settings() -> Settings:
    current = settings()
    if current.has_key:
        return current
    sandbox = _start_sandbox()
    return current.with_changes(
        api_key=sandbox.api_key, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, embedded_sandbox=True,
        **sandbox.engine_settings(),  # every engine is the sandbox's too: a sandbox client journals nothing
    )  # fmt: skip


def get_client() -> MusicClient:
    """The shared sync client: the real service with a key, else the embedded sandbox."""
    with _session.lock:
        return current_workspace().client


def get_async_client() -> AsyncMusicClient:
    """A new async client with the shared settings (async clients belong to one event loop)."""
    with _session.lock:
        return current_workspace().async_client()


class Closable(Protocol):
    """What the session asks of a registered widget (a watcher, a batch view): stop and let go."""

    def close(self) -> None: ...


def register_watcher(watcher: Closable) -> None:
    """Remember a widget with background work so `shutdown()` can close it (the session never imports the UI)."""
    with _session.lock:
        _session.watchers.append(watcher)


def unregister_watcher(watcher: Closable) -> None:
    """Forget a closed widget, so the session no longer holds it (and its records) in memory."""
    with _session.lock:
        _session.watchers[:] = [w for w in _session.watchers if w is not watcher]


def mark_notice_shown() -> None:
    """The user was already told the sandbox is in use (`%load_ext`'s line): its start stays quiet."""
    with _session.lock:
        _session.notice_shown = True


def current_client() -> MusicClient | None:
    """The shared client if one was made, without making one (so asking never starts a sandbox)."""
    with _session.lock:
        return _session.workspace.current_client() if _session.workspace is not None else None


def library(journal_path: str | Path | None = None) -> Library:
    """Open the library over the journal in use, and retry any song whose archiving failed before."""
    if journal_path is not None:
        from ..song_library import Library  # the library and its song queries load on first use (figure 3)

        return Library(journal_path)
    opened = current_workspace().library()
    retry_archives()
    return opened


def analyze(song_or_path: Any) -> Analysis:
    """Measure a song: tempo (BPM), key and mode, loudness (LUFS), true peak, silence at both ends.

    A file path, or a record or task id the library has archived (its measures are then kept in the library,
    where `songs(bpm=(110, 130), key="A minor", lufs=(-16, -8))` finds them). Needs `ipymusicgen[analysis]`.
    """
    from ..lab.analysis_worker import measure  # in a worker process: a crash in librosa spares the kernel

    task_id = task_id_of(song_or_path)
    opened = _songs() if task_id is not None else None
    path = song_path(song_or_path, find=_archived_finder(opened) if opened is not None else None)
    try:
        measures = measure(path)
    except (ValueError, OSError) as exc:  # not audio, past the cap, unreadable: the old numbers must not stand
        if opened is not None and task_id is not None:
            opened.store.analysis_failed(task_id, f"{type(exc).__name__}: {exc}")
        raise
    if opened is not None and task_id is not None:
        opened.store.analysed(task_id, measures.as_dict())
        measures = _with_asked(measures, opened, task_id)
    return measures


def _with_asked(measures: Analysis, opened: Library, task_id: str) -> Analysis:
    """The measures with what the song's request named ("128 bpm", "in D minor" in its style or prompt)."""
    import dataclasses

    from ..lab.adherence import asked_of

    try:
        song = opened.song(task_id)
    except KeyError:
        return measures
    asked = asked_of((song.style, song.prompt, song.title))
    return dataclasses.replace(measures, asked=asked) if asked else measures


def grid(
    base: dict[str, Any] | None = None,
    *,
    repeat: int = 1,
    name: str | None = None,
    client: MusicClient | None = None,
    view: Callable[[Grid], Any] | None = None,
    **axes: Any,
) -> Grid:
    """A prompt grid on the shared client: `grid({"action": "auto"}, style=["lo-fi", "jazz"], mv=["MFV2.0",
    "MFV3.0"], repeat=2)`. Shows each cell's estimate and the total; `.run()` sends it as one named batch; `view`
    draws it in a notebook (the layers above give one)."""
    from ..lab.grid import Grid

    return Grid(client or get_client(), base, axes, repeat=repeat, name=name, view=view)


def waveform(song_or_path: Any, points: int = DEFAULT_POINTS) -> Any:
    """Peak envelope of a song (`archive.waveform`): an audio file path, or a record or task id the library has
    archived. A numpy array of shape (points, 2), min and max per bucket, in [-1, 1]."""
    return archive_waveform(song_or_path, points, find=lambda task_id: _archived_finder(_songs())(task_id))


ARCHIVE_GRACE_SECONDS = 10.0
"""How long `waveform(id)` / `analyze(id)` wait for a song whose archive is on its way (it lands a moment after
the song finishes; longer on a busy machine) before saying there is no file."""


def _archived_finder(opened: Library) -> Callable[[str], Path | None]:
    """The library's file for a song id; when there is none yet, wait (at most ARCHIVE_GRACE_SECONDS) for the shared
    client's archiver to finish what it has in hand (`_songs()` just asked it to retry songs not kept), then look
    again: a song being archived right now is found, an unknown id is refused once the archiver is idle."""

    def find(task_id: str) -> Path | None:
        found = opened.archived_path(task_id)
        client = current_client() if found is None else None
        archiver = archiver_of(client) if client is not None else None
        if archiver is not None:
            archiver.join(ARCHIVE_GRACE_SECONDS)
            found = opened.archived_path(task_id)
        return found

    return find


def _songs() -> Library:
    """The current workspace's own library, to look songs up without opening one per call; a song whose archive
    failed before is retried, as `library()` does."""
    opened = current_workspace().songs
    retry_archives()
    return opened


def retry_archives() -> None:
    """Ask the shared client's archiver to archive complete songs not archived yet (never starts a sandbox)."""
    client = current_client()
    if client is None and settings().has_key:
        client = get_client()
    archiver = archiver_of(client) if client is not None else None
    if archiver is not None:
        archiver.retry()


def shutdown() -> None:
    """Stop watchers, the client and the embedded sandbox (used by `%unload_ext`)."""
    with _session.lock:
        for watcher in list(_session.watchers):  # close() unregisters, so walk a copy
            watcher.close()
        _session.watchers.clear()
        if _session.workspace is not None:
            _session.workspace.close_client()
        if _session.sandbox is not None:
            _session.sandbox.stop()
            _session.sandbox = None
        _close_journal()
        _session.notice_shown = False


at_exit(shutdown)  # watchers, the client, the journal and the sandbox close when the kernel or script ends
