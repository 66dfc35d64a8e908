"""The JSON the sandbox answers with, shaped like the real service's (observed-behaviour.md)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from .files import audio_url, cover_url
from .state import KeyAccount, Phase, SandboxState, Task

INSUFFICIENT_CREDITS = "Insufficient credits: this key has no music counts left"
INVALID_KEY = "Invalid or missing API key"
MP4_UNSUPPORTED = "MP4 export is not supported in the sandbox"
V2_STATUS = MappingProxyType(
    {
        Phase.PROCESSING: "RUNNING",
        Phase.PREVIEW: "RUNNING",
        Phase.COMPLETE: "FINISHED",
        Phase.FAILED: "FAILED",
    }
)


def envelope(data: Any, status: int = 200, message: str = "Success") -> dict[str, Any]:
    return {"status": status, "message": message, "data": data}


def v1_task(state: SandboxState, task: Task) -> dict[str, Any]:
    """A task record: duration in milliseconds and -1 until complete; URLs only once they work."""
    phase = state.phase(task)
    base = state.files_base
    record: dict[str, Any] = {
        "id": task.id,
        "duration": -1,
        "status": phase.value,
        "title": task.title,
        "style": task.style,
        "audio_url": "",
        "cover_url": "",
        "song_id": task.song_id,
        "lyric": "",
        "fail_code": 0,
        "fail_reason": "",
    }
    if phase is Phase.PREVIEW:
        record["audio_url"] = audio_url(base, task, preview=True)
    elif phase is Phase.COMPLETE:
        record.update(
            duration=round(task.seconds * 1000),
            audio_url=audio_url(base, task),
            cover_url=cover_url(base, task),
            lyric=task.lyric,
        )
    elif phase is Phase.FAILED:
        record.update(fail_code=task.fail_code, fail_reason=task.fail_reason)
    return record


def v2_song(state: SandboxState, task: Task, *, query: bool = False) -> dict[str, Any]:
    """A v2 song: RUNNING (audio a preview once one exists) → FINISHED; `audio_duration` in milliseconds, -1
    while running; the image only once finished.

    As the real service does (observed-behaviour.md), the submit answer carries title and lyric but
    `/v2/query` (`query=True`) answers them empty, so clients must keep what the submit answer said.
    """
    phase = state.phase(task)
    base = state.files_base
    song: dict[str, Any] = {
        "song_id": task.song_id,
        "status": V2_STATUS[phase],
        "audio": "",
        "audio_duration": -1,
        "image": "",
        "lyric": "" if query else task.lyric,
        "tags": task.style,
        "title": "" if query else task.title,
    }
    if phase is Phase.PREVIEW:
        song["audio"] = audio_url(base, task, preview=True)
    elif phase is Phase.COMPLETE:
        song.update(audio=audio_url(base, task), audio_duration=round(task.seconds * 1000), image=cover_url(base, task))
    elif phase is Phase.FAILED:
        song.update(fail_code=task.fail_code, fail_reason=task.fail_reason)
    return song


def key_info(account: KeyAccount) -> dict[str, Any]:
    """The key-info record; like the real service it echoes the key in `x_api_key`."""
    return {
        "x_api_key": account.key,
        "key_status": 1,
        "key_music_counts": account.music_counts,
        "email": "sandbox@example.invalid",
        "member_id": "sandbox-member",
        "key_created_at": account.created_at.isoformat(),
        "key_updated_at": account.updated_at.isoformat(),
        "key_recently_used_at": account.used_at.isoformat(),
        "key_name": account.name,
    }
