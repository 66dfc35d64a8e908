"""Export songs as folders a person can take anywhere: per song the tagged MP3 (and WAV/MP4 when they were made),
the cover, the lyrics as text and a JSON sidecar that says how the song was made.

Everything is read from the library (the journal's records, the archive's files); nothing is asked of the service,
so an export costs nothing and works offline. Titles are server text: folder and file names are made safe
(one path component, bounded, never hidden), and every file lands inside the song's folder (`export_folder`: one
folder per song, renamed to its final title when exported before; files written as new files renamed over their
names, so a planted link is replaced, never written through).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client.downloads import safe_filename
from .archiver import song_info
from .export_folder import LYRICS, SIDECAR, SongFolder, drop_stale, settle, song_folder
from .sniff import audio_suffix, image_suffix

if TYPE_CHECKING:
    from ..song_library import Library, LibrarySong

SIDECAR_FORMAT = "ipymusicgen-export"
SIDECAR_VERSION = 1
EXPORTS_SUFFIX = "-exports"
"""The card's Export writes beside the archive: `<archive>-exports/` (the default: `.../ipymusicgen/songs-exports`)."""


def exports_dir_beside(archive_dir: Path) -> Path:
    """Where the card's Export action writes: a folder next to the archive, named after it."""
    return archive_dir.parent / f"{archive_dir.name}{EXPORTS_SUFFIX}"


def task_ids(song_or_ids: Any) -> list[str]:
    """The task ids meant: one id, a song (anything with an `id`), or an iterable of those; in order, once each."""
    if isinstance(song_or_ids, str) or hasattr(song_or_ids, "id"):
        song_or_ids = [song_or_ids]
    if not isinstance(song_or_ids, Iterable):
        raise TypeError(f"export takes a song, a task id or a list of them (got {type(song_or_ids).__name__})")
    found: list[str] = []
    for item in song_or_ids:
        task_id = item if isinstance(item, str) else getattr(item, "id", None)
        if not isinstance(task_id, str) or not task_id.strip():
            raise TypeError(f"not a song or a task id: {str(item)[:80]!r}")
        found.append(task_id.strip())
    if not found:
        raise ValueError("nothing to export: give a song, a task id or a list of them")
    return list(dict.fromkeys(found))


def export_songs(library: Library, song_or_ids: Any, folder: str | Path) -> list[Path]:
    """Write one folder per song under `folder` (created if needed); the song folders, in the order given.

    Exporting again into the same folder refreshes a song's own folder (its sidecar names the song), never another
    song's. A song the library does not know is a `KeyError` before anything is written.
    """
    ids = task_ids(song_or_ids)
    songs = [library.song(task_id) for task_id in ids]  # every id checked first: no half export of a typo
    target = Path(folder).expanduser()
    target.mkdir(parents=True, exist_ok=True)
    context = _Context(library)
    return [_export_one(context, song, target) for song in songs]


class _Context:
    """What several songs of one export share, read once: the spend per batch and every vote."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._batches: dict[str, dict[str, Any]] | None = None
        self._votes: list[dict[str, Any]] | None = None

    def batch_spend(self, batch: str) -> dict[str, Any] | None:
        if self._batches is None:
            self._batches = {row["batch"]: row for row in self.library.spend("batch").rows}
        return self._batches.get(batch)

    def votes(self) -> list[dict[str, Any]]:
        if self._votes is None:
            self._votes = list(self.library.compare_results())
        return self._votes


def _mp4_of(song: LibrarySong) -> Path | None:
    """The song's MP4 if one was made and archived (recorded, or beside its MP3 under the same name)."""
    recorded = getattr(song, "mp4_path", None)
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    if song.archive_path:
        beside = Path(song.archive_path).with_suffix(".mp4")
        if beside.is_file():
            return beside
    return None


def _export_one(context: _Context, song: LibrarySong, parent: Path) -> Path:
    """The song's one folder, made or updated in place (renamed to the final title's name if an earlier export
    named it otherwise); each file written as a new file renamed over its name, our stale files removed."""
    library = context.library
    info = song_info(library.store, song.id)
    request = info.request if info is not None else {}
    base = info.file_name("") if info is not None else safe_filename(song.title, "", fallback="untitled")
    marker = base[base.rfind(" [") + 1 :] if info is not None and base.endswith("]") and " [" in base else None
    path, stale = song_folder(parent, base, song.id, marker)
    path.mkdir(exist_ok=True)
    if path.parent != parent or path.is_symlink():
        raise ValueError(f"refusing to write outside the export folder: {path.name[:80]!r}")
    with SongFolder(path) as folder:
        files = {
            "audio": folder.copy(song.archive_path, safe_filename(base, ".mp3"), audio_suffix),
            "wav": folder.copy(song.wav_path, safe_filename(base, ".wav"), audio_suffix),
            "mp4": folder.copy(_mp4_of(song), safe_filename(base, ".mp4"), audio_suffix),  # MP4: its ftyp box
            "cover": folder.copy(
                song.cover_path,
                safe_filename("cover", Path(song.cover_path).suffix if song.cover_path else ""),
                image_suffix,
            ),
            "lyrics": None,
        }
        if song.lyrics:
            files["lyrics"] = folder.write(LYRICS, [(song.lyrics.rstrip("\n") + "\n").encode("utf-8")])
        files = settle(folder, files)  # an old title's files go; what the archive lost stays
        sidecar = sidecar_of(context, song, request, files)
        text = json.dumps(sidecar, ensure_ascii=False, indent=2, default=str) + "\n"
        folder.write(SIDECAR, [text.encode("utf-8")])
    for earlier in stale:
        drop_stale(earlier, files)
    return path


def sidecar_of(context: _Context, song: LibrarySong, request: dict[str, Any], files: dict[str, Any]) -> dict[str, Any]:
    """The sidecar's fields, every one read from the library (see docs: request, lineage, cost, ratings, analysis)."""
    library = context.library
    return {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "exported_at": _iso(time.time()),
        "id": song.id,
        "song_id": song.song_id,
        "title": song.title,
        "style": song.style,
        "model": song.model,
        "action": song.action,
        "state": song.state,
        "created_at": _iso(song.created_at),
        "duration_s": song.duration_s,
        "call": song.call,
        "take": song.take,
        "batch": song.batch,
        "parent_id": song.parent_id,
        "files": files,
        "missing": None if files["audio"] else (song.archive_error or "the song's audio is not in the archive"),
        "request": request,
        "lineage": library.lineage(song.id),
        "cost": cost_of(context, song, request),
        "ratings": ratings_of(context, song),
        "analysis": {
            "bpm": song.bpm,
            "key": song.musical_key,
            "lufs": song.lufs,
            "true_peak_db": song.true_peak_db,
            "silence_start_s": song.silence_start_s,
            "silence_end_s": song.silence_end_s,
            "error": song.analysis_error,
        },
    }


def cost_of(context: _Context, song: LibrarySong, request: dict[str, Any]) -> dict[str, Any]:
    """Estimated and measured credits, side by side and never added: the estimate is the price table's for the
    call that made the song (its takes share it); measured is what the key's counts said for the song's batch
    run, when one was measured (None otherwise: no song-level measure exists)."""
    from ..models.costs import estimate_credits

    takes = context.library.takes(song.id)
    batch = context.batch_spend(song.batch) if song.batch else None
    return {
        "call_credits_estimated": estimate_credits(request) if request else None,
        "songs_in_call": len(takes),
        "batch_credits_estimated": batch["credits_estimated"] if batch else None,
        "batch_credits_measured": batch["credits_measured"] if batch else None,
    }


def ratings_of(context: _Context, song: LibrarySong) -> dict[str, Any]:
    """Stars, favourite, kept take, note, and the pairwise votes the song took part in."""
    votes = [v for v in context.votes() if song.id in (v["winner"], v["loser"])]
    said = [_said(v, song.id) for v in votes]  # "won", "lost", "tie" or "both_bad" (a vote's outcome, issue 41)
    return {
        "stars": song.stars,
        "favourite": song.favourite,
        "kept": song.kept,
        "note": song.note,
        "votes_won": said.count("won"),
        "votes_lost": said.count("lost"),
        "votes_tied": said.count("tie"),
        "votes_both_bad": said.count("both_bad"),
        "votes": [
            {
                "won": outcome == "won",
                "outcome": outcome,
                "against": v["loser"] if v["winner"] == song.id else v["winner"],
                "blind": v["blind"],
                "voted_at": _iso(v["voted_at"]),
            }
            for v, outcome in zip(votes, said, strict=True)
        ],
    }


def _said(vote: dict[str, Any], task_id: str) -> str:
    """What a vote says of this song: won or lost (a preference), or the vote's tie or both bad."""
    outcome = vote.get("outcome") or "win"
    if outcome != "win":
        return outcome
    return "won" if vote["winner"] == task_id else "lost"


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(seconds)))
