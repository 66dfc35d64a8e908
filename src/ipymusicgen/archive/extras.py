"""Paid extras of a song (its WAV, its MP4 video, a singer voice, its ElevenLabs stems), made once and kept beside
the song.

The one rule every front end goes through (the card's buttons, `%musicgen_wav`, the agent's `make_extra`,
`ipymusicgen.make_extra()`): the journal's `paid_extras` row for (song, kind) is claimed before the request
is sent (`storage.extras`), the client journals the attempt like any paid call, the answer is recorded, and
the file is archived beside the song's MP3 under the same name. A second press, another kernel on the same
journal or the agent server finds the row and reuses it: nothing is paid again. A request that may have
reached the service without an answer is `unknown` and is never sent again unless asked with `force=True`.

The rule is kept for the song, not for the name typed: `song_named` resolves every name of a song (its task id, the
service's `song_id` that the library and an export's song.json show, either with spacing around it or in another
ASCII case) to the song's task id before anything is claimed; a name the journal does not know is asked of the
service (a free task query) before it is taken as typed. A name that fits several songs is refused.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import types
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client.downloads import safe_filename
from ..client.engine_stems import separate_stems
from ..client.responses import create_may_have_landed
from ..client.waiting import check_id
from ..errors import DownloadError, MusicGenError, RequestValidationError
from ..models import costs
from ..models.providers import MUSICFUL
from ..storage.extras import Extra, ExtrasStore
from .sniff import audio_suffix, head_of

if TYPE_CHECKING:
    from ..client.faces import MusicClient


@dataclass(frozen=True)
class Kind:
    name: str
    label: str
    suffix: str | None
    """The file's suffix; None for an extra that is a value, not a file (the singer voice)."""


KINDS = types.MappingProxyType(
    {
        "wav": Kind("wav", "WAV", ".wav"),
        "mp4": Kind("mp4", "MP4 video", ".mp4"),
        "vibe": Kind("vibe", "singer voice", None),
        "stems": Kind("stems", "stems (ElevenLabs)", ".stems.zip"),
    }
)


@dataclass(frozen=True)
class ExtraResult:
    """What a request for an extra came to. `sent`: whether this call paid for it (at most once per song)."""

    song: str
    kind: str
    state: str
    """made (sent now), reused (made before: nothing paid), elsewhere (being made by another process now),
    unknown (a request may have been charged; not sent again)."""
    value: str | None
    """The URL the service gave (the singer id, for a voice)."""
    path: Path | None
    """The archived file, when kept."""
    note: str
    sent: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "song": self.song, "kind": self.kind, "state": self.state, "value": self.value,
            "path": str(self.path) if self.path else None, "note": self.note, "sent": self.sent,
        }  # fmt: skip


class UnknownExtraError(MusicGenError):
    """An extra whose request may have been charged without an answer: not sent again unless forced."""


def kind_of(kind: str) -> Kind:
    found = KINDS.get(str(kind).strip().lower())
    if found is None:
        from ..errors import FieldProblem

        raise RequestValidationError([FieldProblem("kind", f"one of {', '.join(KINDS)} (got {str(kind)[:20]!r})")])
    return found


def extra_price(kind: str) -> int:
    """Credits an extra is estimated at: the table's entry for the kind (`MUSICGEN_CREDIT_COSTS="wav=1"`), else
    the dearest known price (the service publishes none; an estimate never comes out low)."""
    return costs.credits_for_model(kind_of(kind).name)


def _journal_path(client: MusicClient) -> Path:
    """The journal the client writes; a client without one (journal=False) records extras in a throwaway file of its
    workspace's archive (`WorkspaceArchive.extras_file`, removed when the workspace closes)."""
    path = getattr(client.journal, "path", None)
    if path is not None:
        return Path(path)
    from .archiver import archive_of

    home = archive_of(client)
    if home is None:
        raise RuntimeError("This client keeps no journal and belongs to no archive: its extras cannot be recorded.")
    return home.extras_file()


def _extras(client: MusicClient) -> contextlib.AbstractContextManager[ExtrasStore]:
    """The extras store of the client's file, owned by the client's `Database` (its workspace's, through its
    wiring): used here, never closed here."""
    return contextlib.nullcontext(client.wiring.database_at(_journal_path(client)).extras)


@dataclass(frozen=True)
class SongName:
    """One song, however it was named: its task id (the key of its extras), the id the service's extras take,
    and every name it is known by."""

    task_id: str
    service_id: str
    names: tuple[str, ...]


def song_named(client: MusicClient, name: str) -> SongName:
    """The one song `name` names (task id, service song id, any spacing or ASCII case); refused when it fits
    several. A name neither the journal nor the service knows is the song's only name, as typed."""
    typed = check_id(name, "song")
    with _extras(client) as store:
        found = store.songs_named(typed)
    if not found:
        found = _asked_of_the_service(client, typed)
        if len(found) == 1 and found[0][1] and getattr(client.journal, "path", None) is None:
            with _extras(client) as store:  # the service's task query may not take a song id
                store.remember_names(found[0][0], str(found[0][1]))
    if len({task for task, _ in found}) > 1:
        from ..errors import FieldProblem

        songs = ", ".join(sorted({task for task, _ in found})[:4])
        raise RequestValidationError(
            [FieldProblem("song", f"{typed[:60]!r} names more than one song ({songs}): give the exact task id")]
        )
    if not found:
        return SongName(typed, typed, (typed,))
    task_id, song_id = found[0]
    service_id = song_id or task_id  # the service takes either; its song id where the journal knows it
    names = tuple(dict.fromkeys((task_id, service_id, typed)))
    with _extras(client) as store:  # another song's own task id is that song's name, not ours
        names = tuple(n for n in names if n == task_id or all(t == task_id for t, _ in store.songs_named(n)))
    return SongName(task_id, service_id, names)


def _asked_of_the_service(client: MusicClient, name: str) -> list[tuple[str, str | None]]:
    """(task id, song id) of the v1 task the service knows by `name` (a free query); nothing when it knows none,
    or cannot say (no key, offline: the name is then taken as typed)."""
    try:
        records = client.tasks([name])
    except Exception:  # a free lookup; the paid call that follows says what is wrong
        return []
    return [(r.id, r.song_id or None) for r in records if r.id][:2]


def held(client: MusicClient, task_id: str, kind: str) -> Extra | None:
    """What the journal holds for this song's extra under any of its names (None: never asked), so an ask can
    say "already made"."""
    spec, song = kind_of(kind), song_named(client, task_id)
    with _extras(client) as store:
        return store.get(song.task_id, spec.name, song.names)


def make_extra(client: MusicClient, task_id: str, kind: str, *, force: bool = False) -> ExtraResult:
    """The song's extra, paid for at most once whatever the song is called: made now, or reused from the journal
    and the archive (the result's note then says it was already made)."""
    spec = kind_of(kind)
    song = song_named(client, task_id)
    _check_made_by_the_service(song, spec)
    with _extras(client) as store:
        found = store.get(song.task_id, spec.name, song.names)
        if found is not None and found.state == "made" and not (force and _file_missing(found, spec)):
            return _reuse(client, store, found, spec, song)
        claimed, found = store.claim(song.task_id, spec.name, force=force, names=song.names)
        if not claimed:
            assert found is not None
            if found.state == "made":  # made by another process between the two reads
                return _reuse(client, store, found, spec, song)
            if found.state == "sending":
                note = f"being made by {found.owner} now: ask again in a moment (nothing was sent)"
                return ExtraResult(song.task_id, spec.name, "elsewhere", None, None, note, False)
            raise UnknownExtraError(
                f"The {spec.label} of {song.task_id} was asked before and may have been charged without an answer "
                f"({found.note or 'no answer'}); nothing was sent again. Check the service, then ask again with "
                f"force=True (`%musicgen_{spec.name} --force {song.task_id}`)."
            )
        value = _send(client, store, song, spec)
        path = _keep(client, store, song.task_id, spec, value)
        return ExtraResult(song.task_id, spec.name, "made", value, path, f"{spec.label} made and kept", True)


ENGINE_TASK = re.compile(r"(elevenlabs|lyria)-[0-9a-f]{32}")
"""A synchronous engine's song's task id (`client.engine_calls`: the provider, then a uuid4's hex)."""


def _check_made_by_the_service(song: SongName, spec: Kind) -> None:
    """The service's extras (WAV, MP4, singer voice) are made by the service from its own songs: an ElevenLabs or
    Lyria song's id would be a paid call the service cannot honour (a 404, or a 5xx left 'may have been charged')."""
    engine = ENGINE_TASK.fullmatch(song.task_id)
    if engine is not None and spec.name != "stems":
        raise MusicGenError(
            f"The {spec.name} ({spec.label}) extra is made by {MUSICFUL} from its own songs, and {song.task_id} was "
            f"made by {engine.group(1)}: nothing was sent. Its paid extra is its stems (make_extra(song, 'stems'))."
        )


def _file_missing(found: Extra, spec: Kind) -> bool:
    return spec.suffix is not None and not (found.path and Path(found.path).is_file())


def _send(client: MusicClient, store: ExtrasStore, song: SongName, spec: Kind) -> str:
    if spec.name == "stems":  # the engine takes the song's audio itself: read (free), then the paid upload
        send = lambda _id: _stems(client, song)  # noqa: E731
    else:
        send = {"wav": client.generate_wav, "mp4": client.generate_mp4, "vibe": client.generate_vibe}[spec.name]
    try:
        value = send(song.service_id)
    except BaseException as exc:
        landed = not isinstance(exc, Exception) or create_may_have_landed(exc)
        store.ended(song.task_id, spec.name, "unknown" if landed else "rejected", str(client.redact(str(exc)))[:500])
        raise
    store.made(song.task_id, spec.name, value)
    return value


def stems_quote(client: MusicClient, task_id: str) -> Decimal:
    """What the stems of this song will be priced at when sent, in dollars (the audio read now, free, and measured
    as `make_extra` will: its consent shows no less than what is journalled)."""
    from ..models.dollar_prices import stems_estimate

    song = song_named(client, check_id(task_id, "song"))
    return stems_estimate(_audio_of(client, song)[1])


def _stems(client: MusicClient, song: SongName) -> str:
    """The song's stems (a ZIP kept with the engines' answers), as the URI its extras row keeps."""
    audio, seconds = _audio_of(client, song)
    return separate_stems(client, song.task_id, audio, seconds=seconds).as_uri()


def _audio_of(client: MusicClient, song: SongName) -> tuple[bytes, float | None]:
    """The finished song's audio (its archived file, an engine's kept answer, or a download) and its length: what
    the stem separation uploads. Nothing paid is sent when it cannot be read."""
    import tempfile

    [record] = client.tasks([song.task_id]) or [None]
    if record is None or not record.state.finished or not record.audio_url:
        raise MusicGenError(f"Song {song.task_id} has no finished audio to separate into stems; nothing was sent.")
    with tempfile.TemporaryDirectory(prefix="ipymusicgen-stems-") as folder:
        path = client.download(record, folder)
        audio = Path(path).read_bytes()
    said = record.duration_seconds  # the price is the longer of what the record says and what is uploaded
    heard = _seconds_of(audio)
    known = [s for s in (said, heard) if s is not None and math.isfinite(s) and s > 0]
    return audio, max(known) if known else None


def _seconds_of(audio: bytes) -> float | None:
    """The length of the audio itself (MP3, WAV, FLAC, Ogg Vorbis), read from its headers; None when it cannot be
    told (then the record's length, or the longest song, prices the upload)."""
    import miniaudio

    readers = {".mp3": miniaudio.mp3_get_info, ".wav": miniaudio.wav_get_info, ".flac": miniaudio.flac_get_info,
               ".ogg": miniaudio.vorbis_get_info}  # fmt: skip
    reader = readers.get(audio_suffix(audio[:64]) or "")
    if reader is None:
        return None
    try:
        seconds = float(reader(audio).duration or 0.0)
    except (miniaudio.DecodeError, ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _reuse(client: MusicClient, store: ExtrasStore, found: Extra, spec: Kind, song: SongName) -> ExtraResult:
    """What was made before, for any name of the song: said as already made, nothing paid again."""
    made = f"{spec.label} already made for song {song.task_id}"
    if song.service_id != song.task_id:
        made += f" (song id {song.service_id})"
    if spec.suffix is None or (found.path and Path(found.path).is_file()):
        path = Path(found.path) if found.path else None
        return ExtraResult(song.task_id, spec.name, "reused", found.value, path, f"{made}: reused, nothing paid again",
                           False)  # fmt: skip
    path = _keep(client, store, found.song, spec, found.value or "", song.task_id)  # paid before, not kept yet
    return ExtraResult(song.task_id, spec.name, "reused", found.value, path, f"{made}: kept now, nothing paid again",
                       False)  # fmt: skip


def _keep(
    client: MusicClient, store: ExtrasStore, key: str, spec: Kind, value: str, task_id: str | None = None
) -> Path | None:
    """Archive the extra's file beside the song (same name, its own suffix); None when archiving is off. `key`: the
    name its row is kept under (the task id, or another name a row was kept under before names were resolved)."""
    task_id = task_id or key
    from .archiver import _place, _staging_dir, archiver_of, song_info

    archiver = archiver_of(client)
    directory = archiver.directory if archiver is not None else None
    if spec.suffix is None or directory is None or archiver is None:
        return None
    # the file's library, from its Database (the client's wiring's): used here, never closed here
    journal_path = archiver.journal_path
    library = client.wiring.database_at(journal_path).library if journal_path is not None else None
    song = song_info(library, task_id) if library is not None else None
    staging = _staging_dir(directory, archiver.home.swept)
    try:
        try:
            staged = client.download(value, staging)
            zipped = spec.suffix.endswith(".zip") and head_of(staged).startswith(b"PK")  # stems: a ZIP
            if not zipped and audio_suffix(head_of(staged)) is None:  # a page, not the WAV or MP4: never kept
                raise DownloadError(f"The {spec.label}'s URL answered something that is not audio or video.")
        except MusicGenError as exc:  # an HTTP status, a broken connection, a full disk: paid, not kept yet
            raise DownloadError(
                f"{exc} The {spec.label} of {task_id} was paid for and its URL is kept: ask again to download "
                "it (nothing is paid again); if the URL has expired, force=True pays for a new one."
            ) from None
        name = song.file_name(spec.suffix) if song is not None else safe_filename(task_id, spec.suffix)
        placed = _place(staged, directory, name, task_id)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    store.kept(key, spec.name, placed)
    if spec.name == "wav" and library is not None:
        library.wav_archived(task_id, placed)  # the library and the export find it
    return placed


def archive_wav(task_id: str, url: str | None = None, *, client: MusicClient) -> Path:
    """The song's WAV archived beside its MP3, paid at most once under any of its names (`make_extra`); with a `url`
    (one the service gave before), only downloaded: nothing is asked of the service."""
    from .archiver import archive_wav as download_wav
    from .archiver import archiver_of

    archiver = archiver_of(client)
    if archiver is None or archiver.directory is None or archiver.journal_path is None:
        raise RuntimeError("This client does not archive (no journal or archive=False).")  # before anything is paid
    if url is not None:
        return download_wav(song_named(client, task_id).task_id, url, client=client)
    result = make_extra(client, task_id, "wav")
    if result.path is None:
        raise RuntimeError("This client does not archive (no journal or archive=False).")
    return result.path
