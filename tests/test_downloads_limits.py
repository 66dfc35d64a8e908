"""Downloads under attack, over real sockets: oversized files, a full disk, odd titles, file modes.

A hostile server on 127.0.0.1 serves the audio; the client streams it into a real directory. Whatever
fails, no partial or temp file is left behind and the error is a `MusicGenError`.
"""

from __future__ import annotations

import os
import resource
import signal
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.client.downloads import MAX_NAME_BYTES, safe_filename
from ipymusicgen.client.faces import AsyncMusicClient, MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.errors import DownloadError, MusicGenError
from ipymusicgen.models.schema import TaskRecord

pytestmark = pytest.mark.usefixtures("clean_env")  # no MUSICGEN_* setting of the machine leaks in

MP3 = b"ID3" + b"\x00" * 2000


def audio(req: RawRequest, sock: Any) -> None:
    respond(sock, 200, raw=MP3, headers={"Content-Type": "audio/mpeg"})


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer(audio) as s:
        yield s


def client(max_mb: float = 200.0) -> MusicClient:
    return MusicClient(settings=Settings(max_download_mb=max_mb), journal=False, timeout=10)


def song(url: str, title: str | None, task_id: str = "t1") -> TaskRecord:
    return TaskRecord.model_validate({"id": task_id, "status": 0, "audio_url": url + "/a.mp3", "title": title})


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_the_size_limit_is_a_setting_with_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().max_download_mb == 200
    monkeypatch.setenv("MUSICGEN_MAX_DOWNLOAD_MB", "5")
    assert Settings.from_env().max_download_mb == 5
    monkeypatch.setenv("MUSICGEN_MAX_DOWNLOAD_MB", "nan")
    with pytest.raises(ValueError, match="MUSICGEN_MAX_DOWNLOAD_MB"):
        Settings.from_env()


def test_a_declared_oversized_download_is_refused_before_writing(tmp_path: Path) -> None:
    def huge(req: RawRequest, sock: Any) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: 10000000\r\n\r\n" + MP3)

    with HostileServer(huge) as s, client(max_mb=1) as c, pytest.raises(DownloadError, match="limit of 1 MB"):
        c.download(song(s.url, "big"), tmp_path)
    assert leftovers(tmp_path) == []


def test_an_undeclared_oversized_stream_is_cut_off_and_nothing_is_left(tmp_path: Path) -> None:
    def endless(req: RawRequest, sock: Any) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"\x00" * 65536
        try:
            for _ in range(64):  # 4 MB, more than the 1 MB limit
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        except OSError:
            return

    with HostileServer(endless) as s:
        with client(max_mb=1) as c, pytest.raises(DownloadError, match="limit"):
            c.download(song(s.url, "endless"), tmp_path)

        async def async_side() -> None:
            async with AsyncMusicClient(settings=Settings(max_download_mb=1), journal=False) as ac:
                await ac.download(song(s.url, "endless"), tmp_path)

        import asyncio

        with pytest.raises(DownloadError):
            asyncio.run(async_side())
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_drip_fed_download_is_cut_off_and_nothing_is_left(tmp_path: Path) -> None:
    """5,000 bytes at one per 20 ms (100 s): after its grace (the 0.5 s HTTP timeout) a download must keep
    a sane pace, so the client hangs up long before the end; headers dripped the same way are bounded too."""
    body = b"\x00" * 5000
    with HostileServer(lambda req, sock: s.drip(sock, body, every=0.02)) as s:
        c = MusicClient(settings=Settings(timeout=0.5), journal=False)
        with c, pytest.raises(DownloadError, match="too slow"):
            c.download(song(s.url, "drip"), tmp_path)
        s.stop.set()
    assert s.dripped and max(s.dripped) < len(body)
    with HostileServer(lambda req, sock: s.drip_head(sock, MP3, every=0.1)) as s:
        c = MusicClient(settings=Settings(timeout=0.5), journal=False)
        with c, pytest.raises(MusicGenError, match=r"in time|timed out|failed"):
            c.download(song(s.url, "drip head"), tmp_path)
        s.stop.set()
    assert s.dripped and max(s.dripped) < 200
    assert leftovers(tmp_path) == []


def test_a_full_disk_is_a_clear_error_with_no_partial_file(server: HostileServer, tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes writes past 1000 bytes fail with EFBIG, as a full disk fails them (even as root)."""
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
        with client() as c, pytest.raises(DownloadError, match="no file was left behind") as caught:
            c.download(song(server.url, "too much"), tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert isinstance(caught.value, MusicGenError)
    assert leftovers(tmp_path) == []


def test_a_directory_that_cannot_be_made_is_a_clear_error(server: HostileServer, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the folder should be")
    with client() as c, pytest.raises(DownloadError, match="Could not save"):
        c.download(song(server.url, "x"), blocker / "songs")
    assert leftovers(tmp_path) == ["not-a-dir"]


HOSTILE_TITLES = [
    "evil\u202egnp.mp3",
    "left\u2066isolate\u2069 name",
    "zero\u200bwidth\u200djoin\ufeffbom",
    "bell\x07 and \x1b[31mred",
    "line\u2028break\u2029para",
]


@pytest.mark.parametrize("title", HOSTILE_TITLES)
def test_names_are_free_of_control_and_bidi_characters(server: HostileServer, tmp_path: Path, title: str) -> None:
    with client() as c:
        path = c.download(song(server.url, title), tmp_path)
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in path.name)
    assert path.suffix == ".mp3" and path.read_bytes() == MP3


@pytest.mark.parametrize("title", ["é" * 300, "a" * 1000, "🎵" * 200, "x" * 119 + "é" * 80])
def test_names_fit_255_bytes_with_suffix_and_counter(server: HostileServer, tmp_path: Path, title: str) -> None:
    with client() as c:
        paths = [c.download(song(server.url, title), tmp_path) for _ in range(3)]
    assert len({p.name for p in paths}) == 3
    assert paths[1].stem.endswith(" (2)") and paths[2].stem.endswith(" (3)")
    assert all(len(p.name.encode()) <= MAX_NAME_BYTES for p in paths)
    assert all(p.read_bytes() == MP3 for p in paths)


def test_a_long_fallback_name_is_bounded_too() -> None:
    name = safe_filename(None, ".mp3", "id-" * 200)
    assert len(name.encode()) <= MAX_NAME_BYTES and name.endswith(".mp3")
    assert safe_filename("\u202e\u2066", ".mp3", "t1") == "t1.mp3"


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_are_written_with_ordinary_modes_respecting_umask(
    server: HostileServer, tmp_path: Path, umask: int, mode: int
) -> None:
    previous = os.umask(umask)
    try:
        with client() as c:
            path = c.download(song(server.url, "mode"), tmp_path)
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == mode
