"""Only a song's audio reaches the page (issue 43, items 3 and 4): an archived path is read only as a real file of its
archive folder (no link out of it, no `..`), at most the cap counted while reading, and only when it sniffs as audio,
with its own type; a song URL's redirects from a public host to this machine or a private network are refused."""

from __future__ import annotations

import io
import os
import wave
from pathlib import Path
from typing import Any

import pytest
from helpers import AudioPage
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.client.downloads import host_is_inner, redirect_refusal
from ipymusicgen.widgets.audio_channel import AudioSource, AudioUnavailable, read_audio
from ipymusicgen.widgets.card_audio import CardAudio

MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 300
M4A = b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00M4A mp42isom" + b"\x00" * 400
FLAC = b"fLaC\x00\x00\x00\x22" + b"\x10" * 300
CANARY = "hush-canary-5e0b21d4"


def wav_bytes() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(b"\x01\x00" * 800)
    return out.getvalue()


def served(path: Path | str | None, url: str | None = None, *, limit: int = 1 << 20, inner: Any = None) -> Any:
    """What a card of `path`/`url` hands the page over the channel: (content, bytes), or None when no player
    name was even offered (nothing the page could ask for)."""
    page = AudioPage()
    audio = CardAudio(page, apis=[], **({"inner": inner} if inner else {}))
    audio.channel.limit = lambda: limit
    name = audio.fields("card", path=str(path) if path else None, url=url)["play_source"]
    if not name:
        return None
    audio.handle({"kind": "audio", "source": name})
    content, buffers = page.answer(name)
    return content, b"".join(buffers)


def refused(result: Any, *secrets: bytes) -> bool:
    """No bytes went to the page (no name at all, or an error line), and none of `secrets` in anything sent."""
    if result is None:
        return True
    content, data = result
    return data == b"" and "error" in content and not any(s in repr(content).encode() for s in secrets)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    folder = tmp_path / "archive"
    folder.mkdir()
    return folder


def test_a_link_planted_in_the_archive_is_never_followed_to_the_page(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HUSH_TOKEN", CANARY)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "notes.txt").write_text(f"token={CANARY}\n")
    (outside / "private take.mp3").write_bytes(MP3)  # audio, but not the archive's: refused all the same
    links = {
        "Lullaby.mp3": outside / "notes.txt",
        "Lullaby (2).mp3": outside / "private take.mp3",
        "Dawn Chorus.flac": Path("/proc/self/status"),  # size 0 on disk, the kernel's own status inside
        "Tide.wav": Path(f"/proc/{os.getpid()}/environ"),
    }
    for name, target in links.items():
        (archive / name).symlink_to(target)
        result = served(archive / name)
        assert refused(result, CANARY.encode(), b"VmRSS", b"token="), name
        with pytest.raises(AudioUnavailable):
            read_audio(AudioSource(path=str(archive / name)), 1 << 20)
    escaping = [archive / ".." / "elsewhere" / "private take.mp3", f"{archive}/../elsewhere/notes.txt"]
    for path in escaping:
        assert refused(served(path), CANARY.encode()), path
        with pytest.raises(AudioUnavailable):
            read_audio(AudioSource(path=str(path)), 1 << 20)


def test_a_link_falls_back_to_the_songs_own_url_never_to_what_the_link_names(archive: Path, tmp_path: Path) -> None:
    secret = tmp_path / "keys.env"
    secret.write_text(f"MUSICGEN_API_KEY={CANARY}\n")
    (archive / "Harbour.mp3").symlink_to(secret)

    def song(req: RawRequest, sock: Any) -> None:
        respond(sock, 200, raw=MP3, headers={"Content-Type": "audio/mpeg"})

    with HostileServer(song) as server:
        result = served(archive / "Harbour.mp3", f"{server.url}/harbour.mp3")
    assert result is not None and result[1] == MP3 and result[0]["type"] == "audio/mpeg"


def test_an_archived_file_is_read_counting_to_the_cap_not_by_its_size_on_disk() -> None:
    # /proc files say 0 bytes on disk and hold more: the cap holds by what is read
    result = served("/proc/self/maps", limit=64)
    assert refused(result, b"r-xp") and result is not None and "above the limit" in result[0]["error"]
    with pytest.raises(AudioUnavailable, match="above the limit"):
        read_audio(AudioSource(path="/proc/self/maps"), 64)


@pytest.mark.parametrize(
    "body",
    [b"<!doctype html><title>Expired</title>", b'{"status": "ok", "uptime": 1}', b"\x00" * 512, b"PK\x03\x04zip"],
)
def test_an_archived_file_that_is_not_audio_never_reaches_the_page(archive: Path, body: bytes) -> None:
    path = archive / "Meadow.mp3"
    path.write_bytes(body)
    assert refused(served(path), body[:12])


def test_a_fifo_in_the_archive_is_refused_without_waiting_on_it(archive: Path) -> None:
    path = archive / "Pipe Dream.mp3"
    os.mkfifo(path)
    assert refused(served(path))


@pytest.mark.parametrize(
    ("name", "data", "kind"),
    [
        ("a.mp3", MP3, "audio/mpeg"),
        ("b.mp3", M4A, "audio/mp4"),
        ("c.ogg", FLAC, "audio/flac"),
        ("d.bin", None, "audio/wav"),
    ],
)
def test_archived_audio_goes_with_its_own_type_whatever_its_name(
    archive: Path, name: str, data: bytes | None, kind: str
) -> None:
    body = data if data is not None else wav_bytes()
    path = archive / name
    path.write_bytes(body)
    result = served(path)
    assert result is not None and result[1] == body and result[0]["type"] == kind


# -- item 4: a song URL's redirects -------------------------------------------------------------------------------


def public_localhost(host: str) -> bool | None:
    """The rule's seam: `localhost` stands for a public song host (no network here); IP literals are read as
    they are (127.0.0.1, 10.x, 169.254.169.254 stay inner)."""
    return False if host == "localhost" else host_is_inner(host)


def song_host(locations: dict[str, str]) -> Any:
    """A song host: each path in `locations` redirects there; /status is a loopback JSON page; else audio."""

    def handler(req: RawRequest, sock: Any) -> None:
        if req.path in locations:
            respond(sock, 302, {}, {"Location": locations[req.path]})
        elif req.path == "/status":
            respond(sock, 200, {"ok": True, "secret": CANARY})
        else:
            respond(sock, 200, raw=MP3, headers={"Content-Type": "audio/mpeg"})

    return handler


def test_a_public_song_host_redirecting_inward_is_refused_and_nothing_reaches_the_page() -> None:
    locations: dict[str, str] = {}
    with HostileServer(song_host(locations)) as server:
        port = server.url.rsplit(":", 1)[1]
        inward = {
            "/a.mp3": f"http://127.0.0.1:{port}/status",
            "/b.mp3": f"http://[::1]:{port}/status",
            "/c.mp3": "http://169.254.169.254/latest/meta-data/",
            "/d.mp3": f"http://10.20.30.40:{port}/status",
            "/e.mp3": f"http://0.0.0.0:{port}/status",
            "/f.mp3": "file:///etc/hostname",
            "/g.mp3": f"http://localhost:{port}/h.mp3",  # public to public: followed, then inward from there
            "/h.mp3": f"http://[::ffff:127.0.0.1]:{port}/status",
        }
        locations.update(inward)
        for path in inward:
            url = f"http://localhost:{port}{path}"
            assert refused(served(None, url, inner=public_localhost), CANARY.encode()), path
            with pytest.raises(AudioUnavailable, match="redirect"):
                read_audio(AudioSource(url=url), 1 << 20, inner=public_localhost)
        asked = [r.path for r in server.requests]
        assert "/status" not in asked  # never even asked for


def test_redirects_the_rule_allows_still_play() -> None:
    locations: dict[str, str] = {}
    with HostileServer(song_host(locations)) as server:
        port = server.url.rsplit(":", 1)[1]
        locations.update({"/moved.mp3": f"http://localhost:{port}/cdn/song.mp3", "/local.mp3": "/cdn/other.mp3"})
        public = served(None, f"http://localhost:{port}/moved.mp3", inner=public_localhost)  # public to public
        sandbox = served(None, f"http://127.0.0.1:{port}/local.mp3")  # loopback to loopback: the sandbox's way
    for result in (public, sandbox):
        assert result is not None and result[1] == MP3 and result[0]["type"] == "audio/mpeg"


def test_a_song_url_answering_something_that_is_not_audio_sends_the_page_nothing() -> None:
    with HostileServer(song_host({})) as server:
        result = served(None, f"{server.url}/status")
    assert refused(result, CANARY.encode())


def test_the_redirect_rule_reads_every_kind_of_inner_address() -> None:
    for host in ("127.8.9.10", "::1", "10.0.0.7", "172.20.1.1", "192.168.77.1", "169.254.169.254", "fd00::5",
                 "fe80::1", "0.0.0.0", "::ffff:10.1.1.1", "100.100.1.1", "localhost", "api.localhost"):  # fmt: skip
        assert host_is_inner(host) is True, host
    for host in ("8.8.4.4", "2606:4700::1111", "1.1.1.1"):
        assert host_is_inner(host) is False, host
    assert host_is_inner("no-such-host.invalid") is None
    assert redirect_refusal("http://1.1.1.1/a", "http://192.168.0.1/b")
    assert redirect_refusal("http://1.1.1.1/a", "http://no-such-host.invalid/b")  # unknown is not public
    assert redirect_refusal("http://1.1.1.1/a", "gopher://1.1.1.1/b")
    assert redirect_refusal("http://1.1.1.1/a", "https://8.8.4.4/b") is None
    assert redirect_refusal("http://127.0.0.1:9/a", "http://192.168.0.1/b") is None  # inner may go anywhere
