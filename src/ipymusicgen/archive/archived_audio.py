"""Reading an archived song's bytes for the page: only a real file of the archive, at most the cap, only audio.

Why: the path a card plays comes from the journal and the archive folder, which other programs (and people) can
write. A symlink planted there (to `/proc/self/environ`, whose size on disk is 0, or to a key file) must not
send what it points at to the browser. So the file must sit directly in its archive folder under its own name
(no `..`, not a symlink: opened with O_NOFOLLOW, checked on the open descriptor), be a regular file, be read
counting the bytes as they come (never trusting `stat`), and start like audio (`sniff.audio_suffix`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import MappingProxyType

from .sniff import HEAD_BYTES, audio_suffix

BLOCK = 1 << 16
MEDIA_TYPES = MappingProxyType(
    {
        ".mp3": "audio/mpeg",
        ".wav": "audio/wav",
        ".flac": "audio/flac",
        ".ogg": "audio/ogg",
        ".m4a": "audio/mp4",
    }
)
"""The MIME type of each audio format the sniffer knows: what the page is told the bytes are."""


class ArchivedAudioError(ValueError):
    """The archived file is not one the page may get; the message names no path (it is said to the page)."""


class ArchivedTooLarge(ArchivedAudioError):
    """The file holds more than the cap (counted while reading)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the archived file holds {size} bytes or more, above the limit of {limit} bytes")
        self.size = size
        self.limit = limit


def archived_file(path: str | Path | None) -> Path | None:
    """`path` when it is a regular file directly inside its archive folder, reached without a symlink or `..`
    in its own name (the folder itself may be reached through a link, as a home folder often is); else None."""
    if not path:
        return None
    given = Path(path)
    if not given.name or ".." in given.parts:
        return None
    try:
        target = given.parent.resolve() / given.name
        found = os.lstat(target)
    except (OSError, RuntimeError):  # gone, unreadable, or a loop of links
        return None
    return target if stat.S_ISREG(found.st_mode) else None


def audio_type(data: bytes) -> str | None:
    """The MIME type of audio bytes (sniffed from their start), or None when they are not audio."""
    suffix = audio_suffix(data[:HEAD_BYTES])
    return MEDIA_TYPES.get(suffix) if suffix else None


def _open_archived(path: str | Path | None) -> int:
    """A descriptor of the archived file (see `archived_file`), opened without following a link, checked regular."""
    target = archived_file(path)
    if target is None:
        raise ArchivedAudioError("no archived file of this song is there (or it is a link, which is not followed)")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)  # a link swapped in since the check is refused here (ELOOP)
    except OSError:
        raise ArchivedAudioError("the archived file cannot be opened (or it became a link)") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ArchivedAudioError("the archived file is not a regular file")
    return fd


def archived_audio_kind(path: str | Path | None) -> tuple[str, int] | None:
    """(MIME type, size on disk) of an archived song's file when it is one (`archived_file`) and starts like audio;
    None otherwise: what a link to the audio may say about it before anyone reads it (`read_archived_audio`)."""
    try:
        fd = _open_archived(path)
    except ArchivedAudioError:
        return None
    with os.fdopen(fd, "rb", buffering=0) as file:
        kind = audio_type(file.read(HEAD_BYTES))
        return (kind, os.fstat(fd).st_size) if kind else None


def read_archived_audio(path: str | Path | None, limit: int) -> bytes:
    """The bytes of an archived song (see `archived_file`), at most `limit`, and only when they are audio.

    `ArchivedTooLarge` when the file holds more than `limit` (counted while reading: a file whose size on disk
    says 0 is read like any other); `ArchivedAudioError` when it is not an archive's file or not audio."""
    fd = _open_archived(path)
    chunks: list[bytes] = []
    size = 0
    with os.fdopen(fd, "rb", buffering=0) as file:
        while True:
            chunk = file.read(min(BLOCK, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ArchivedTooLarge(size, limit)
            chunks.append(chunk)
    data = b"".join(chunks)
    if audio_type(data) is None:
        raise ArchivedAudioError("the archived file is not audio (MP3, WAV, FLAC, Ogg or MP4 audio)")
    return data
