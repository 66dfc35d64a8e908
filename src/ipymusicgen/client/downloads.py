"""Safe file names and atomic writes for downloaded songs: no traversal, no half files left behind."""

from __future__ import annotations

import os
import re
import tempfile
import time
import unicodedata
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from ..errors import DownloadError

_UNSAFE = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*]+')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
_MEDIA_EXTENSIONS = {
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "video/mp4": ".mp4",
    "image/svg+xml": ".svg",
    "image/png": ".png",
    "image/jpeg": ".jpg",
}
_KNOWN_SUFFIXES = {".mp3", ".wav", ".mp4", ".m4a", ".ogg", ".flac", ".svg", ".png", ".jpg", ".jpeg", ".webp"}
MAX_STEM = 120
MAX_NAME_BYTES = 255
"""File systems allow 255 bytes per name: the stem, the suffix and any " (2)" counter together."""
COUNTER_ROOM = len(" (99999)")


def _fit(stem: str, room: int) -> str:
    """The stem cut to `room` UTF-8 bytes on a character boundary, without a trailing space or dot."""
    return stem.encode()[: max(room, 0)].decode("utf-8", "ignore").rstrip(" .")


def _clean(text: str) -> str:
    """No control, format (bidi overrides U+202E, isolates U+2066...) or unassigned characters; one line."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") else ch for ch in text)
    return re.sub(r"\s+", " ", _UNSAFE.sub(" ", text)).strip(" .")  # "../x" must not become hidden ".. x"


def safe_filename(title: str | None, suffix: str, fallback: str = "song") -> str:
    """A file name from an untrusted title: one path component, no control or bidi characters, not hidden,
    and short enough (255 bytes) with its suffix and a " (2)" counter."""
    suffix = _clean(suffix)[:16]
    suffix = "." + suffix.lstrip(".") if suffix else ""
    room = MAX_NAME_BYTES - len(suffix.encode()) - COUNTER_ROOM
    stem = _fit(_clean(title or "")[:MAX_STEM], room)
    if not stem or stem.split(".")[0].strip().upper() in _RESERVED:  # Windows reserves "CON.txt" too
        stem = _fit(_clean(fallback).replace(" ", "_"), room) or "song"
        if stem.split(".")[0].strip().upper() in _RESERVED:
            stem = "song"
    return stem + suffix


def suffix_for(url: str, content_type: str | None) -> str:
    """The file extension from the response's media type, else the URL path, else .mp3."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in _MEDIA_EXTENSIONS:
        return _MEDIA_EXTENSIONS[media]
    suffix = Path(urlsplit(url).path).suffix.lower()
    return suffix if suffix in _KNOWN_SUFFIXES else ".mp3"


def unique_path(directory: Path, name: str) -> Path:
    """`directory/name`, or `name (2)` etc. if that exists, so a download never overwrites (within 255 bytes)."""
    path = directory / name
    stem, suffix = Path(name).stem, Path(name).suffix
    number = 2
    while path.exists():
        tail = f" ({number}){suffix}"
        path = directory / (_fit(stem, MAX_NAME_BYTES - len(tail.encode())) + tail)
        number += 1
    return path


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (changing it races with other threads)."""
    with suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


MIN_DOWNLOAD_RATE = 4096
"""Bytes per second a download must average once its grace period is over (a drip-feeding host is cut off)."""


class SizeLimit:
    """A download's bounds: its size (from Content-Length when declared, and while streaming either way), and
    its pace: after `grace` seconds it must average `min_rate` bytes/s, so a drip-feeding host cannot hang it."""

    def __init__(self, limit: int, url: str, *, grace: float = 30.0, min_rate: float = MIN_DOWNLOAD_RATE) -> None:
        self.limit = limit
        parts = urlsplit(url)  # named in messages: without user info (proxy credentials), query or fragment
        self.where = parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()[:200]
        self.size = 0
        self.grace = grace
        self.min_rate = min_rate
        self.started = time.monotonic()

    def _refuse(self, size: int) -> DownloadError:
        return DownloadError(
            f"Download of {self.where} refused: {size} bytes or more, above the limit of {self.limit // 2**20} MB "
            "(max_download_mb, MUSICGEN_MAX_DOWNLOAD_MB); nothing was saved."
        )

    def check_declared(self, headers: Mapping[str, str]) -> None:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            raise self._refuse(int(declared))

    def take(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > self.limit:
            raise self._refuse(self.size)
        elapsed = time.monotonic() - self.started
        if elapsed > self.grace and self.size < self.min_rate * elapsed:
            raise DownloadError(
                f"Download of {self.where} stopped: {self.size} bytes in {elapsed:.0f} s is too slow (the host may be "
                "stalling); nothing was saved. Try again later."
            )
        return chunk


class AtomicFile:
    """Write to a hidden temp file beside the target and rename only when complete."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        fd, name = tempfile.mkstemp(dir=directory, prefix=".ipymusicgen-", suffix=".part")
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a saved song is an ordinary file
        except OSError:
            os.close(fd)
            Path(name).unlink(missing_ok=True)
            raise
        self._file = os.fdopen(fd, "wb")
        self.temp_path = Path(name)

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)

    def commit(self, name: str) -> Path:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        target = unique_path(self.directory, name)
        os.replace(self.temp_path, target)
        return target

    def discard(self) -> None:
        with suppress(OSError):  # a full disk may refuse even the close; the temp file must still go
            if not self._file.closed:
                self._file.close()
        with suppress(OSError):
            self.temp_path.unlink(missing_ok=True)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None or self.temp_path.exists():
            self.discard()
