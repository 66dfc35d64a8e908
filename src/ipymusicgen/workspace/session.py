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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..client import wiring
from ..client.faces import AsyncMusicClient, MusicClient
from ..config import Settings, env_float
from ..lifecycle import at_exit
from .workspace import ClientWiring, Workspace

if TYPE_CHECKING:
    from ..lab.analysis import Analysis
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
        self.archive_dir: str | Path | bool | None = None
        """Where songs are archived (`set_archive_dir`), given to every workspace the session makes."""


_session = _Session()
DEFAULT_WIRING = ClientWiring()
"""The wiring of a client made by hand (`MusicClient(...)`): the default journal, archive and batches, and what
such clients' batches share on a key (the session's, apart from every workspace's own)."""
wiring.install(DEFAULT_WIRING)  # the one hook: the client layer cannot import its default wiring from up here


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
        at_exit(shutdown)  # the sandbox stops when the kernel or script ends
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
            at_exit(shutdown)  # watchers, the client, the journal and the sandbox close when the process ends
            current = settings()
            if current.has_key:
                _session.workspace = Workspace(current, client_settings=_client_settings)
            else:
                folder = tempfile.mkdtemp(prefix="ipymusicgen-sandbox-")
                journal = os.path.join(folder, "journal.sqlite3")
                _session.workspace = Workspace(
                    current, journal_path=journal, folder=folder, client_settings=_client_settings
                )
            if _session.archive_dir is not None:
                _session.workspace.archive.choose(_session.archive_dir)
        return _session.workspace


def set_archive_dir(directory: str | Path | bool | None) -> None:
    """Where this kernel archives songs (`%config MusicGen.archive_dir`): a path, False (off) or None (the default),
    for the current workspace, the ones the session makes later and clients made by hand."""
    with _session.lock:
        _session.archive_dir = directory
        DEFAULT_WIRING.archive.choose(directory)
        if _session.workspace is not None:
            _session.workspace.archive.choose(directory)


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
        at_exit(shutdown)
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


def watchers() -> tuple[Closable, ...]:
    """The widgets with background work that `shutdown()` will close, oldest first (a copy)."""
    with _session.lock:
        return tuple(_session.watchers)


def embedded_sandbox() -> Sandbox | None:
    """The sandbox the session started for itself (no key), or None; asking never starts one."""
    with _session.lock:
        return _session.sandbox


def reset() -> None:
    """`shutdown()`, then forget every `configure()` change and the archive folder: the session as a new process
    has it (a test's fixtures end with it)."""
    with _session.lock:
        shutdown()
        _session.overrides.clear()
        set_archive_dir(None)


def library(journal_path: str | Path | None = None) -> Library:
    """Open the library over the journal in use (or the one at `journal_path`), and retry any song whose archiving
    failed before."""
    return current_workspace().library() if journal_path is None else _library_at(journal_path)


def _library_at(journal_path: str | Path) -> Library:
    from ..song_library import Library  # the library and its song queries load on first use (figure 3)

    return Library(journal_path)


def analyze(song_or_path: Any) -> Analysis:
    """Measure a song: tempo (BPM), key and mode, loudness (LUFS), true peak, silence at both ends.

    A file path, or a record or task id the library has archived (its measures are then kept in the library,
    where `songs(bpm=(110, 130), key="A minor", lufs=(-16, -8))` finds them). Needs `ipymusicgen[analysis]`.
    """
    return current_workspace().analyze(song_or_path)


def waveform(song_or_path: Any, points: int | None = None) -> Any:
    """Peak envelope of a song (`archive.waveform`): an audio file path, or a record or task id the library has
    archived. A numpy array of shape (points, 2), min and max per bucket, in [-1, 1]."""
    return current_workspace().waveform(song_or_path, points)


def export(song_or_ids: Any, folder: str | Path, *, journal_path: str | Path | None = None) -> list[Path]:
    """Export songs as folders under `folder`: per song the tagged MP3 (and WAV/MP4 when made), the cover, the
    lyrics as text and `song.json` (request, lineage, cost estimated and measured apart, ratings, analysis), all
    read from the library in use (or the journal at `journal_path`). `song_or_ids`: a song, a task id or a list
    of them. Returns the song folders; nothing is asked of the service."""
    return current_workspace().export(song_or_ids, folder, journal_path=journal_path)


def make_extra(song_or_id: Any, kind: str, *, force: bool = False, client: MusicClient | None = None) -> Any:
    """A finished song's paid extra, made at most once and kept beside the song: `kind` is "wav", "mp4" or
    "vibe" (a singer id). Made before (any kernel on the journal, an agent): reused, nothing paid again. A
    request that may have been charged without an answer is not sent again unless `force=True`. Calling it is
    the consent (as `generate()` is); the card's button and `%musicgen_wav` ask first. Returns an `ExtraResult`
    (.state, .path, .value, .sent)."""
    return current_workspace().make_extra(song_or_id, kind, force=force, client=client)


def retry_archives() -> None:
    """Ask the shared client's archiver to archive complete songs not archived yet (never starts a sandbox)."""
    current_workspace().retry_archives()


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
