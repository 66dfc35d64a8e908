"""Issue 39, "the key, the host": the side doors the upstream key and other users' things could leave by. An echo
of the key in any header or any spelling, a redirect to a foreign Host, another user's file URL in an upload, an
id of another user's that answers by another path than a missing one."""

from __future__ import annotations

import functools
import json
import socket
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, post
from helpers import wait_until
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

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


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 10_000}, max_running=50) as server:
        yield server


class Recording:
    """A ledger whose calls are written down by name (the gateway's ledger, wrapped for one test)."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ledger, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return record


PATH_CALLS = {"owned", "owns_song", "owns_singer", "tasks_of", "add_songs", "add_tasks"}
"""The ledger calls a read's path makes (not the token check, whose cache ages, nor the meter's background ones)."""


def test_another_users_id_seen_here_takes_the_path_of_a_missing_id(
    tmp_path: Path, clean_env: None, sandbox: Sandbox
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    kim, lee = add_user(database, "kim"), add_user(database, "lee")
    with GatewayThread(database, sandbox.base_url, sandbox.v2_base_url) as gateway:
        made = post(gateway.url, "/v1/music/generate", kim, {"action": "auto", "style": "s", "mv": "MFV2.0"})
        task_id = made.json()["data"]["ids"][0]
        seen = httpx.get(gateway.url + f"/v1/music/tasks?ids={task_id}", headers={"x-api-key": kim}, timeout=30)
        song_id = seen.json()[0]["song_id"] if isinstance(seen.json(), list) else seen.json()["data"][0]["song_id"]
        recording = Recording(gateway.gateway.ledger)
        gateway.gateway.ledger = recording
        paths: dict[str, tuple[list[str], dict[str, int], int]] = {}
        for name, asked in (
            ("seen", f"/v1/music/tasks?ids={task_id}"),
            ("missing", "/v1/music/tasks?ids=never-made-4242"),
            ("seen v2", f"/v2/query?song_id={song_id}"),
            ("missing v2", "/v2/query?song_id=never-sung-4242"),
        ):
            httpx.get(gateway.url + asked, headers={"x-api-key": lee}, timeout=30)  # lee's token now remembered
            before, recording.calls = dict(sandbox.request_counts()), []
            answered = httpx.get(gateway.url + asked, headers={"x-api-key": lee}, timeout=30)
            after = sandbox.request_counts()
            upstream_reads = {p: n - before.get(p, 0) for p, n in after.items() if n != before.get(p, 0)}
            upstream_reads.pop("/v1/get_api_key_info", None)
            paths[name] = ([c for c in recording.calls if c in PATH_CALLS], upstream_reads, answered.status_code)
    assert paths["seen"] == paths["missing"], paths
    assert paths["seen v2"] == paths["missing v2"], paths
    assert paths["seen"][0] == ["owned"]  # asked of the ledger, as a missing id is


def test_a_poll_answers_while_another_connection_holds_the_sqlite_write_lock(
    tmp_path: Path, clean_env: None, sandbox: Sandbox
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    mia, ned = add_user(database, "mia"), add_user(database, "ned")
    with GatewayThread(database, sandbox.base_url, sandbox.v2_base_url) as gateway:
        made = post(gateway.url, "/v1/music/generate", mia, {"action": "auto", "style": "s", "mv": "MFV2.0"})
        ids = ",".join(made.json()["data"]["ids"])
        holder = sqlite3.connect(database, isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the ledger (as another process would)
        pool = ThreadPoolExecutor(1)
        try:
            # Her first poll brings song ids the ledger has not seen: recording them must not hold the answer.
            first = httpx.get(gateway.url + f"/v1/music/tasks?ids={ids}", headers={"x-api-key": mia}, timeout=10)
            assert first.status_code == 200
            body = {"action": "auto", "style": "t", "mv": "MFV2.0"}
            recording = Recording(gateway.gateway.ledger)
            gateway.gateway.ledger = recording
            waiting = pool.submit(post, gateway.url, "/v1/music/generate", ned, body)
            wait_until(lambda: "reserve" in recording.calls, "ned's call waiting for the lock in its reservation")
            again = httpx.get(gateway.url + f"/v1/music/tasks?ids={ids}", headers={"x-api-key": mia}, timeout=10)
            assert again.status_code == 200 and not waiting.done()  # answered while ned's call waits on the lock
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert waiting.result(60).status_code == 200  # the lock freed: ned's call goes on
        pool.shutdown()


def test_an_upload_may_name_only_the_callers_own_files_or_one_off_the_file_host(
    tmp_path: Path, clean_env: None, sandbox: Sandbox
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    oli, pam = add_user(database, "oli"), add_user(database, "pam")
    port = sandbox.base_url.rsplit(":", 1)[1]

    def finished_audio(gateway: GatewayThread, token: str) -> str:
        made = post(gateway.url, "/v1/music/generate", token, {"action": "auto", "style": "s", "mv": "MFV2.0"})
        task_id = made.json()["data"]["ids"][0]
        found: list[str] = []

        def done() -> bool:
            answer = httpx.get(gateway.url + f"/v1/music/tasks?ids={task_id}", headers={"x-api-key": token}).json()
            records = answer if isinstance(answer, list) else answer.get("data") or []
            found[:] = [r["audio_url"] for r in records if r.get("audio_url") and "preview" not in r["audio_url"]]
            return bool(found)

        wait_until(done, "a finished song")
        return found[0]

    with GatewayThread(database, sandbox.base_url, sandbox.v2_base_url) as gateway:
        olis, pams = finished_audio(gateway, oli), finished_audio(gateway, pam)
        path = olis.split(port, 1)[1]
        forged = [
            olis,
            olis.replace("http://", "HTTP://"),
            f"http://localhost:{port}{path}",
            f"http://127.1:{port}{path}",
            f"http://0x7f000001:{port}{path}",
            f"http://127.0.0.1:{port}{path}?again=1",
        ]
        before = sandbox.request_counts().get("/v1/music/generate", 0)
        for url in forged:
            for action in ("upload", "upload_extend"):
                refused = post(gateway.url, "/v1/music/generate", pam, {"action": action, "audio_url": url})
                assert refused.status_code == 422 and "audio_url" in refused.text, (url, refused.text)
        assert sandbox.request_counts().get("/v1/music/generate", 0) == before  # none of them went upstream
        own = post(gateway.url, "/v1/music/generate", pam, {"action": "upload", "audio_url": pams})
        assert own.status_code == 200 and own.json()["status"] == 200, own.text
        outside = post(
            gateway.url, "/v1/music/generate", pam, {"action": "upload", "audio_url": "https://cdn.example.net/a.mp3"}
        )
        assert outside.status_code != 422  # off the file host: the upstream's to judge
        assert sandbox.request_counts().get("/v1/music/generate", 0) == before + 2
    with open_ledger(database) as ledger:
        assert len([c for c in ledger.calls() if c["user"] == "pam"]) == 3  # her own song, two uploads
