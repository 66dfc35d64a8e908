"""Safe file names and atomic writes for downloaded songs: no traversal, no half files left behind."""

from __future__ import annotations

import os
import re
import tempfile
import unicodedata
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

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
MAX_STEM_BYTES = 200  # file systems allow 255 bytes per name; leave room for " (2)" and the suffix


def safe_filename(title: str | None, suffix: str, fallback: str = "song") -> str:
    """A file name from an untrusted title: one path component, no control characters, not hidden."""
    stem = unicodedata.normalize("NFKC", title or "")
    stem = re.sub(r"\s+", " ", _UNSAFE.sub(" ", stem)).strip(" .")  # "../x" must not become hidden ".. x"
    stem = stem[:MAX_STEM].encode()[:MAX_STEM_BYTES].decode("utf-8", "ignore").rstrip(" .")
    if not stem or stem.split(".")[0].strip().upper() in _RESERVED:  # Windows reserves "CON.txt" too
        stem = _UNSAFE.sub("_", fallback).strip(".") or "song"
    return stem + suffix


def suffix_for(url: str, content_type: str | None) -> str:
    """The file extension from the response's media type, else the URL path, else .mp3."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in _MEDIA_EXTENSIONS:
        return _MEDIA_EXTENSIONS[media]
    suffix = Path(urlsplit(url).path).suffix.lower()
    return suffix if suffix in _KNOWN_SUFFIXES else ".mp3"


def unique_path(directory: Path, name: str) -> Path:
    """`directory/name`, or `name (2)` etc. if that exists, so a download never overwrites."""
    path = directory / name
    stem, suffix = Path(name).stem, Path(name).suffix
    number = 2
    while path.exists():
        path = directory / f"{stem} ({number}){suffix}"
        number += 1
    return path


class AtomicFile:
    """Write to a hidden temp file beside the target and rename only when complete."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        fd, name = tempfile.mkstemp(dir=directory, prefix=".ipymusicgen-", suffix=".part")
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
        if not self._file.closed:
            self._file.close()
        self.temp_path.unlink(missing_ok=True)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None or self.temp_path.exists():
            self.discard()
