"""Holes found by attacking the gateway's engine paths (issue 37): a price read from a body field the engine reads
otherwise, and what must hold on the paths and keys around them. Each test failed before its fix."""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, cli, dollar_user, engine_calls, engines_gateway_over
from hostile_server import HostileServer, RawRequest, respond
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.sandbox import Sandbox


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


@pytest.fixture
def engines_gateway(database: str, upstream: Sandbox, clean_env: None) -> Iterator[GatewayThread]:
    with engines_gateway_over(database, upstream) as running:
        yield running


def plan(*seconds: int) -> dict[str, Any]:
    return {
        "positive_global_styles": ["slow drone"],
        "negative_global_styles": [],
        "sections": [
            {"section_name": f"part {i}", "positive_local_styles": [], "negative_local_styles": [],
             "duration_ms": s * 1000, "lines": []}
            for i, s in enumerate(seconds)
        ],
    }  # fmt: skip


@pytest.mark.parametrize("length", [3_000, 0, 10_000])
def test_a_plans_sections_price_the_song_whatever_music_length_ms_says(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, length: int
) -> None:
    """ElevenLabs makes a planned song as long as its sections (music_length_ms goes with a prompt): a body naming a
    3 s length beside a ten-minute plan must be priced at ten minutes, not at 3 s."""
    token = dollar_user(database, "uma", "1")  # far below ten minutes ($7.50)
    body = {"composition_plan": plan(120, 120, 120, 120, 120), "music_length_ms": length}
    answer = httpx.post(engines_gateway.url + "/v1/music", json=body, headers={"xi-api-key": token}, timeout=120)
    assert answer.status_code == 402, (answer.status_code, answer.text[:200])
    assert upstream.request_counts().get("/v1/music") is None and engine_calls(database) == []


LYRIA_CLIP = "/v1beta/models/lyria-3-clip-preview:generateContent"


def b64_forms(key: bytes) -> list[bytes]:
    """The key's run in a base64 text at each of the three alignments it can fall at (standard and URL-safe)."""
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + key + b"\0\0")
        start, end = -(-8 * shift // 6), (8 * (shift + len(key))) // 6
        forms += [encoded[start:end], encoded[start:end].replace(b"+", b"-").replace(b"/", b"_")]
    return forms


@pytest.fixture
def key_in_audio(hostile_server: Callable[..., HostileServer]) -> HostileServer:
    """A Lyria engine that answers a clip whose audio holds the key it was sent, and an error note holding the key
    base64-encoded at another alignment: Gemini carries audio as base64 inside its JSON."""

    def handler(request: RawRequest, sock: Any) -> None:
        key = (request.headers.get("x-goog-api-key") or "").encode()
        audio = b"ID3" + bytes(range(256)) + key + bytes(range(200))
        answer = {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"text": "a clip " + base64.b64encode(b"x" + key).decode()},
                            {"inlineData": {"mimeType": "audio/mpeg", "data": base64.b64encode(audio).decode()}},
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "modelVersion": base64.urlsafe_b64encode(b"ab" + key).decode(),
        }
        respond(sock, 200, answer)

    return hostile_server(handler)


def test_the_team_key_is_scrubbed_from_base64_in_a_gemini_answer(
    tmp_path: Path, clean_env: None, upstream: Sandbox, key_in_audio: HostileServer
) -> None:
    """The docs say the key is scrubbed 'even inside audio bytes': Gemini's audio is base64 in JSON, so the key the
    engine put in the audio (or base64-encoded anywhere in the answer) reached the caller whole."""
    database = str(tmp_path / "gateway.sqlite3")
    key = "AIzaSyTeam-Key_0123456789abcdefGHIJ"
    token = dollar_user(database, "vic", "1")
    with GatewayThread(
        database, upstream.base_url, upstream.v2_base_url, engines={"lyria": (key_in_audio.url, key)}
    ) as running:
        answer = httpx.post(
            running.url + LYRIA_CLIP, json={"contents": []}, headers={"x-goog-api-key": token}, timeout=60
        )
    assert answer.status_code == 200, answer.text[:300]
    found = [f for f in b64_forms(key.encode()) if f in answer.content]
    assert not found, found
    parts = answer.json()["candidates"][0]["content"]["parts"]
    audio = base64.b64decode(parts[1]["inlineData"]["data"])
    assert key.encode() not in audio and audio.startswith(b"ID3")  # still a decodable answer
    assert [r["state"] for r in engine_calls(database)] == ["done"]


def wav(seconds: float, rate: int = 8_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(bytes([128]) * int(seconds * rate))
    return out.getvalue()


def multipart(*parts: tuple[str, bytes, str | None]) -> tuple[bytes, str]:
    """A raw multipart/form-data body (name, value, filename) in the order given, repeats kept."""
    boundary = "hole-boundary-1"
    chunks = []
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        kind = "Content-Type: audio/wav\r\n" if filename else ""
        chunks.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n{kind}\r\n".encode() + value + b"\r\n")
    return b"".join(chunks) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize("field", ["file", "stem_variation_id"])
def test_a_stem_upload_naming_a_field_twice_is_refused(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, field: str
) -> None:
    """The gateway read the first `file` of a multipart body and priced its length; the engine (the sandbox, and a
    form parser that keeps the last value) separated the last: a 1 s song priced, a three-minute song separated."""
    token = dollar_user(database, "wes", "1")  # one started minute ($0.75), not three ($2.25)
    parts = [("file", wav(1), "short.wav"), ("file", wav(180), "long.wav")] if field == "file" else [
        ("file", wav(1), "short.wav"), ("stem_variation_id", b"two_stems_v1", None),
        ("stem_variation_id", b"six_stems_v1", None),
    ]  # fmt: skip
    body, content_type = multipart(*parts)
    headers = {"xi-api-key": token, "content-type": content_type}
    answer = httpx.post(engines_gateway.url + "/v1/music/stem-separation", content=body, headers=headers, timeout=60)
    assert answer.status_code == 422, (answer.status_code, answer.text[:200])
    assert upstream.request_counts().get("/v1/music/stem-separation") is None and engine_calls(database) == []


@pytest.mark.parametrize(
    "config",
    [
        {"generationConfig": {"candidateCount": 4}},
        {"generation_config": {"candidate_count": 2}},  # Google's JSON reader takes proto field names too
        {"generationConfig": {"candidate_count": "3"}},
        {"generationConfig": {"candidateCount": 1}, "generation_config": {"candidateCount": 8}},
    ],
)
def test_a_gemini_body_asking_for_more_than_one_song_is_refused(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, config: dict[str, Any]
) -> None:
    """The gateway prices one clip per call; Gemini's candidateCount asks for that many answers. A body asking for
    more than one (in any spelling Google reads) is refused 400 before anything is held or sent."""
    token = dollar_user(database, "xan", "5")
    body = {"contents": [{"role": "user", "parts": [{"text": "four clips for one"}]}], **config}
    answer = httpx.post(engines_gateway.url + LYRIA_CLIP, json=body, headers={"x-goog-api-key": token}, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["status"] == "INVALID_ARGUMENT", answer.text[:200]
    assert upstream.request_counts().get(LYRIA_CLIP) is None and engine_calls(database) == []
    one = {"contents": body["contents"], "generationConfig": {"candidateCount": 1}}
    assert httpx.post(engines_gateway.url + LYRIA_CLIP, json=one, headers={"x-goog-api-key": token}).status_code == 200


def form_files(content_type: str, body: bytes) -> list[tuple[bytes, bytes]]:
    """(field name, bytes) of each file part as a FastAPI/Starlette server reads it (python-multipart)."""
    parse_form = pytest.importorskip("python_multipart").parse_form  # installed beside starlette, not pinned here
    found: list[Any] = []
    headers = {"Content-Type": content_type.encode(), "Content-Length": str(len(body)).encode()}
    parse_form(headers, io.BytesIO(body), lambda field: None, found.append)
    out = []
    for part in found:
        part.file_object.seek(0)
        out.append((part.field_name, part.file_object.read()))
    return out


def test_the_engine_separates_exactly_the_upload_that_was_priced(
    tmp_path: Path, clean_env: None, upstream: Sandbox, hostile_server: Callable[..., HostileServer]
) -> None:
    """A content type naming its boundary twice: the gateway's reader takes the first, python-multipart (FastAPI's,
    the engines' kind of server) the last. One body held a 1 s song under the first boundary (a preamble to the
    other) and a three-minute song under the second: priced at one started minute, the engine separated three."""
    engine = hostile_server(lambda request, sock: respond(sock, 200, raw=b"PK\x03\x04stems", headers={
        "Content-Type": "application/zip"}))  # fmt: skip
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "yui", "1")
    short, long = wav(1), wav(180)
    part = 'Content-Disposition: form-data; name="file"; filename="{}"\r\nContent-Type: audio/wav\r\n\r\n'
    body = (
        f"--bbb\r\n{part.format('long.wav')}".encode() + long + b"\r\n--bbb--\r\n"
        + f"--aaa\r\n{part.format('short.wav')}".encode() + short + b"\r\n--aaa--\r\n"
    )  # fmt: skip
    content_type = "multipart/form-data; boundary=aaa; boundary=bbb"
    assert [len(f) for _n, f in form_files(content_type, body)] == [len(long)]  # what such an engine reads
    with GatewayThread(
        database, upstream.base_url, upstream.v2_base_url, engines={"elevenlabs": (engine.url, "sk_t")}
    ) as running:
        headers = {"xi-api-key": token, "content-type": content_type}
        answer = httpx.post(running.url + "/v1/music/stem-separation", content=body, headers=headers, timeout=60)
    if answer.status_code == 200:  # sent: the engine must have got the priced song and nothing else
        (sent,) = engine.requests
        assert form_files(sent.headers.get("content-type", ""), sent.body) == [(b"file", short)]
    else:
        assert answer.status_code == 422 and engine.requests == []


# -- what held (guards: these passed on arrival) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/music/",
        "/v1/music/stream",
        "/v1/music/plan",
        "//v1/music",
        "/v1/./music",
        "/v1/music/../music",
        "/v1beta/models/lyria-3-pro-preview:streamGenerateContent",
        "/v1beta/models/lyria-3-pro-preview:countTokens",
        "/v1beta/models/lyria-3-clip-preview:generateContent/",
        "/v1beta/models/lyria-3-clip-preview%2F..%2Flyria-3-pro-preview:generateContent",
        "/v1beta/models/lyria-3-pro-preview:generateContent%3F:generateContent",
        "/v1alpha/models/lyria-3-clip-preview:generateContent",
    ],
)
def test_paths_the_gateway_does_not_serve_send_nothing(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, path: str
) -> None:
    token = dollar_user(database, "zed", "5")
    headers = {"xi-api-key": token, "x-goog-api-key": token, "content-type": "application/json"}
    with socket.create_connection(("127.0.0.1", engines_gateway.port)) as sock:  # the path exactly as written
        body = json.dumps({"prompt": "x", "music_length_ms": 3_000, "contents": []}).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Length: {len(body)}\r\n".encode()
                     + b"Connection: close\r\n\r\n" + body)  # fmt: skip
        status = sock.makefile("rb").readline().split()[1]
    assert status in (b"404", b"405"), (path, status)
    assert set(upstream.request_counts()) <= {"/v1/get_api_key_info"} and engine_calls(database) == []


def test_tokens_in_the_wrong_place_and_a_key_reused_after_a_lost_answer(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token, other = dollar_user(database, "amy", "5"), dollar_user(database, "bo", "5")
    assert cli("user", "revoke", "bo", "--database", database)[0] == 0
    body = {"prompt": "x", "music_length_ms": 3_000}
    url = engines_gateway.url + "/v1/music"
    for headers in ({"x-goog-api-key": token}, {"authorization": f"Bearer {token}"}, {"x-api-key": token},
                    {"xi-api-key": other}, {"xi-api-key": token.upper()}, {}):  # fmt: skip
        assert httpx.post(url, json=body, headers=headers).status_code == 401, headers
    assert httpx.post(url, params={"key": token}, json=body).status_code == 401  # Gemini's ?key= is Gemini's only
    gemini = engines_gateway.url + LYRIA_CLIP
    assert httpx.post(gemini, json={}, headers={"xi-api-key": token}).status_code == 403
    assert httpx.post(gemini, json={}, params={"KEY": token}).status_code == 403
    assert upstream.request_counts().get("/v1/music") is None and engine_calls(database) == []
    upstream.set_faults("drop:after=true:path=/v1/music")  # the song is made, its answer lost
    first = httpx.post(url, json=body, headers={"xi-api-key": token, "Idempotency-Key": "k"}, timeout=60)
    assert first.status_code == 503
    changed = httpx.post(
        url, json={**body, "music_length_ms": 600_000}, headers={"xi-api-key": token, "Idempotency-Key": "k"}
    )
    assert changed.status_code == 409  # a lost call's key never sends another body
    assert upstream.request_counts().get("/v1/music") == 1


def aiff(seconds: float, rate: int = 8_000) -> bytes:
    """An AIFF song (8-bit mono): a format the gateway's first audio reader (miniaudio) cannot read."""
    frames = int(seconds * rate)
    exponent = rate.bit_length() - 1
    comm = struct.pack(">hIh", 1, frames, 8) + struct.pack(">HQ", exponent + 16383, rate << (63 - exponent))
    ssnd = struct.pack(">II", 0, 0) + b"\0" * frames
    chunks = b"COMM" + struct.pack(">I", len(comm)) + comm + b"SSND" + struct.pack(">I", len(ssnd)) + ssnd
    return b"FORM" + struct.pack(">I", 4 + len(chunks)) + b"AIFF" + chunks


def test_a_stem_upload_longer_than_ten_minutes_is_priced_at_its_length_whatever_its_format(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    """An upload whose length the gateway could not read was priced as the longest song (ten minutes, $7.50); a
    fifteen-minute AIFF ($11.25, as the sandbox reads it) went through against a $10 budget."""
    token = dollar_user(database, "cy", "10")
    files = {"file": ("long.aiff", aiff(900), "audio/aiff")}
    answer = httpx.post(
        engines_gateway.url + "/v1/music/stem-separation", files=files, headers={"xi-api-key": token}, timeout=60
    )
    assert answer.status_code == 402, (answer.status_code, answer.text[:200])
    assert upstream.request_counts().get("/v1/music/stem-separation") is None and engine_calls(database) == []


def test_an_engine_header_that_cannot_be_passed_back_does_not_lose_a_paid_song(
    tmp_path: Path, clean_env: None, upstream: Sandbox, hostile_server: Callable[..., HostileServer]
) -> None:
    """An engine's song-id in UTF-8 ('€' is no latin-1 header byte): the answer could not be written, so the caller
    got 503 'nothing was sent or charged' for a song the gateway had recorded as made and charged."""
    audio = b"ID3" + bytes(range(256)) * 8

    def handler(request: RawRequest, sock: Any) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nSong-Id: s\xc3\xb3ng-\xe2\x82\xac\r\n"
        sock.sendall(head + f"Content-Length: {len(audio)}\r\nConnection: close\r\n\r\n".encode() + audio)

    engine = hostile_server(handler)
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "dee", "5")
    with GatewayThread(
        database, upstream.base_url, upstream.v2_base_url, engines={"elevenlabs": (engine.url, "sk_t")}
    ) as running:
        answer = httpx.post(running.url + "/v1/music", json={"prompt": "x", "music_length_ms": 3_000},
                            headers={"xi-api-key": token}, timeout=60)  # fmt: skip
    assert [r["state"] for r in engine_calls(database)] == ["done"]
    assert answer.status_code == 200 and answer.content == audio, answer.text[:200]


@pytest.mark.parametrize("named", ["models/lyria-3-pro-preview", "lyria-3-pro-preview", ["x"], ""])
def test_a_gemini_body_naming_another_model_than_its_path_is_refused(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, named: Any
) -> None:
    """The price comes from the path's model (the clip, $0.04); the request message Google reads also has a `model`
    field. A body naming another model than the path is refused before anything is held or sent."""
    token = dollar_user(database, "eve", "5")
    body = {"model": named, "contents": [{"role": "user", "parts": [{"text": "pro for the price of a clip"}]}]}
    answer = httpx.post(engines_gateway.url + LYRIA_CLIP, json=body, headers={"x-goog-api-key": token}, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["status"] == "INVALID_ARGUMENT", answer.text[:200]
    assert upstream.request_counts().get(LYRIA_CLIP) is None and engine_calls(database) == []
    same = {**body, "model": "models/lyria-3-clip-preview"}  # the path's own model, as Google's SDKs may send it
    assert httpx.post(engines_gateway.url + LYRIA_CLIP, json=same, headers={"x-goog-api-key": token}).status_code == 200


@pytest.mark.slow  # a real `gateway serve` process
def test_a_served_gateway_keeps_the_engine_keys_out_of_its_log_and_ledger(
    tmp_path: Path, clean_env: None, upstream: Sandbox, hostile_server: Callable[..., HostileServer]
) -> None:
    """Guard (held on arrival): an engine that echoes its key in every form, then one that hangs up mid-answer,
    behind a real `gateway serve`: the key is in no answer, no log line and no byte of the ledger."""
    import os
    import subprocess
    import sys

    from gateway_helpers import free_port, wait_for_port

    key = "sk_Served/Key+Canary=0042"
    calls: list[int] = []

    def handler(request: RawRequest, sock: Any) -> None:
        calls.append(1)
        sent = request.headers.get("xi-api-key") or request.headers.get("x-goog-api-key") or ""
        if len(calls) % 2:
            echoed = f"{sent} {sent.upper()} {base64.b64encode(sent.encode()).decode()}"
            respond(sock, 500, {"detail": {"status": "boom", "message": echoed}}, headers={"retry-after": sent})
        else:
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: 999\r\n\r\n" + sent.encode())

    engine = hostile_server(handler)
    database = str(tmp_path / "gateway.sqlite3")
    token = dollar_user(database, "fay", "20")
    port, log = free_port(), tmp_path / "serve.log"
    env = {**os.environ, "MUSICGEN_UPSTREAM_KEY": CANARY_KEY, "ELEVENLABS_API_KEY": key, "GEMINI_API_KEY": key}
    command = [sys.executable, "-m", "ipymusicgen", "gateway", "serve", "--database", database, "--port", str(port),
               "--upstream", upstream.base_url, "--upstream-v2", upstream.v2_base_url,
               "--upstream-elevenlabs", engine.url, "--upstream-gemini", engine.url]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_port(port, process)
            url = f"http://127.0.0.1:{port}"
            answers = [
                httpx.post(url + "/v1/music", json={"prompt": "x", "music_length_ms": 3_000},
                           headers={"xi-api-key": token}, timeout=60)
                for _ in range(2)
            ] + [
                httpx.post(url + LYRIA_CLIP, params={"key": token}, json={"contents": []}, timeout=60)
                for _ in range(2)
            ]  # fmt: skip
        finally:
            process.terminate()
            process.wait(30)
    assert sorted(a.status_code for a in answers) == [500, 500, 503, 503]  # the engine's 500s, and cut answers
    forms = [key, key.upper(), key.lower(), base64.b64encode(key.encode()).decode()]
    for answer in answers:
        seen = (answer.text + json.dumps(dict(answer.headers))).lower()
        assert not [f for f in forms if f.lower() in seen]
    written = log.read_bytes() + Path(database).read_bytes()
    assert not [f for f in forms if f.encode() in written], log.read_text()[-500:]
    assert [r["state"] for r in engine_calls(database)] == ["unknown"] * 4
