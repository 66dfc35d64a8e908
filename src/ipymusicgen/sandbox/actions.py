"""The generation rules: what each v1 action and a v2 submit make, or why the new tasks fail.

A request is turned into a `Blueprint` (what both songs of the call share) and then into two tasks.
Rules the real service enforces while working (unknown song, foreign upload, too-long upload,
unknown singer) make tasks that fail with a `fail_code` and a plain `fail_reason`, as the real
service reports them in the task record rather than in the HTTP answer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from ..models.schema import (
    UPLOAD_MAX_SECONDS,
    V1_MODELS,
    V2_MODELS,
    ArtistConsistencyRequest,
    AutoRequest,
    ConcatRequest,
    CustomRequest,
    ExtendRequest,
    UploadExtendRequest,
    UploadRequest,
    V2Request,
    _V1Request,
)
from .faults import FaultRule
from .lyricsgen import generate_lyrics
from .probe import audio_seconds, decode_data_url
from .state import Phase, SandboxState, Segment, Task, total_length, truncate
from .validation import V2Refusal

SONGS_PER_CALL = 2
FILE_NAME_SUFFIXES = ("-preview.mp3", ".mp3", ".wav")


class TaskFailure(Exception):
    """The new tasks will fail with this code and reason."""

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Blueprint:
    """What both songs of one call share; `new_seconds` > 0 adds a freshly made part per song."""

    title: str
    style: str
    lyric: str
    vocal: bool
    new_seconds: float
    base: tuple[Segment, ...] = ()
    prefix: tuple[Segment, ...] = ()
    uploaded: bool = False


def _song_seconds(state: SandboxState, model: str | None, table: dict) -> float:
    limits = table.get(model) if model else None
    return min(state.song_seconds, limits.max_seconds if limits else UPLOAD_MAX_SECONDS)


def _words(lyrics: str | None, instrumental: int | None) -> tuple[str, bool]:
    """(lyric, vocal): pure music when instrumental is 1 or there are no lyrics."""
    if instrumental == 1 or not lyrics:
        return "", False
    return lyrics, True


def _finished_song(state: SandboxState, song_id: str | None, field: str) -> Task:
    if not song_id:
        raise TaskFailure(400, f"{field} is required for this action")
    song = state.get(song_id)
    if song is None:
        raise TaskFailure(404, f"Song not found: {field} {song_id!r} was not made by this sandbox")
    phase = state.phase(song)
    if phase is Phase.FAILED:
        raise TaskFailure(400, f"Song {song_id!r} failed, so it cannot be used")
    if phase is not Phase.COMPLETE:
        raise TaskFailure(400, f"Song {song_id!r} is not finished yet; wait until its status is 0")
    return song


def _continue_point(at: float | None, song_seconds: float) -> float:
    if at is None:
        return song_seconds
    if at <= 0 or at > song_seconds:
        raise TaskFailure(
            400, f"continue_at must be more than 0 and at most the song's duration ({song_seconds:g} s), got {at:g}"
        )
    return float(at)


def uploaded_audio(state: SandboxState, url: str) -> tuple[tuple[Segment, ...], str]:
    """(segments, title) of an upload: a file this sandbox serves, or a `data:` URL; never fetched."""
    if url.startswith("data:"):
        try:
            data = decode_data_url(url)
        except ValueError as exc:
            raise TaskFailure(400, f"Could not read the uploaded audio: {exc}") from None
        seconds = audio_seconds(data)
        if not seconds:
            raise TaskFailure(400, "Could not read the uploaded audio: send a WAV or MP3 file")
        seed = "upload:" + hashlib.sha256(data).hexdigest()
        return (Segment(seed, seconds, vocal=True),), "Uploaded audio"
    prefix = state.files_base + "/files/"
    if not (state.files_base and url.startswith(prefix)):
        raise TaskFailure(
            400,
            f"The sandbox never fetches from the internet: audio_url must be a file it serves ({prefix}...) "
            "or a data: URL",
        )
    name = urlsplit(url).path.rsplit("/", 1)[-1]
    task_id = next((name[: -len(s)] for s in FILE_NAME_SUFFIXES if name.endswith(s)), None)
    source = state.get(task_id) if task_id else None
    if source is None:
        raise TaskFailure(404, f"No audio file at {url}")
    phase = state.phase(source)
    preview_ok = name.endswith("-preview.mp3") and phase is Phase.PREVIEW
    if phase is not Phase.COMPLETE and not preview_ok:
        raise TaskFailure(404, f"The audio at {url} is not available yet")
    segments = source.preview if name.endswith("-preview.mp3") else source.segments
    return segments, source.title or "Uploaded audio"


def _v1_blueprint(state: SandboxState, request: _V1Request) -> Blueprint:
    seconds = _song_seconds(state, getattr(request, "mv", None), V1_MODELS)
    if isinstance(request, AutoRequest):
        style = request.style or "pop"
        text, title = generate_lyrics(style)
        lyric, vocal = _words(text, request.instrumental)
        return Blueprint(title, style, lyric, vocal, seconds)
    if isinstance(request, CustomRequest | ArtistConsistencyRequest):
        if isinstance(request, ArtistConsistencyRequest) and state.singer_song(request.singer_id) is None:
            raise TaskFailure(
                404,
                f"Unknown singer_id {request.singer_id!r}: make one with POST /v1/music/generate-vibe?song_id=...",
            )
        lyric, vocal = _words(request.lyrics, request.instrumental)
        style = request.style or "pop"
        return Blueprint(request.title or generate_lyrics(style)[1], style, lyric, vocal, seconds)
    if isinstance(request, ExtendRequest):
        song = _finished_song(state, request.continue_song_id, "continue_song_id")
        at = _continue_point(request.continue_at, song.seconds)
        lyric, vocal = _words(request.lyrics, request.instrumental)
        return Blueprint(
            request.title or song.title,
            request.style or song.style,
            lyric,
            vocal,
            seconds,
            prefix=truncate(song.whole, at),
        )
    if isinstance(request, ConcatRequest):
        song = _finished_song(state, request.continue_song_id, "continue_song_id")
        return Blueprint(song.title, song.style, song.lyric, True, 0, base=song.whole)
    if isinstance(request, UploadRequest):
        segments, title = uploaded_audio(state, request.audio_url)
        lyric = generate_lyrics(title)[0]
        return Blueprint(title, "uploaded", lyric, True, 0, base=segments, uploaded=True)
    if isinstance(request, UploadExtendRequest):
        return _upload_extend_blueprint(state, request, seconds)
    raise TaskFailure(400, f"Unsupported action {request.action!r}")  # pragma: no cover - the union is closed


def _upload_extend_blueprint(state: SandboxState, request: UploadExtendRequest, seconds: float) -> Blueprint:
    if request.audio_url:
        source, title = uploaded_audio(state, request.audio_url)
    elif request.continue_song_id:
        song = _finished_song(state, request.continue_song_id, "continue_song_id")
        if not song.uploaded:
            raise TaskFailure(400, "continue_song_id for upload_extend must be a song made by the upload action")
        source, title = song.whole, song.title
    else:
        raise TaskFailure(400, "upload_extend needs audio_url or continue_song_id")
    length = total_length(source)
    if length > UPLOAD_MAX_SECONDS:
        raise TaskFailure(
            400,
            f"Uploaded audio is {length:.0f} s long; upload_extend accepts at most 8 minutes ({UPLOAD_MAX_SECONDS} s)",
        )
    at = _continue_point(request.continue_at, length)
    lyric, vocal = _words(request.lyrics, request.instrumental)
    return Blueprint(
        request.title or title, request.style or "uploaded", lyric, vocal, seconds, prefix=truncate(source, at)
    )


def _make_tasks(
    state: SandboxState, owner: str, plan: Blueprint, version: int, failure: TaskFailure | None
) -> list[Task]:
    tasks = []
    now = state.clock()
    for _ in range(SONGS_PER_CALL):
        task_id = state.new_id()
        song_id = task_id if version == 2 else state.new_id()
        fresh = (
            (Segment(f"{state.seed}:{task_id}:{plan.style}", plan.new_seconds, plan.vocal),) if plan.new_seconds else ()
        )
        task = Task(
            id=task_id,
            song_id=song_id,
            owner=owner,
            created=now,
            title=plan.title,
            style=plan.style,
            lyric=plan.lyric,
            segments=plan.base + fresh,
            prefix=plan.prefix,
            version=version,
            uploaded=plan.uploaded,
        )
        if failure is not None:
            task = replace(task, fail_code=failure.code, fail_reason=failure.reason)
        state.add(task)
        tasks.append(task)
    return tasks


def _fault_failure(fault: FaultRule | None) -> TaskFailure | None:
    return TaskFailure(fault.fail_code, fault.fail_reason) if fault is not None else None


def create_v1(state: SandboxState, owner: str, request: _V1Request, fault: FaultRule | None = None) -> list[Task]:
    """Two tasks for a v1 generate call; broken rules make them fail rather than the call."""
    failure = _fault_failure(fault)
    try:
        plan = _v1_blueprint(state, request)
    except TaskFailure as exc:
        failure = failure or exc
        plan = Blueprint("", getattr(request, "style", None) or "", "", False, 0)
    return _make_tasks(state, owner, plan, 1, failure)


def check_v2(state: SandboxState, request: V2Request) -> Task | None:
    """The song a v2 extension continues; `V2Refusal` (a failed request) if the rule 3 is broken."""
    if request.is_auto == 1 or not request.is_extension:
        return None
    song = state.get(request.continue_song_id or "")
    if song is None:
        raise V2Refusal(f"continue_song_id {request.continue_song_id!r} was not made by this sandbox")
    if state.phase(song) is not Phase.COMPLETE:
        raise V2Refusal(f"Song {request.continue_song_id!r} is not finished yet")
    at = request.continue_at or 0
    if at <= 0 or at > song.seconds:
        raise V2Refusal(
            f"continue_at must be more than 0 and at most the song's duration ({song.seconds:g} s), got {at}"
        )
    return song


def create_v2(
    state: SandboxState, owner: str, request: V2Request, song: Task | None, fault: FaultRule | None = None
) -> list[Task]:
    """Two songs for a v2 submit (already checked with `check_v2`)."""
    seconds = _song_seconds(state, request.model_version, V2_MODELS)
    text, title = generate_lyrics(request.prompt)
    if request.is_auto == 1:
        plan = Blueprint(title, request.prompt, text, True, seconds)
    else:
        lyric, vocal = _words(request.lyrics, request.instrumental)
        prefix = truncate(song.whole, float(request.continue_at or 0)) if song else ()
        plan = Blueprint(request.title or title, request.prompt, lyric, vocal, seconds, prefix=prefix)
    return _make_tasks(state, owner, plan, 2, _fault_failure(fault))
