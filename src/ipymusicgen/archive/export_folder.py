"""Where a song's export goes and how its files land there, with whatever another program left in the folder.

One folder per song, found again by its sidecar: an export made before the song was final (no title yet, so
`untitled [id]`) is renamed to the final title's name and updated, never left beside it. Files are written into
the folder through a descriptor of it (opened without following a link) as a new temporary file renamed over the
target: a hard link or a symlink planted at a file's name is replaced, never written through, and an existing
target is never opened for writing.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from ..client.downloads import unique_path
from .sniff import HEAD_BYTES

SIDECAR = "song.json"
LYRICS = "lyrics.txt"
MAX_SIDECAR_BYTES = 4 * 2**20
"""A sidecar read back (to know whose folder it is) is at most this big: anything larger is not ours."""
CHUNK = 1 << 20


def _one_name(name: str) -> str:
    """A file name that is one plain component of the folder (a last guard: names are made safe before)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or (os.sep != "/" and os.sep in name):
        raise ValueError(f"refusing to write outside the song's folder: {name[:80]!r}")
    return name


class SongFolder:
    """Writes into one song folder through a descriptor of it, so a folder swapped for a link midway is not
    followed either (where the platform has `dir_fd`; elsewhere, by path)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        if os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
            self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))

    def __enter__(self) -> SongFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _at(self) -> dict[str, Any]:
        return {"dir_fd": self._fd} if self._fd is not None else {}

    def _where(self, name: str) -> str | Path:
        return name if self._fd is not None else self.path / name

    def _not_a_folder(self, name: str) -> str:
        """`name`, or `name (2)`... when a directory sits at it (never replaced nor written into); the sidecar keeps
        its one name, so a directory there is an error."""
        stem, suffix = os.path.splitext(name)
        for number in range(1, 100):
            candidate = name if number == 1 else f"{stem} ({number}){suffix}"
            try:
                info = os.stat(self._where(candidate), follow_symlinks=False, **self._at())
            except FileNotFoundError:
                return candidate
            if not stat.S_ISDIR(info.st_mode):
                return candidate
            if name == SIDECAR:
                raise IsADirectoryError(f"a folder named {SIDECAR} is in the song's export folder {self.path.name!r}")
        raise IsADirectoryError(f"folders sit at {name[:80]!r} and its numbered names in {self.path.name!r}")

    def write(self, name: str, chunks: Iterable[bytes]) -> str:
        """Put `chunks` at `name`: a new file (mode 0666 less the umask) renamed over whatever was there (a file or
        a link; a directory there is left alone and the file takes `name (2)`). Returns the name written."""
        name = self._not_a_folder(_one_name(name))
        temp = f".ipymusicgen-{secrets.token_hex(8)}.part"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(self._where(temp), flags, 0o666, **self._at())
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            if self._fd is not None:
                os.replace(temp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            else:
                os.replace(self.path / temp, self.path / name)
        except BaseException:
            with suppress(OSError):
                os.unlink(self._where(temp), **self._at())
            raise
        return name

    def copy(
        self, source: str | Path | None, name: str, sniff: Callable[[bytes], str | None] | None = None
    ) -> str | None:
        """Copy an archived file in under `name`; its name, or None when there is no plain file there (a symlink
        planted at the archived path is not followed, a FIFO not waited on) or its first bytes are not what `sniff`
        knows (an export is made to be shared: a hard link to a key file is a plain file, but not audio)."""
        if not source:
            return None
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(source, flags)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as read:
            if not stat.S_ISREG(os.fstat(read.fileno()).st_mode):
                return None
            head = read.read(HEAD_BYTES)
            if sniff is not None and sniff(head) is None:
                return None
            return self.write(name, itertools.chain([head], iter(lambda: read.read(CHUNK), b"")))

    def remove(self, name: str) -> None:
        """Remove our file `name` (a link is removed, never what it points at); gone already is fine."""
        with suppress(FileNotFoundError, IsADirectoryError, PermissionError, ValueError):
            os.unlink(self._where(_one_name(name)), **self._at())

    def has(self, name: str) -> bool:
        """Whether `name` is a plain file in the folder (a link is not)."""
        try:
            info = os.stat(self._where(_one_name(name)), follow_symlinks=False, **self._at())
        except (OSError, ValueError):
            return False
        return stat.S_ISREG(info.st_mode)

    def sidecar(self) -> dict[str, Any] | None:
        return read_sidecar(self.path)


def read_sidecar(folder: Path) -> dict[str, Any] | None:
    """The folder's sidecar when it is a plain file of ours (no link followed, no FIFO waited on, bounded)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(folder / SIDECAR, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SIDECAR_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as read:
            found = json.loads(read.read(MAX_SIDECAR_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return found if isinstance(found, dict) else None


def _sidecar_id(folder: Path) -> str | None:
    found = read_sidecar(folder)
    return str(found["id"]) if found is not None and "id" in found else None


def _plain_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _ours(folder: Path, task_id: str) -> bool:
    return _plain_dir(folder) and _sidecar_id(folder) == task_id


def _foreign_files(folder: Path) -> bool:
    """A folder of the same name without our sidecar but with files in it is someone else's: not written into."""
    return not (folder / SIDECAR).is_file() and any(folder.iterdir())


def _free_name(parent: Path, name: str) -> Path:
    """`name (2)`, `name (3)`, ...: the first that is nothing at all (a dangling symlink 'does not exist' too)."""
    number, path = 2, unique_path(parent, name)
    while path.is_symlink():
        path = unique_path(parent, f"{name} ({number})")
        number += 1
    return path


def _numbered(path: Path, name: str) -> bool:
    """`name` or `name (N)`: the names an export of this song may carry."""
    rest = path.name[len(name) :] if path.name.startswith(name) else None
    return rest == "" or (rest is not None and rest.startswith(" (") and rest.endswith(")") and rest[2:-1].isdigit())


def _earlier_exports(parent: Path, name: str, task_id: str, marker: str | None) -> list[Path]:
    """This song's folders under `parent` from earlier exports (any title: found by the id tag in their names,
    then by the sidecar naming the song), oldest name first."""
    import glob

    pattern = f"*{glob.escape(marker)}*" if marker else f"{glob.escape(name)}*"
    with suppress(OSError):
        return sorted((p for p in parent.glob(pattern) if _ours(p, task_id)), key=lambda p: p.name)
    return []


def song_folder(parent: Path, name: str, task_id: str, marker: str | None) -> tuple[Path, list[Path]]:
    """(the song's folder, earlier folders of the song to clear). The folder is `parent/name` when that is free or
    ours; an earlier export under another name (before the title was final) is renamed to it and updated; when
    `name` is someone else's, ours keeps its `name (N)`, or the first free one. A symlink is never taken."""
    wanted = parent / name
    mine = _earlier_exports(parent, name, task_id, marker)
    if wanted in mine:
        return wanted, [p for p in mine if p != wanted]
    free = not wanted.exists() and not wanted.is_symlink()
    usable = free or (_plain_dir(wanted) and _sidecar_id(wanted) is None and not _foreign_files(wanted))
    if not mine:
        return (wanted if usable else _free_name(parent, name)), []
    keep = next((p for p in mine if _numbered(p, name)), None)
    if keep is None:
        earlier, keep = mine[0], (wanted if free else _free_name(parent, name))
        try:
            os.rename(earlier, keep)
        except OSError:  # taken meanwhile: the earlier folder is updated where it is
            keep = earlier
        return keep, [p for p in mine if p != earlier]
    return keep, [p for p in mine if p != keep]


def settle(folder: SongFolder, files: dict[str, str | None]) -> dict[str, str | None]:
    """What the folder holds now, role by role, against what an earlier export of ours wrote (its sidecar): a file
    written under an old name (an old title) is removed; a file the archive no longer has stays, still listed (an
    export folder may be the only copy left). Call before the new sidecar is written."""
    earlier = folder.sidecar() or {}
    listed = earlier.get("files") if isinstance(earlier.get("files"), dict) else {}
    settled = dict(files)
    now = set(_names(files.values()))
    for role, old in listed.items():
        name = next(_names([old]), None)
        if name is None or name in now:
            continue
        if settled.get(role) is None and folder.has(name):
            settled[role] = name
            now.add(name)
        elif settled.get(role) is not None:
            folder.remove(name)
    return settled


def drop_stale(path: Path, kept: dict[str, str | None]) -> None:
    """An earlier folder of the song left beside its folder (`kept`: what that folder holds, by role): our files
    of a role the song's folder holds go, then the sidecar and the folder once nothing else of ours is left (a file
    someone else put there, or one the song's folder lacks, keeps it)."""
    with SongFolder(path) as folder:
        listed = (folder.sidecar() or {}).get("files")
        left = False
        for role, old in listed.items() if isinstance(listed, dict) else []:
            name = next(_names([old]), None)
            if name is None:
                continue
            if kept.get(role):
                folder.remove(name)
            else:
                left = left or folder.has(name)
        if not left:
            folder.remove(SIDECAR)
    with suppress(OSError):
        path.rmdir()


def _names(values: Iterable[Any]) -> Iterator[str]:
    for value in values:
        if isinstance(value, str) and value and "/" not in value and value not in (".", ".."):
            yield value
