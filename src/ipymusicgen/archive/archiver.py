"""Keep every finished song: download its final MP3 (and cover) to the archive, tagged, off the polling thread.

A client's `Archiver` listens to its polling rounds (`add_record_listener`); records are handed to a worker
thread (`lifecycle.QueueWorker`) that indexes them for the library and archives the ones that became complete.
The journal's file holds what was archived (its `Database`'s library, given by the client's wiring: the workspace's
own for its file), so archiving is idempotent and a failure is retried
on the next polling round of a new client, every `resume()` (the client's resume hook, `add_resume_listener`) or
library open. Each archiver belongs to a workspace's archive (`workspace_archive.WorkspaceArchive`, reached from a
client through its wiring): where it archives (the embedded sandbox: a throwaway folder of the workspace's) and
whom it tells (the workspace's `events`) are that workspace's.

Files: `<title> [<first 8 of id>].mp3`, written to a hidden file and renamed when downloaded and tagged.
Tags (ID3v2.4): TIT2 title, TCON style, USLT lyrics, TDRC date, APIC cover when it is a raster image (the
sandbox's SVG covers are kept beside the MP3 but not embedded: ID3 players show only PNG/JPEG/GIF/WebP),
TXXX "ipymusicgen:task_id" / "ipymusicgen:model" / "ipymusicgen:action" / "ipymusicgen:request" (JSON).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client.downloads import safe_filename, unique_path
from ..lifecycle import QueueWorker
from .sniff import NotAudioError, check_audio, head_of, image_suffix
from .waveform import decode_cap

if TYPE_CHECKING:
    from ..client.faces import MusicClient, _Core
    from ..storage.database import Database
    from ..storage.library import LibraryStore
    from .workspace_archive import WorkspaceArchive

ENV_ARCHIVE = "MUSICGEN_ARCHIVE"
RASTER_IMAGES = types.MappingProxyType(
    {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}
)
TAG_PREFIX = "ipymusicgen:"
TITLE_CHARS, TITLE_BYTES = 100, 200
"""A title's share of a file name, so " [<id>].mp3" always fits after it (downloads.safe_filename bounds)."""
IDLE_SECONDS = 2.0
"""The worker exits (closing its connections) after this long with nothing to do; the next record restarts it."""
HANDED_MAX = 10_000
"""How many songs' last records an archiver remembers to know a poll's record as one it handled already."""


def default_archive_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("ipymusicgen", appauthor=False)) / "songs"


def archive_of(client: _Core) -> WorkspaceArchive | None:
    """The workspace archive a client was given by its wiring (its workspace's, or the default wiring's for a client
    made by hand); None for a wiring that archives nothing."""
    return getattr(client.wiring, "archive", None)


def archiver_of(client: _Core) -> Archiver | None:
    """The archiver following `client`, found through the client's own wiring (no registry of the process)."""
    home = archive_of(client)
    return home.archiver_of(client) if home is not None else None


def archive_dir_for(client: _Core, choice: Any = True) -> Path | None:
    """The directory `client` archives to (`WorkspaceArchive.directory_for`), or None when archiving is off."""
    home = archive_of(client)
    return home.directory_for(client, choice) if home is not None else None


@dataclass(frozen=True)
class SongInfo:
    """What the archive needs of a song, read from the journal (so a retry needs no record)."""

    id: str
    title: str | None
    style: str | None
    lyrics: str | None
    audio_url: str | None
    cover_url: str | None
    created_at: float
    model: str | None
    action: str | None
    request: dict[str, Any]
    archive_path: str | None
    version: int = 1
    tries: int = 0
    """Archive attempts so far: a retry asks the service for a fresh URL first."""
    duration_s: float | None = None

    def file_name(self, suffix: str) -> str:
        """`<title> [<first 8 of id>]<suffix>`: the title made safe and bounded on its own, so the id always
        survives, and the id reduced to safe characters (it is server text too)."""
        tag = re.sub(r"[^A-Za-z0-9_-]", "_", self.id[:8]) or "song"
        title = safe_filename(self.title, "", fallback="untitled")[:TITLE_CHARS]
        title = title.encode()[:TITLE_BYTES].decode("utf-8", "ignore").rstrip(" .") or "untitled"
        return safe_filename(f"{title} [{tag}]", suffix)


def song_info(store: LibraryStore, task_id: str) -> SongInfo | None:
    r = store.archive_source(task_id)
    if r is None:
        return None
    try:
        request = json.loads(r["payload"] or "{}")
    except ValueError:
        request = {}
    return SongInfo(
        r["id"], r["title"], r["style"], r["lyrics"], r["audio_url"], r["cover_url"], r["created_at"],
        r["model"], r["action"], request if isinstance(request, dict) else {}, r["archive_path"],
        int(r["version"] or 1), int(r["archive_tries"] or 0), r["duration_s"],
    )  # fmt: skip


def write_tags(path: Path, song: SongInfo, cover: Path | None) -> None:
    """ID3v2.4 tags that say how the song was made, so a file found years later still tells."""
    from mutagen.id3 import APIC, ID3, TCON, TDRC, TIT2, TXXX, USLT, ID3NoHeaderError

    try:
        tags = ID3(path)
    except ID3NoHeaderError:
        tags = ID3()
    if song.title:
        tags.setall("TIT2", [TIT2(encoding=3, text=song.title)])
    if song.style:
        tags.setall("TCON", [TCON(encoding=3, text=song.style)])
    if song.lyrics:
        tags.setall("USLT", [USLT(encoding=3, lang="eng", desc="", text=song.lyrics)])
    tags.setall("TDRC", [TDRC(encoding=3, text=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(song.created_at)))])
    model = song.model or "(service default)"
    extra = {"task_id": song.id, "model": model, "action": song.action or "", "request": song.request}
    for name, value in extra.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        tags.setall(f"TXXX:{TAG_PREFIX}{name}", [TXXX(encoding=3, desc=TAG_PREFIX + name, text=text)])
    if cover is not None and cover.suffix.lower() in RASTER_IMAGES:
        data = cover.read_bytes()
        tags.setall("APIC", [APIC(encoding=3, mime=RASTER_IMAGES[cover.suffix.lower()], type=3, desc="", data=data)])
    tags.save(path, v2_version=4)


def task_id_tag(path: Path) -> str | None:
    """The task id an archived file says it holds (TXXX ipymusicgen:task_id), if any."""
    from mutagen.id3 import ID3, ID3NoHeaderError

    try:
        frames = ID3(path).getall(f"TXXX:{TAG_PREFIX}task_id")
    except (ID3NoHeaderError, OSError):
        return None
    return str(frames[0].text[0]) if frames and frames[0].text else None


STAGING_PREFIX = ".ipymusicgen-archive-"
STAGING_OWNER = "owner.json"


def _staging_dir(directory: Path, swept: set[Path] | None = None) -> Path:
    """A hidden folder for one song's download, naming its process; the first in a directory per workspace
    (`swept`: the folders done already; None: every time) also removes those a dead process left (kill -9
    mid-download), so no half file outlives a re-run."""
    from ..storage.owner import Owner

    directory.mkdir(parents=True, exist_ok=True)
    if swept is None or directory not in swept:
        if swept is not None:
            swept.add(directory)
        for old in directory.glob(STAGING_PREFIX + "*"):
            with contextlib.suppress(Exception):
                owner = json.loads((old / STAGING_OWNER).read_text())
                if not Owner(str(owner["host"]), int(owner["pid"]), owner.get("started")).is_alive():
                    shutil.rmtree(old, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory))
    me = Owner.current()
    (staging / STAGING_OWNER).write_text(json.dumps({"host": me.host, "pid": me.pid, "started": me.started}))
    return staging


def _place(staged: Path, directory: Path, name: str, task_id: str) -> Path:
    """Move a finished file to its name; replace a file of the same song (idempotent), never another's."""
    target = directory / name
    if target.exists() and not (target.suffix == ".mp3" and task_id_tag(target) == task_id):
        target = unique_path(directory, name)
    os.replace(staged, target)
    return target


def fresh_url(downloader: MusicClient, song: SongInfo) -> str | None:
    """The song's audio URL asked anew (URLs expire): a task query for v1, a song query for v2."""
    try:
        record = downloader.query_v2(song.id) if song.version == 2 else downloader.tasks([song.id])[0]
    except Exception:  # the stored URL is tried instead; the download's own error then says why
        return None
    return record.audio_url or None


def archive_song(
    downloader: MusicClient, store: LibraryStore, directory: Path, task_id: str, swept: set[Path] | None = None
) -> Path:
    """Download, check, tag and place one complete song (and its cover); record path, size and peaks. Idempotent.

    What arrived is checked (`sniff.check_audio`): an HTML page or an empty body is an archive error, not the
    song, and a retry asks the service for a fresh URL. Files are named by role: the song by its audio format,
    the cover by its image format; a cover that is not an image is not kept.
    """
    song = song_info(store, task_id)
    if song is None:
        raise LookupError(f"{task_id} is not in the journal")
    if song.archive_path and Path(song.archive_path).is_file():
        return Path(song.archive_path)
    url = (fresh_url(downloader, song) if song.tries else None) or song.audio_url
    if not url:
        raise ValueError(f"{task_id} has no audio URL to archive")
    directory.mkdir(parents=True, exist_ok=True)
    staging = _staging_dir(directory, swept)
    try:
        staged = downloader.download(url, staging / "song")  # the client's download: its size limit holds
        suffix = check_audio(staged)
        cover = _staged_cover(downloader, song, staging / "cover")
        if suffix == ".mp3":
            write_tags(staged, song, cover)
        peaks, note = song_peaks(staged, song.duration_s)
        placed_cover = _place(cover, directory, song.file_name(cover.suffix), task_id) if cover else None
        placed = _place(staged, directory, song.file_name(suffix), task_id)
        store.archived(task_id, placed, placed.stat().st_size, peaks, cover=placed_cover, note=note)
        return placed
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _staged_cover(downloader: MusicClient, song: SongInfo, folder: Path) -> Path | None:
    """The cover, renamed by what its bytes are; None when missing, failed or not an image (never the song's name)."""
    if not song.cover_url:
        return None
    with contextlib.suppress(Exception):  # a missing cover never costs the song
        staged = downloader.download(song.cover_url, folder)
        suffix = image_suffix(head_of(staged))
        if suffix is None:
            return None
        return staged.rename(staged.with_name("cover" + suffix))
    return None


def song_peaks(path: Path, reported_seconds: float | None) -> tuple[Any, str | None]:
    """Peaks of the song, decoded as a bounded stream; (None, why) when it cannot or will not be drawn."""
    from .waveform import DecodeCapError, stream_peaks

    try:
        return stream_peaks(path, max_seconds=decode_cap(reported_seconds)), None
    except DecodeCapError as exc:
        return None, str(exc)
    except Exception:  # a file the decoder cannot read is still the paid song: kept, drawn without peaks
        return None, None


def archive_wav(task_id: str, url: str | None = None, *, client: MusicClient) -> Path:
    """Archive the WAV rendering of a song beside its MP3 (`generate_wav` is asked when no URL is given)."""
    archiver = archiver_of(client)
    journal_path = archiver.journal_path if archiver is not None else None
    if archiver is None or journal_path is None:
        raise RuntimeError("This client does not archive (no journal or archive=False).")
    database = client.wiring.database_at(journal_path)  # the file's, owned by the wiring: used, never closed here
    return _archive_wav(client, archiver, database.library, task_id, url)


def _archive_wav(client: MusicClient, archiver: Archiver, store: LibraryStore, task_id: str, url: str | None) -> Path:
    song = song_info(store, task_id)
    if song is None:
        raise LookupError(f"{task_id} is not in the journal")
    if url is None:
        url = client.generate_wav(store.service_song_id(task_id) or task_id)
    directory = archiver.directory
    if directory is None:
        raise RuntimeError("This client does not archive (archiving is off).")
    staging = _staging_dir(directory, archiver.home.swept)
    try:
        staged = client.download(url, staging)
        if check_audio(staged) != ".wav":  # a page (NotAudioError), or other audio: never kept, never over the MP3
            raise NotAudioError("the WAV's URL answered audio that is not a WAV; the song's files are left as they are")
        placed = _place(staged, directory, song.file_name(".wav"), task_id)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    store.wav_archived(task_id, placed)
    return placed


class Archiver(QueueWorker):
    """Archives a client's finished songs on a worker thread; the polling thread only enqueues. `home`: the
    workspace archive it belongs to (where it archives, whom it tells)."""

    thread_name = "ipymusicgen-archiver"
    idle_seconds = IDLE_SECONDS

    def __init__(
        self,
        client: _Core,
        choice: Any = True,
        downloader: MusicClient | Callable[[], MusicClient] | None = None,
        *,
        home: WorkspaceArchive,
    ) -> None:
        super().__init__()
        self.client = client
        self.choice = choice
        self.home = home
        self._download_with = downloader
        self.followers: list[Callable[[Path | None, str, Path], Any]] = []
        """Called (journal path, task id, file) after each song is kept: the wiring adds the analysis here."""
        self._database: Database | None = None
        """The journal file's `Database` (its wiring's), held while the worker runs: the library is its."""
        self._downloader_in_use: tuple[MusicClient, bool] | None = None
        self._retried = False
        self.errors: dict[str, str] = {}
        self.archived: dict[str, Path] = {}
        self._handed: dict[str, Any] = {}
        """The last record handed over for each song (oldest first, at most `HANDED_MAX`): see `_news`."""
        self._closed = False

    def __repr__(self) -> str:
        return f"Archiver(directory={str(self.directory) if self.directory else None!r})"

    def _release(self) -> None:
        """Let go of the journal file's `Database` for good (its owner, the wiring, closes it)."""
        with self._lock:
            self._closed = True
            self._database = None

    @property
    def directory(self) -> Path | None:
        return self.home.directory_for(self.client, self.choice)

    @property
    def journal_path(self) -> Path | None:
        journal = self.client.journal
        path = getattr(journal, "file", None) or getattr(journal, "path", None)  # the file opened, if it says
        return Path(path) if path else None

    @property
    def store(self) -> LibraryStore | None:
        """The library of this client's journal file: its `Database`'s, given by the client's wiring (the
        workspace's own for its file), asked when first needed and let go when the worker ends."""
        with self._lock:
            if self._database is None and not self._closed and self.journal_path is not None:
                self._database = self.client.wiring.database_at(self.journal_path)
            return self._database.library if self._database is not None else None

    # -- what the polling thread calls (cheap) -------------------------------------------------------

    def __call__(self, records: Iterable[Any]) -> None:
        records = self._news(records)
        if not records or self.journal_path is None:
            return
        first = not self._retried
        self._retried = True
        self._put(*([("retry", None)] if first else []), ("records", records))

    def _news(self, records: Iterable[Any]) -> list[Any]:
        """The records with something to do: not the same record again of a song this archiver has kept (its file
        still there) while no view listens for the archive's word. An agent's every `get_songs` polls afresh, so
        each finished song arrives on every call; re-indexing it, looking it up and re-reading its peaks only to
        announce it to no one was most of that call's cost."""
        records = list(records)
        listening = self.home.events.listening
        with self._lock:
            fresh = records if listening else [r for r in records if not self._handled_before(r)]
            for record in records:
                self._handed.pop(record.id, None)
                self._handed[record.id] = record
            while len(self._handed) > HANDED_MAX:
                del self._handed[next(iter(self._handed))]
        return fresh

    def _handled_before(self, record: Any) -> bool:
        kept = self.archived.get(record.id)
        return kept is not None and self._handed.get(record.id) == record and kept.is_file()

    def retry(self) -> None:
        """Archive complete songs that are not yet (never tried, or failed before)."""
        if self.journal_path is not None:
            self._put(("retry", None))

    def wait_archived(self, records: Iterable[Any], timeout: float) -> dict[str, Path | str | None]:
        """Archive these records' complete songs now (at once if they are already) and wait, at most `timeout`
        seconds, until each is kept or its archive failed: each id's file, why it failed, or None (not yet).

        The records go to the worker again, then a fence: once the worker passes the fence, every song before
        it has been tried (archiving is idempotent, so a song already kept costs one lookup). A stopped archiver
        (its workspace closed) takes nothing: each id is None.
        """
        complete = [r for r in records if getattr(r.state, "value", r.state) == "complete"]
        if complete and self.journal_path is not None:
            fence = threading.Event()
            if not self._put(("records", complete), fence):
                return {r.id: None for r in complete}
            fence.wait(timeout)
            if not fence.is_set():
                return {r.id: None for r in complete}
        return {r.id: self.archived.get(r.id) or self.errors.get(r.id) for r in complete}

    # -- the worker ----------------------------------------------------------------------------------

    def _failed(self, exc: Exception) -> None:
        self.errors["*"] = self.client.redact(f"{type(exc).__name__}: {exc}")

    def _ended(self) -> None:
        """The thread ends (idle or stopped): the downloader it made closes, and the `Database` is let go."""
        made, self._downloader_in_use = self._downloader_in_use, None
        if made is not None and made[1]:
            made[0].close()
        with self._lock:
            self._database = None

    def _handle(self, item: tuple[str, Any]) -> None:
        if self._downloader_in_use is None:
            self._downloader_in_use = self._downloader()
        kind, payload = item
        self._archive(kind, payload, self._downloader_in_use[0])

    def _downloader(self) -> tuple[MusicClient, bool]:
        """The client to download with, and whether this worker made it (and so closes it when idle).

        The client it was given downloads (its size limit, timeouts and transport hold); a factory makes
        one when the client cannot be used from this thread (an async client's sync twin).
        """
        given = self._download_with
        if given is None:
            raise RuntimeError("This archiver was given no client to download with.")
        if callable(given) and not hasattr(given, "download"):
            return given(), True
        return given, False  # type: ignore[return-value]

    def _kept_before(self, store: LibraryStore, task_id: str) -> bool:
        """Whether the song's file was kept before (by this archiver or another process): then its followers
        (the analysis) ran when it was kept, and a later poll of the song must not run them again."""
        done = self.archived.get(task_id)
        if done is not None:
            return done.is_file()
        known = song_info(store, task_id)
        return bool(known and known.archive_path and Path(known.archive_path).is_file())

    def _archive(self, kind: str, payload: Any, downloader: MusicClient) -> None:
        store = self.store
        if store is None:
            return
        if kind == "records":
            store.index_records(payload)
            ids = [r.id for r in payload if getattr(r.state, "value", r.state) == "complete"]
        else:
            store.sync()
            hosts = {self.client.settings.base_url, self.client.settings.v2_base_url}
            ids = store.to_archive(hosts)
        directory = self.directory
        if directory is None:
            return
        events = self.home.events
        for task_id in ids:
            if self._stopping.is_set():
                return
            kept_before = self._kept_before(store, task_id)
            try:
                with self.home.archiving_into(directory) as allowed:
                    if not allowed:
                        return
                    self.archived[task_id] = archive_song(downloader, store, directory, task_id, self.home.swept)
                self.errors.pop(task_id, None)
            except Exception as exc:  # recorded, shown and retried; never raised into polling
                message = self.client.redact(f"{type(exc).__name__}: {exc}")
                self.errors[task_id] = message
                store.archive_failed(task_id, message)
                events.announce(task_id, None, None, message, journal=self.journal_path)
            else:
                events.announce(task_id, self.archived[task_id], *_stored(store, task_id), journal=self.journal_path)
                if kept_before:
                    continue  # followed when it was kept (by whichever process kept it): not measured again
                for follow in list(self.followers):
                    with contextlib.suppress(Exception):  # a follower's trouble never stops the archive
                        follow(self.journal_path, task_id, self.archived[task_id])


def _stored(store: LibraryStore, task_id: str) -> tuple[list[list[float]] | None, str | None]:
    """An archived song's peaks and its archive note (why it has no waveform), as stored."""
    from ..storage.library import unpack_peaks

    stored = store.stored_peaks(task_id)
    return (unpack_peaks(stored[0]), stored[1]) if stored is not None else (None, None)


def archive_label(path: Path | None, error: str | None) -> str:
    """What a song card says about the archive: the file's name (and a note), or why it is not archived yet."""
    if path is not None:
        return f"archived: {path.name}" + (f" ({error[:160]})" if error else "")
    return f"not archived yet ({(error or 'unknown error')[:160]}); retried on the next resume or library open"
