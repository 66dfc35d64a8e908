"""A second hostile review of issue 43 with other names, kinds and values than its first tests: IPv6 forms that carry
an IPv4 loopback or private address inside them (NAT64, 6to4, IPv4-compatible, Teredo), redirect chains and odd
redirects on a song host, links and non-audio files planted in the archive read by the page and by the export, and
a directory planted where the export writes a file. A keyed sandbox makes the songs the export reads."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import ipymusicgen
from ipymusicgen.archive.archived_audio import ArchivedAudioError, read_archived_audio
from ipymusicgen.archive.export import SIDECAR
from ipymusicgen.client.downloads import SongRedirectRefused, host_is_inner, redirect_refusal, send_song_request
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library

KEY = "k-issue43-attack-71d0"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 300
SECRET = b"MUSICGEN_API_KEY=k-attack-canary-0c51\n"
PUBLIC = "http://93.184.215.14/song.mp3"


# -- item 4: the redirect rule --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "::127.0.0.1",  # IPv4-compatible (deprecated form of ::ffff:)
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254, the cloud's metadata service
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
        "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
    ],
)
def test_ipv6_forms_that_carry_an_inner_ipv4_address_are_inner(host: str) -> None:
    assert host_is_inner(host) is True, host
    assert redirect_refusal(PUBLIC, f"http://[{host}]/status"), host


@pytest.mark.parametrize(
    "target",
    [
        "http://2130706433/status",  # 127.0.0.1 as one decimal number
        "http://0x7f000001/status",
        "http://127.1/status",
        "http://0/status",
        "http://localhost./status",
        "http://LocalHost/status",
        "http://[::ffff:127.0.0.1]/status",
        "http://[::1]/status",
        "http://[fe80::1]/status",
        "http://93.184.215.14@127.0.0.1/status",  # user info that looks like the public host
        "file:///etc/passwd",
        "data:text/plain,hello",
        "ftp://93.184.215.14/a.mp3",
    ],
)
def test_every_spelling_of_an_inner_host_is_refused_after_a_public_one(target: str) -> None:
    assert redirect_refusal(PUBLIC, str(httpx.URL(target)))


def _hosts(routes: dict[str, httpx.Response], asked: list[str]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return routes.get(str(request.url), httpx.Response(404))

    return httpx.Client(transport=httpx.MockTransport(handler))


def _public_only(host: str) -> bool | None:
    """Names under .example are public here; everything else by the real rule."""
    return False if host.endswith(".example") else host_is_inner(host)


def test_a_chain_of_public_hosts_ending_inward_is_refused_at_the_inward_hop() -> None:
    asked: list[str] = []
    routes = {
        "http://a.example/s.mp3": httpx.Response(302, headers={"Location": "http://b.example/t.mp3"}),
        "http://b.example/t.mp3": httpx.Response(307, headers={"Location": "http://[::ffff:7f00:1]:9/status"}),
    }
    with _hosts(routes, asked) as http, pytest.raises(SongRedirectRefused):
        send_song_request(http, http.build_request("GET", "http://a.example/s.mp3"), inner=_public_only)
    assert asked == ["http://a.example/s.mp3", "http://b.example/t.mp3"]  # the inward hop never asked


def test_a_redirect_loop_and_a_redirect_with_no_location_send_nothing_onward() -> None:
    asked: list[str] = []
    routes = {"http://a.example/s.mp3": httpx.Response(302, headers={"Location": "http://a.example/s.mp3"})}
    with _hosts(routes, asked) as http, pytest.raises(SongRedirectRefused, match="more than"):
        send_song_request(http, http.build_request("GET", "http://a.example/s.mp3"), inner=_public_only)
    assert len(asked) == 6
    with _hosts({"http://a.example/s.mp3": httpx.Response(302, content=b"<html>moved</html>")}, []) as http:
        response = send_song_request(http, http.build_request("GET", "http://a.example/s.mp3"), inner=_public_only)
        assert response.status_code == 302 and not response.is_success  # the callers refuse a non-2xx answer


# -- item 3: what the archive holds, read for the page --------------------------------------------------------------


def test_a_hard_link_to_a_secret_and_a_subfolder_link_in_the_archive_never_reach_the_page(tmp_path: Path) -> None:
    archive = tmp_path / "songs"
    archive.mkdir()
    secret = tmp_path / "keys.env"
    secret.write_bytes(SECRET)
    os.link(secret, archive / "Stolen.mp3")  # a hard link is a regular file of the folder: the sniffer stops it
    with pytest.raises(ArchivedAudioError):
        read_archived_audio(archive / "Stolen.mp3", 1 << 20)
    (archive / "sub").symlink_to(tmp_path)
    with pytest.raises(ArchivedAudioError):
        read_archived_audio(archive / "sub" / "keys.env", 1 << 20)
    (archive / "Zero.mp3").symlink_to("/dev/zero")
    with pytest.raises(ArchivedAudioError):
        read_archived_audio(archive / "Zero.mp3", 1 << 20)
    unicode = archive / "Ünïcödé ı İ ﬁ.mp3"
    unicode.write_bytes(MP3)
    assert read_archived_audio(unicode, 1 << 20) == MP3


# -- items 3 and 5: what the export copies out of the archive -------------------------------------------------------


def export(tmp_path: Path, ids: str | list[str], out: Path) -> list[Path]:
    return ipymusicgen.export(ids, out, journal_path=tmp_path / "journal.sqlite3")


def finished(client: MusicClient, service: Sandbox, title: str) -> tuple[str, Path]:
    ids = list(client.generate(action="custom", title=title, style="folk", lyrics="la").ids)
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)
    with Library(client.journal.path) as library:  # type: ignore[union-attr]
        return ids[0], Path(library.song(ids[0]).archive_path)


def test_a_hard_link_to_a_secret_planted_at_the_archived_mp3_is_not_exported_as_the_song(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    """An export is made to be shared: a file of the archive that is not audio (a hard link to a key file, a
    regular file to every check but the sniffer's) must not land in it as the song."""
    task_id, archived = finished(paid_clients(), service, "Ferryman")
    secret = tmp_path / "secret.env"
    secret.write_bytes(SECRET)
    archived.unlink()
    os.link(secret, archived)
    (folder,) = export(tmp_path, task_id, tmp_path / "out")
    assert all(SECRET not in p.read_bytes() for p in folder.iterdir() if p.is_file())
    assert json.loads((folder / SIDECAR).read_text())["files"]["audio"] is None


def test_a_directory_planted_at_an_export_files_name_does_not_stop_the_export(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    task_id, archived = finished(paid_clients(), service, "Millrace")
    out = tmp_path / "out"
    (folder,) = export(tmp_path, task_id, out)
    (mp3,) = folder.glob("*.mp3")
    (folder / "lyrics.txt").unlink()
    (folder / "lyrics.txt").mkdir()  # a directory where the export writes a file
    (folder / "lyrics.txt" / "mine.txt").write_text("not the export's")
    (again,) = export(tmp_path, task_id, out)
    assert again == folder and mp3.read_bytes() == archived.read_bytes()
    assert (folder / "lyrics.txt" / "mine.txt").read_text() == "not the export's"  # never removed
    assert json.loads((folder / SIDECAR).read_text())["id"] == task_id


# -- item 1: one song, one price, under names the first tests did not use -------------------------------------------


def song_ids(client: MusicClient, service: Sandbox, style: str) -> tuple[str, str]:
    """(task id, service song id) of a finished, archived v1 song."""
    ids = client.generate(action="auto", style=style).ids
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)
    with Library(client.journal.path) as library:  # type: ignore[union-attr]
        return ids[0], str(library.song(ids[0]).song_id)


def test_without_a_journal_the_song_id_first_then_the_task_id_pays_once(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """The reverse order of the first tests: the song id (which the service's task query may not know) first."""
    from ipymusicgen.archive.extras import make_extra
    from ipymusicgen.workspace.workspace import build_client

    song_ids(paid_clients(), service, "a first call")  # the sandbox's ids repeat from test to test, and a process
    task_id, song_id = song_ids(paid_clients(), service, "no journal reel")  # keeps one extras file: not the first
    settings = paid_clients().settings
    clients = [build_client(settings, journal=False, archive=False) for _ in range(2)]
    try:
        first = make_extra(clients[0], f"{song_id}\n\t", "vibe")
        again = make_extra(clients[1], f"\t{task_id.upper()}\n", "vibe")
    finally:
        for client in clients:
            client.close()
    assert first.sent and (again.state, again.sent, again.value) == ("reused", False, first.value)
    assert service.request_counts()["/v1/music/generate-vibe"] == 1


def test_a_song_id_equal_to_another_songs_task_id_does_not_hand_that_song_its_extra(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """Two songs whose names cross (one's song id is the other's task id, as another tool may record): each song
    gets its own WAV, never the other's as 'already made'."""
    import sqlite3
    from contextlib import closing

    from ipymusicgen.archive.extras import make_extra

    client = paid_clients()
    first, _ = song_ids(client, service, "crossed names one")
    second, _ = song_ids(client, service, "crossed names two")
    made = make_extra(client, first, "wav")
    with closing(sqlite3.connect(Path(client.journal.path))) as db, db:  # type: ignore[union-attr]
        db.execute("UPDATE tasks SET song_id = ? WHERE id = ?", (first, second))
    other = make_extra(paid_clients(), second, "wav")
    assert other.song == second and not (other.state == "reused" and other.value == made.value), other


def test_a_song_host_whose_name_resolves_both_public_and_inward_may_not_send_the_kernel_inward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name with one public and one loopback address is not 'a host on this machine' whose redirects go anywhere
    (the sandbox's freedom): its redirect to the cloud's metadata service or loopback is refused, and as a target it
    is refused after a public host."""
    import socket

    real = socket.getaddrinfo
    answers = {"mixed.example": ["93.184.215.14", "127.0.0.1"], "inside.example": ["127.0.0.1", "::1"]}

    def resolve(host: str, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        if host in answers:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in answers[host]]
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert redirect_refusal("http://mixed.example/s.mp3", "http://169.254.169.254/latest/meta-data/")
    assert redirect_refusal("http://mixed.example/s.mp3", "http://127.0.0.1:8888/api/status")
    assert redirect_refusal(PUBLIC, "http://mixed.example/s.mp3")
    assert redirect_refusal("http://inside.example/s.mp3", "http://127.0.0.1:8888/s.mp3") is None  # all inward


@pytest.mark.slow
def test_the_agent_is_offered_no_audio_link_to_what_a_link_or_a_non_audio_file_in_the_archive_holds(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """get_songs offers each archived song as a resource link with a size and a MIME type: a symlink planted at the
    archived path must not tell the agent the size of the file it names, nor a hard link to a key file pass as
    audio/mpeg; the song's own file still gets its link with its own size and type."""
    import anyio
    from mcp.client import Client

    from ipymusicgen import Journal
    from ipymusicgen.mcp import AgentDesk, build_server

    secret = tmp_path / "private.env"
    secret.write_bytes(b"TOKEN=" + b"s" * 31331)  # 31337 bytes: a size the agent must not learn
    with sandbox.client(journal=Journal(tmp_path / "journal.sqlite3"), archive=tmp_path / "songs") as client:
        ids: list[str] = []
        for style in ("dulcimer, rain", "oud, noon"):
            made = list(client.generate(action="auto", style=style).ids)
            client.wait(made, timeout=60, archived=True)
            ids += made
        with Library(tmp_path / "journal.sqlite3") as library:
            paths = [Path(str(library.archived_path(task_id))) for task_id in ids]
        paths[0].unlink()
        paths[0].symlink_to(secret)
        paths[1].unlink()
        os.link(secret, paths[1])
        desk = AgentDesk(client)

        async def links() -> list[Any]:
            async with Client(build_server(desk)) as agent:
                result = await agent.call_tool("get_songs", {"task_ids": ids})
                return [block for block in result.content if getattr(block, "type", "") == "resource_link"]

        found = {str(link.uri): link for link in anyio.run(links)}
    assert f"song://{ids[0]}/audio" not in found and f"song://{ids[1]}/audio" not in found, found
    assert all(link.size != secret.stat().st_size for link in found.values())
    own = found[f"song://{ids[2]}/audio"]
    assert own.size == paths[2].stat().st_size and own.mime_type == "audio/mpeg"


def test_a_paid_wav_whose_download_answers_something_else_is_not_kept_as_the_wav(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """The WAV's URL answering 200 with something that is not audio (an expired link's page, a status page) is not
    kept as the song's WAV (it would be 'already made' for good: the page and the export refuse it, and force pays
    only when the file is missing): the ask says so, and the next ask downloads it again without paying."""
    from ipymusicgen.archive.extras import make_extra
    from ipymusicgen.archive.sniff import audio_suffix
    from ipymusicgen.errors import MusicGenError

    client = paid_clients()
    task_id, _ = song_ids(client, service, "wax cylinder")
    service.set_faults("malformed:count=1:path=/files")  # the next file download answers JSON, with a 200
    first = None
    with pytest.raises(MusicGenError):
        first = make_extra(client, task_id, "wav")
    assert first is None
    again = make_extra(paid_clients(), task_id, "wav")
    assert again.state == "reused" and not again.sent and again.path is not None
    assert audio_suffix(again.path.read_bytes()[:64]) == ".wav"
    assert service.request_counts()["/v1/music/generate-wav"] == 1


def test_archiving_a_wav_from_a_url_that_answers_a_page_keeps_the_songs_mp3(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """`archive_wav(task_id, url)` only downloads: a URL answering 200 with JSON must not be kept as the WAV, and
    never in place of the song's archived MP3 (a URL ending in .mp3 named the download like the song's own file)."""
    from ipymusicgen.archive import archive_wav
    from ipymusicgen.errors import MusicGenError

    client = paid_clients()
    task_id, _ = song_ids(client, service, "gramophone")
    with Library(client.journal.path) as library:  # type: ignore[union-attr]
        song = library.song(task_id)
        mp3, url = Path(str(song.archive_path)), str(song.audio_url)
    kept = mp3.read_bytes()
    service.set_faults("malformed:count=1:path=/files")
    with pytest.raises((MusicGenError, ValueError)):
        archive_wav(task_id, url, client=client)
    assert mp3.read_bytes() == kept
    with Library(client.journal.path) as library:  # type: ignore[union-attr]
        assert library.song(task_id).wav_path is None


def test_without_a_journal_a_service_whose_task_query_knows_only_task_ids_still_pays_once(
    paid_clients: Callable[..., MusicClient], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec does not say the task query takes a song id (the sandbox's does): a song's names learned when it was
    first asked by its task id must still tell a later ask by its song id that the voice is made."""
    from ipymusicgen.archive.extras import make_extra
    from ipymusicgen.workspace.workspace import build_client

    song_ids(paid_clients(), service, "a first call")  # not the first ids: a process keeps one extras file
    song_ids(paid_clients(), service, "a second call")
    task_id, song_id = song_ids(paid_clients(), service, "strict service jig")
    everything = service.state.tasks_of  # type: ignore[attr-defined]

    def by_task_id_only(owner: str, ids: list[str] | None = None) -> list[Any]:
        return [t for t in everything(owner, ids) if ids is None or t.id in ids]

    monkeypatch.setattr(service.state, "tasks_of", by_task_id_only)  # type: ignore[attr-defined]
    settings = paid_clients().settings
    clients = [build_client(settings, journal=False, archive=False) for _ in range(2)]
    try:
        voice = make_extra(clients[0], task_id, "vibe")
        again = make_extra(clients[1], song_id, "vibe")
    finally:
        for client in clients:
            client.close()
    assert voice.sent and (again.state, again.sent, again.value) == ("reused", False, voice.value)
    assert service.request_counts()["/v1/music/generate-vibe"] == 1
