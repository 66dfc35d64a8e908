"""Issue 39, "the key, the host": the side doors the upstream key and other users' things could leave by. An echo
of the key in any header or any spelling, a redirect to a foreign Host, another user's file URL in an upload, an
id of another user's that answers by another path than a missing one."""

from __future__ import annotations

import json
import socket
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import httpx
from gateway_helpers import GatewayThread, add_user
from hostile_server import HostileServer, RawRequest, respond

SLASHED_KEY = "Qm/7+zR/kp+9Lw/XX4+cc"
"""An upstream key holding `/` and `+`: its URL-encoded and JSON-escaped spellings differ from it."""


def _spellings(key: str) -> list[str]:
    return [
        key,
        key.upper(),
        urllib.parse.quote(key, safe=""),
        urllib.parse.quote(key, safe="").lower(),
        urllib.parse.quote_plus(key),
        key.replace("/", "\\/"),
    ]


def test_the_key_echoed_in_any_header_or_spelling_never_reaches_a_caller(
    tmp_path: Path, clean_env: None, hostile_server: Callable[..., HostileServer]
) -> None:
    def answer(request: RawRequest, sock: socket.socket) -> None:
        if request.path == "/v1/get_api_key_info":
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 50}})
            return
        echoes = _spellings(SLASHED_KEY)
        body = json.dumps({"status": 429, "message": "slow down " + " ".join(echoes)}).encode()
        body = body.replace(b"\\\\/", b"\\/")  # the JSON-escaped spelling as a server writes it: `\/`
        headers = {
            "Content-Type": f"application/json; charset=utf-8; k={echoes[2]}",
            "Retry-After": echoes[5],
            "Retry-After-Ms": echoes[1],
            "X-Echo": echoes[0],
            "X-Key-" + echoes[4].replace("%", ""): "1",
        }
        respond(sock, 429, raw=body, headers=headers)

    server = hostile_server(answer)
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "erin")
    with GatewayThread(database, server.url, server.url, key=SLASHED_KEY) as gateway:
        answered = httpx.get(gateway.url + "/v1/music/tasks?ids=t9", headers={"x-api-key": token}, timeout=30)
    seen = answered.content.decode("latin-1") + "\n" + "\n".join(f"{k}: {v}" for k, v in answered.headers.items())
    assert answered.status_code == 429 and "slow down" in seen
    lowered = seen.lower()
    for spelling in _spellings(SLASHED_KEY):
        assert spelling.lower() not in lowered, spelling
    assert not [name for name in answered.headers if name.lower().startswith("x-")]  # an allow-list: no X-* at all
