"""A song download follows a redirect only by the one rule (`client.downloads.redirect_refusal`; issue 43, item 4):
a public song host may not send the kernel to this machine or a private network, for the sync and the async client.

No network here: the song host is a hostile server on loopback that the test's transport reaches under a public
address (an IP literal, so the rule reads it as it is and no resolver is asked)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.client.faces import AsyncMusicClient, MusicClient
from ipymusicgen.errors import DownloadError

PUBLIC = "93.184.215.14"
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 200
SECRET = b'{"status": "ok", "token": "loopback-status-4b1e"}'


def _to_loopback(request: httpx.Request, port: int) -> httpx.Request:
    """The request the wire carries: to the loopback server when it names the public address (the client's own
    request keeps its URL, so its redirects are judged from the public host)."""
    if request.url.host != PUBLIC:
        return request
    url = request.url.copy_with(host="127.0.0.1", port=port)
    return httpx.Request(request.method, url, headers=request.headers, extensions=request.extensions)


class PublicFront(httpx.HTTPTransport):
    """Reaches the public address at the hostile server on loopback (the test's whole network)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return super().handle_request(_to_loopback(request, self.port))


class AsyncPublicFront(httpx.AsyncHTTPTransport):
    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await super().handle_async_request(_to_loopback(request, self.port))


def song_host(locations: dict[str, str]) -> Any:
    def handler(req: RawRequest, sock: Any) -> None:
        if req.path in locations:
            respond(sock, 302, {}, {"Location": locations[req.path]})
        elif req.path == "/status":
            respond(sock, 200, raw=SECRET)
        else:
            respond(sock, 200, raw=MP3, headers={"Content-Type": "audio/mpeg"})

    return handler


@pytest.fixture
def host() -> Any:
    locations: dict[str, str] = {}
    with HostileServer(song_host(locations)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        locations.update(
            {
                "/loopback.mp3": f"http://127.0.0.1:{port}/status",
                "/private.mp3": f"http://192.168.1.20:{port}/status",
                "/metadata.mp3": "http://169.254.169.254/latest/meta-data/iam",
                "/v6.mp3": f"http://[::1]:{port}/status",
                "/moved.mp3": f"http://{PUBLIC}:{port}/cdn/song.mp3",  # public to public: followed
            }
        )
        yield server, port


INWARD = ("/loopback.mp3", "/private.mp3", "/metadata.mp3", "/v6.mp3")


def test_the_sync_client_refuses_a_public_hosts_redirect_inward_and_follows_one_outward(
    host: Any, tmp_path: Path
) -> None:
    server, port = host
    http = httpx.Client(transport=PublicFront(port))
    with MusicClient("sk-redirect-test", http_client=http, journal=False, archive=False) as client:
        for path in INWARD:
            with pytest.raises(DownloadError, match="redirect"):
                client.download(f"http://{PUBLIC}:{port}{path}", tmp_path / "in")
        assert not (tmp_path / "in").exists() or list((tmp_path / "in").iterdir()) == []
        saved = client.download(f"http://{PUBLIC}:{port}/moved.mp3", tmp_path / "out")
    assert saved.read_bytes() == MP3
    assert "/status" not in [r.path for r in server.requests]  # never even asked


def test_the_async_client_refuses_it_too(host: Any, tmp_path: Path) -> None:
    server, port = host

    async def run() -> Path:
        http = httpx.AsyncClient(transport=AsyncPublicFront(port))
        async with AsyncMusicClient("sk-redirect-test", http_client=http, journal=False, archive=False) as client:
            for path in INWARD:
                with pytest.raises(DownloadError, match="redirect"):
                    await client.download(f"http://{PUBLIC}:{port}{path}", tmp_path / "in")
            return await client.download(f"http://{PUBLIC}:{port}/moved.mp3", tmp_path / "out")

    assert asyncio.run(run()).read_bytes() == MP3
    assert "/status" not in [r.path for r in server.requests]


def test_a_loopback_song_host_may_still_redirect_on_loopback(tmp_path: Path) -> None:
    locations: dict[str, str] = {}
    with HostileServer(song_host(locations)) as server:
        locations["/a.mp3"] = "/b.mp3"  # the sandbox's way: loopback to loopback
        with MusicClient("sk-redirect-test", journal=False, archive=False) as client:
            saved = client.download(f"{server.url}/a.mp3", tmp_path)
    assert saved.read_bytes() == MP3
