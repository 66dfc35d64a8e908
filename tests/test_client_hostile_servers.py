"""The client core against hostile servers and odd input, over real sockets on 127.0.0.1.

Each test drives a real `MusicClient`/`AsyncMusicClient` against the sandbox or a tiny hostile server
(`hostile_server.py`): drip-fed and never-ending bodies, redirects, huge and nested bodies, key echoes,
Ctrl-C and cancellation during a paid send. Paid work is never lost from sight: the journal says unknown.
"""

from __future__ import annotations

import asyncio
import math
import signal
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from hostile_server import HostileServer, RawRequest, respond, wait_for

from ipymusicgen.client.faces import AsyncMusicClient, MusicClient, Resumed
from ipymusicgen.config import Settings, is_loopback
from ipymusicgen.errors import (
    APIResponseValidationError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    CreateOutcomeUnknownError,
    EnvelopeError,
    IgnoredFieldsWarning,
    InsecureTransportError,
    InsufficientCreditsError,
    InternalServerError,
    MissingKeyError,
    MusicGenError,
    RedirectRefusedError,
    RequestValidationError,
    ServerAuthenticationError,
    UnprocessableEntityError,
    WaitTimeoutError,
)
from ipymusicgen.models.schema import V2Request, build_v2_request
from ipymusicgen.sandbox import DEMO_KEY, Sandbox
from ipymusicgen.storage.journal import Journal, JournalWriteWarning

pytestmark = pytest.mark.usefixtures("clean_env")  # no MUSICGEN_* setting of the machine leaks in

KEY = "sk-HARDEN-CANARY-7f3a9c"


def hostile(handler: Any) -> HostileServer:
    return HostileServer(handler)


def client_for(server: HostileServer, journal: Journal | None = None, **kwargs: Any) -> MusicClient:
    kwargs.setdefault("timeout", 1.0)
    kwargs.setdefault("max_retries", 0)
    return MusicClient(KEY, base_url=server.url, v2_base_url=server.url, journal=journal or False, **kwargs)


def async_client_for(server: HostileServer, journal: Journal | None = None, **kwargs: Any) -> AsyncMusicClient:
    kwargs.setdefault("timeout", 1.0)
    kwargs.setdefault("max_retries", 0)
    return AsyncMusicClient(KEY, base_url=server.url, v2_base_url=server.url, journal=journal or False, **kwargs)


def envelope(data: Any, status: int = 200, message: str = "Success") -> dict[str, Any]:
    return {"status": status, "message": message, "data": data}


def sent_paths(sandbox: Sandbox) -> dict[str, int]:
    return {path: n for path, n in sandbox.request_counts().items() if n}


# ---------------------------------------------------------------------------------------------------
# 1. Paid calls: fields by keyword, real ids, a key, and Ctrl-C leaves the attempt unknown.


@pytest.mark.parametrize("positional", ["lo-fi beat", 42, ["style", "x"], b"bytes"])
def test_a_positional_description_is_refused_and_nothing_is_sent(sandbox: Sandbox, positional: Any) -> None:
    with sandbox.client() as client:
        with pytest.raises(RequestValidationError, match="by keyword"):
            client.generate(positional)
        with pytest.raises(RequestValidationError, match="by keyword"):
            client.submit_v2(positional)
    assert sent_paths(sandbox) == {}


@pytest.mark.parametrize("song_id", [None, "", "   ", "a,b", 7])
def test_song_id_endpoints_refuse_a_missing_or_odd_id(sandbox: Sandbox, song_id: Any) -> None:
    with sandbox.client() as client:
        for call in (client.generate_vibe, client.generate_wav, client.generate_mp4, client.query_v2):
            with pytest.raises(RequestValidationError, match="song_id"):
                call(song_id)
    assert sent_paths(sandbox) == {}


@pytest.mark.parametrize(
    ("path_answer", "call"),
    [
        (envelope({"ids": []}), lambda c: c.generate(action="auto", style="x")),
        (envelope({}), lambda c: c.generate(action="auto", style="x")),
        (envelope([]), lambda c: c.submit_v2(is_auto=1, model_version="v4.5", prompt="x")),
    ],
)
def test_an_answer_without_ids_is_an_error_and_the_attempt_stays_unknown(
    journal: Journal, path_answer: Any, call: Any
) -> None:
    with (
        hostile(lambda req, sock: respond(sock, 200, path_answer)) as server,
        client_for(server, journal) as client,
        pytest.raises(APIResponseValidationError, match=r"no (task ids|songs)"),
    ):
        call(client)
    (attempt,) = journal.attempts()
    assert attempt.outcome == "unknown"
    assert len(server.requests) == 1


def test_a_paid_call_without_a_key_is_refused_before_sending(journal: Journal) -> None:
    with hostile(lambda req, sock: respond(sock, 500, {"message": "missing api key"})) as server:
        with MusicClient(base_url=server.url, v2_base_url=server.url, journal=journal) as client:
            for call in (
                lambda: client.generate(action="auto", style="x"),
                lambda: client.submit_v2(is_auto=1, model_version="v4.5", prompt="x"),
                lambda: client.lyrics("a song"),
                lambda: client.generate_wav("song-1"),
            ):
                with pytest.raises(MissingKeyError, match="needs an API key"):
                    call()
        assert server.requests == []
    assert journal.attempts() == []


CTRL_C_CHILD = """
import signal
import sys

signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with SIGINT ignored
from ipymusicgen import MusicClient
from ipymusicgen.storage.journal import Journal

url, journal_path, key = sys.argv[1:4]
journal = Journal(journal_path)
with MusicClient(key, base_url=url, v2_base_url=url, journal=journal, max_retries=0, timeout=120) as client:
    try:
        client.generate(action="custom", title="Night drive", style="synthwave")
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
print("not interrupted", flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_during_a_paid_send_journals_the_attempt_as_unknown(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT to a fresh process) while its paid request waits for an answer.

    In its own process, with Python's own Ctrl-C handler: a suite started as a background job (`cmd &` in a
    script) inherits SIGINT ignored, and then neither an in-process signal nor a plain child ever interrupts.
    """
    journal_path = tmp_path / "journal.sqlite3"
    with hostile(lambda req, sock: server.hold(sock)) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", CTRL_C_CHILD, server.url, str(journal_path), KEY],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(server.received, "the paid request to arrive", timeout=120)
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
    assert (child.returncode, out.strip()) == (3, "interrupted"), err[-2000:]
    with Journal(journal_path) as journal:
        (attempt,) = journal.attempts(outcome="unknown")
    assert attempt.payload["title"] == "Night drive"
    assert "interrupted" in (attempt.note or "")
    assert len(server.requests) == 1
    assert KEY not in (out + err)


def test_a_cancelled_async_paid_send_journals_the_attempt_as_unknown(journal: Journal) -> None:
    with hostile(lambda req, sock: server.hold(sock)) as server:

        async def scenario() -> None:
            async with async_client_for(server, journal, timeout=30) as client:
                task = asyncio.create_task(client.submit_v2(is_auto=1, model_version="v4.5", prompt="rain"))
                while not server.received.is_set():
                    await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(scenario())
    (attempt,) = journal.attempts()
    assert attempt.outcome == "unknown" and attempt.payload["prompt"] == "rain"


def test_a_built_request_is_validated_once(sandbox: Sandbox) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build_v2_request(is_auto=1, model_version="v4.5", prompt="rain", title="ignored")
        with sandbox.client() as client:
            songs = client.submit_v2(model)
    assert len(songs) >= 1 and isinstance(model, V2Request)
    assert [w.category for w in caught if issubclass(w.category, IgnoredFieldsWarning)] == [IgnoredFieldsWarning]


class LockedAfterBegin(Journal):
    """A journal another program locks right after the attempt was recorded (any journal may fail so)."""

    def submitted(self, attempt_id: str, ids: list[str], *, v2: bool = False) -> None:
        raise sqlite3.OperationalError("database is locked")


def test_ids_reach_the_caller_when_the_journal_fails_after_the_send(sandbox: Sandbox, tmp_path: Path) -> None:
    journal = LockedAfterBegin(tmp_path / "locked.sqlite3")
    with sandbox.client(journal=journal) as client, pytest.warns(JournalWriteWarning, match="could not record"):
        result = client.generate(action="auto", style="x")
    assert len(result.ids) == 2 and sandbox.request_counts()["/v1/music/generate"] == 1
    journal.close()


# ---------------------------------------------------------------------------------------------------
# 2. Journaling by identity, not by host.


def test_a_real_key_on_loopback_journals_and_the_sandbox_does_not(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_JOURNAL", str(tmp_path / "user.sqlite3"))
    with MusicClient("a-real-key-behind-a-tunnel", base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url) as proxy:
        assert proxy.journal is not None  # a local proxy in front of the paid service is a real service
    with MusicClient(DEMO_KEY, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url) as demo:
        assert demo.journal is None and demo.is_embedded_sandbox
    with sandbox.client() as made:
        assert made.journal is None
    own = Journal(tmp_path / "throwaway.sqlite3")
    with sandbox.client(journal=own) as session_like:
        assert session_like.journal is own
    own.close()


# ---------------------------------------------------------------------------------------------------
# 3. Deadlines: drip-fed and never-ending bodies.

DRIP_BODY = b'{"status": 200, "message": "Success", "data": []}' + b" " * 200


@pytest.mark.slow
def test_a_drip_fed_read_is_bounded_sync_and_async() -> None:
    with hostile(lambda req, sock: server.drip(sock, DRIP_BODY, every=0.05)) as server:
        with client_for(server, timeout=0.5) as client, pytest.raises(APITimeoutError, match="did not answer in time"):
            client.tasks(["t1"])

        async def read() -> None:
            async with async_client_for(server, timeout=0.5) as client:
                await client.tasks(["t1"])

        with pytest.raises(APITimeoutError):
            asyncio.run(read())


@pytest.mark.slow
@pytest.mark.parametrize("face", ["sync", "async"])
def test_drip_fed_headers_are_bounded_too(face: str) -> None:
    """The status line and headers one byte per 0.1 s (~30 s in all): each read is quick, so only a deadline
    on the whole exchange stops it; the client must hang up long before the server is done."""
    with hostile(lambda req, sock: server.drip_head(sock, DRIP_BODY[:60], every=0.1)) as server:
        if face == "sync":
            with client_for(server, timeout=1.0) as client, pytest.raises(APITimeoutError):
                client.tasks(["t1"])
        else:

            async def read() -> None:
                quick_connect = Settings.from_env().with_changes(connect_timeout=0.5)  # its bound adds the connect
                async with async_client_for(server, timeout=1.0, settings=quick_connect) as client:
                    await client.tasks(["t1"])

            with pytest.raises(APITimeoutError):
                asyncio.run(read())
        server.stop.set()
    assert server.dripped and max(server.dripped) < 200


@pytest.mark.slow
def test_a_drip_fed_paid_answer_is_unknown_and_not_resent(journal: Journal) -> None:
    body = b'{"status": 200, "data": {"ids": ["a", "b"]}}' + b" " * 200
    with (
        hostile(lambda req, sock: server.drip(sock, body, every=0.05)) as server,
        client_for(server, journal, timeout=0.5, max_retries=3) as client,
        pytest.raises(CreateOutcomeUnknownError, match="NOT resent"),
    ):
        client.generate(action="auto", style="drip")
    assert len(server.requests) == 1
    assert [a.outcome for a in journal.attempts()] == ["unknown"]


@pytest.mark.slow
@pytest.mark.parametrize("face", ["sync", "async"])
def test_wait_timeout_bounds_the_exchange_not_only_the_rounds(face: str) -> None:
    """A 100-byte answer drip-fed over 25 s, within the 30 s HTTP timeout: a wait(timeout=1) must hang
    up long before the body ends (the server counts what it got out), not read it to the end."""
    body = b'{"status": 200, "message": "Success", "data": []}' + b" " * 50
    with hostile(lambda req, sock: server.drip(sock, body, every=0.25)) as server:
        kwargs: dict[str, Any] = {"timeout": 30.0, "max_retries": 2}
        if face == "sync":
            with client_for(server, **kwargs) as client, pytest.raises(WaitTimeoutError):
                client.wait(["t1"], timeout=1, interval=0.2)
        else:

            async def scenario() -> None:
                async with async_client_for(server, **kwargs) as client:
                    await client.wait(["t1"], timeout=1, interval=0.2)

            with pytest.raises(WaitTimeoutError):
                asyncio.run(scenario())
        server.stop.set()
    assert server.dripped and max(server.dripped) < len(body)


@pytest.mark.slow
def test_wait_with_a_timeout_ends_against_a_server_that_never_finishes() -> None:
    with (
        hostile(lambda req, sock: server.hold(sock)) as server,
        client_for(server, timeout=0.3) as client,
        pytest.raises(WaitTimeoutError) as caught,
    ):
        client.wait(["t1"], timeout=0.5, interval=0.1)
    assert caught.value.pending == ["t1"]


# ---------------------------------------------------------------------------------------------------
# 4. Bad arguments.


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval": -1},
        {"interval": 0},
        {"interval": math.nan},
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"timeout": -1},
        {"timeout": "10"},
    ],
)
def test_wait_refuses_bad_numbers(sandbox: Sandbox, kwargs: dict[str, Any]) -> None:
    with sandbox.client() as client, pytest.raises(RequestValidationError, match=r"interval|timeout"):
        client.wait(["t1"], **kwargs)
    assert sent_paths(sandbox) == {}


@pytest.mark.parametrize("ids", [None, ["a,b"], [""], ["  "], [None], 5, {"a": 1}, ",", ["ok", "x\ny"]])
def test_odd_ids_are_refused_clearly(sandbox: Sandbox, ids: Any) -> None:
    with sandbox.client() as client:
        with pytest.raises(RequestValidationError, match="ids"):
            client.wait(ids, timeout=1)
        with pytest.raises(RequestValidationError, match="ids"):
            client.tasks(ids)
        if ids is not None:  # v2_ids=None means none
            with pytest.raises(RequestValidationError, match="v2_ids"):
                client.wait([], v2_ids=ids, timeout=1)
        assert client.wait([], timeout=1) == []  # nothing to wait for
    assert sent_paths(sandbox) == {}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_continue_at_is_refused_v1_and_v2(sandbox: Sandbox, value: float) -> None:
    with sandbox.client() as client:
        with pytest.raises(RequestValidationError, match="continue_at"):
            client.generate(action="extend", continue_song_id="s", continue_at=value)
        with pytest.raises(RequestValidationError, match="continue_at"):
            client.submit_v2(is_auto=0, model_version="v4.5", prompt="x", continue_song_id="s", continue_at=value)
    assert sent_paths(sandbox) == {}


# ---------------------------------------------------------------------------------------------------
# 5. Answers the client cannot read are APIResponseValidationError, never RecursionError/MemoryError.

UNREADABLE = [
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-arrays"),
    pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, id="nested-objects"),
    pytest.param(b'{"status": 200, "data": ' + b"[" * 900 + b"]" * 900 + b"}", id="nested-data"),
    pytest.param(b'{"status": 200, "data": 42}', id="number"),
    pytest.param(b'{"status": 200, "data": "tasks"}', id="string"),
    pytest.param(b'{"status": 200, "data": [1, 2]}', id="wrong-items"),
    pytest.param(b'{"status": 200, "data": [{"id": {"x": 1}}]}', id="wrong-id-type"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe\x00garbage", id="binary"),
]


@pytest.mark.parametrize("raw", UNREADABLE)
def test_unreadable_task_answers_are_response_validation_errors(raw: bytes) -> None:
    with hostile(lambda req, sock: respond(sock, 200, raw=raw)) as server, client_for(server) as client:
        with pytest.raises(APIResponseValidationError):
            client.tasks(["t1"])
        with pytest.raises(MusicGenError):
            client.key_info()


def test_a_huge_answer_is_refused_declared_or_streamed() -> None:
    def declared(req: RawRequest, sock: Any) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 52428800\r\n\r\n[")

    def chunked(req: RawRequest, sock: Any) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"[" + b" " * 1_048_575
        try:
            for _ in range(12):
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        except OSError:
            return

    for handler in (declared, chunked):
        with (
            hostile(handler) as server,
            client_for(server, timeout=10) as client,
            pytest.raises(APIResponseValidationError, match="larger than 10 MB"),
        ):
            client.tasks(["t1"])


@pytest.mark.slow
def test_a_422_with_thousands_of_entries_gives_a_short_message() -> None:
    detail = [{"loc": ["body", "style"], "msg": "x" * 500, "type": "value_error"}] * 10_000
    with (
        hostile(lambda req, sock: respond(sock, 422, {"detail": detail})) as server,
        client_for(server) as client,
        pytest.raises(UnprocessableEntityError) as caught,
    ):
        client.key_info()
    assert len(str(caught.value)) < 5000 and "and 9990 more" in str(caught.value)
    assert len(caught.value.detail) == 10_000


def test_a_huge_paid_answer_is_unknown_not_rejected(journal: Journal) -> None:
    def declared(req: RawRequest, sock: Any) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n{")

    with (
        hostile(declared) as server,
        client_for(server, journal) as client,
        pytest.raises(APIResponseValidationError),
    ):
        client.generate(action="auto", style="x")
    assert [a.outcome for a in journal.attempts()] == ["unknown"]


# ---------------------------------------------------------------------------------------------------
# 6. The key goes nowhere it should not.


@pytest.mark.parametrize(
    "url",
    ["HTTP://api.example.com", "Http://api.example.com", "http://localhost.evil.example", "http://127.0.0.1.nip.io"],
)
def test_plain_http_to_another_host_is_refused_whatever_the_spelling(url: str) -> None:
    with pytest.raises(InsecureTransportError):
        MusicClient(KEY, base_url=url, journal=False)


@pytest.mark.parametrize(
    "url", ["http://LOCALHOST:9", "http://localhost.:9", "http://[::1]:9", "http://127.0.0.2:9", "HTTP://127.0.0.1:9"]
)
def test_loopback_is_recognised_however_it_is_spelled(url: str) -> None:
    assert is_loopback(url)
    MusicClient(KEY, base_url=url, v2_base_url=url, journal=False).close()


def test_base_urls_must_be_http(tmp_path: Path) -> None:
    with pytest.raises(RequestValidationError, match="base_url"):
        MusicClient(KEY, base_url="file:///etc/passwd", journal=False)
    with MusicClient(KEY, base_url="  https://api.example.com/ \n", journal=False) as client:
        assert client.settings.base_url == "https://api.example.com"


@pytest.mark.parametrize(
    "change",
    [{"timeout": math.nan}, {"timeout": -1}, {"timeout": math.inf}, {"max_retries": -1}, {"poll_interval": 0}],
)
def test_odd_settings_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(RequestValidationError, match=next(iter(change))):
        MusicClient(KEY, settings=Settings(**change), journal=False)


def test_a_pasted_key_is_stripped_and_a_broken_one_refused_without_showing_it(sandbox: Sandbox) -> None:
    assert Settings(api_key=f"  {DEMO_KEY}\n").key_value() == DEMO_KEY
    with sandbox.client(api_key=f"{DEMO_KEY}\r\n") as client:
        assert client.key_info().key_music_counts == 100
    for broken in (f"{KEY}\nX-Evil: 1", f"{KEY} more", f"{KEY}é"):
        with pytest.raises(RequestValidationError) as caught:
            MusicClient(broken, base_url=sandbox.base_url, journal=False)
        assert KEY not in str(caught.value) and KEY not in repr(caught.value)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_api_calls_never_follow_redirects_even_with_a_following_http_client(journal: Journal, status: int) -> None:
    with hostile(lambda req, sock: respond(sock, 200, envelope([]))) as thief:
        location = f"{thief.url.replace('127.0.0.1', 'localhost')}/steal?k={KEY}"
        with hostile(lambda req, sock: respond(sock, status, {}, {"Location": location})) as server:
            follower = httpx.Client(follow_redirects=True)
            with client_for(server, journal, http_client=follower) as client:
                with pytest.raises(RedirectRefusedError) as caught:
                    client.tasks(["t1"])
                assert "'localhost'" in str(caught.value) and KEY not in str(caught.value)
                with pytest.raises(CreateOutcomeUnknownError):  # never followed; a paid create may have landed
                    client.generate(action="auto", style="x")

            async def async_side() -> None:
                async with async_client_for(server, http_client=httpx.AsyncClient(follow_redirects=True)) as c:
                    await c.tasks(["t1"])

            with pytest.raises(RedirectRefusedError):
                asyncio.run(async_side())
        assert thief.requests == []
    assert [a.outcome for a in journal.attempts()] == ["unknown"]


def test_a_303_to_a_paid_call_is_unknown_not_rejected(journal: Journal) -> None:
    """303 See Other answers a POST that was carried out: the paid create may be done and charged."""
    see_other = {"Location": "/v1/music/tasks?ids=t1"}
    with hostile(lambda req, sock: respond(sock, 303, {}, see_other)) as server, client_for(server, journal) as client:
        with pytest.raises(CreateOutcomeUnknownError) as caught:
            client.generate(action="auto", style="x")
        assert "NOT resent" in str(caught.value)
    assert [a.outcome for a in journal.attempts()] == ["unknown"]
    assert server.requests[-1].path == "/v1/music/generate" and len(server.requests) == 1


def echo_key(req: RawRequest, sock: Any) -> None:
    key = req.headers.get("x-api-key", "")
    if req.path == "/v1/music/generate":
        respond(sock, 422, {"detail": [{"loc": ["body", "style"], "msg": f"bad key {key}", "type": "x", "input": key}]})
    elif req.path == "/v2/submit":
        respond(sock, 500, {"message": f"invalid api key {key}"}, {"X-Echo": key})
    elif req.path == "/v1/lyrics":
        respond(sock, 200, envelope(None, 400, f"nothing for {key}"))
    elif req.path == "/v1/get_api_key_info":
        respond(sock, 200, envelope({"x_api_key": key, "key_name": f"name {key}", "extra": {key: [key]}}))
    else:
        respond(sock, 200, [{"id": "t1", "status": 3, "fail_reason": f"key {key} refused", "title": key}])


def test_text_that_echoes_the_key_is_redacted_everywhere(journal: Journal) -> None:
    seen: list[str] = []
    with hostile(echo_key) as server, client_for(server, journal) as client:
        with pytest.raises(UnprocessableEntityError) as e422:
            client.generate(action="auto", style="x")
        seen += [str(e422.value), repr(e422.value.detail), repr(e422.value.body), e422.value.response.text]
        with pytest.raises(ServerAuthenticationError) as e500:
            client.submit_v2(is_auto=1, model_version="v4.5", prompt="x")
        seen += [str(e500.value), repr(e500.value.body), e500.value.response.text, repr(e500.value.response.headers)]
        with pytest.raises(EnvelopeError) as env:
            client.lyrics("x")
        seen += [str(env.value), repr(env.value.body)]
        info = client.key_info()
        seen += [repr(info), repr(info.model_dump()), repr(info.model_extra)]
        (record,) = client.tasks(["t1"])
        seen += [repr(record), repr(record.model_dump())]
    assert all(KEY not in text for text in seen), [t for t in seen if KEY in t]
    assert "***" in str(e422.value) and "***" in (record.fail_reason or "")
    assert KEY.encode() not in (Path(journal.path)).read_bytes()


@pytest.mark.slow
def test_transport_errors_that_quote_the_key_are_redacted(journal: Journal) -> None:
    """A transport (a proxy, a TLS layer) may quote the header it choked on; errors and notes stay clean."""

    def choke(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError(f"cannot send header x-api-key: {request.headers['x-api-key']}", request=request)

    transport = httpx.MockTransport(choke)
    with MusicClient(
        KEY, base_url="https://api.example.com", journal=journal, http_client=httpx.Client(transport=transport)
    ) as client:
        with pytest.raises(CreateOutcomeUnknownError) as paid:
            client.generate(action="auto", style="x")
        with pytest.raises(MusicGenError) as read:
            client.key_info()
    for exc in (paid.value, read.value):
        assert KEY not in str(exc) and "***" in str(exc)
        assert KEY not in repr(exc.request.headers)
    assert all(KEY not in (a.note or "") for a in journal.attempts())
    assert KEY.encode() not in Path(journal.path).read_bytes()


# ---------------------------------------------------------------------------------------------------
# 8-9. The real service's answers, classified by status first.


@pytest.mark.parametrize(
    ("status", "body", "kind", "not_kind"),
    [
        (200, envelope(None, 400, "left counts not enough"), InsufficientCreditsError, AuthenticationError),
        (200, envelope(None, 400, "Your key has not enough music counts left"), InsufficientCreditsError, None),
        (200, envelope(None, 400000, "api key invalid"), AuthenticationError, InsufficientCreditsError),
        (500, {"message": "invalid api key"}, ServerAuthenticationError, None),
        (500, {"message": "boom"}, InternalServerError, AuthenticationError),
        (400, {"message": "invalid api key format"}, BadRequestError, AuthenticationError),
        (429, {"message": "api key required"}, Exception, AuthenticationError),
    ],
)
def test_errors_follow_the_status_first(status: int, body: Any, kind: type, not_kind: type | None) -> None:
    with (
        hostile(lambda req, sock: respond(sock, status, body)) as server,
        client_for(server) as client,
        pytest.raises(kind) as caught,
    ):
        client.key_info()
    if not_kind is not None:
        assert not isinstance(caught.value, not_kind)
    if kind is ServerAuthenticationError:
        assert isinstance(caught.value, AuthenticationError) and isinstance(caught.value, InternalServerError)


def test_wait_takes_what_generate_and_submit_returned(sandbox: Sandbox) -> None:
    with sandbox.client() as client:
        result = client.generate(action="auto", style="lo-fi")
        songs = client.submit_v2(is_auto=1, model_version="v4.5", prompt="rain")
        finished = client.wait(result, timeout=60)
        assert sorted(r.id for r in finished) == sorted(result.ids)
        finished_v2 = client.wait(songs, timeout=60)
        assert sorted(r.id for r in finished_v2) == sorted(s.id for s in songs)
        both = client.wait([*finished, *songs], timeout=60)
        assert len(both) == len(result.ids) + len(songs)
        assert {r.id for r in client.tasks(result)} == set(result.ids)


# ---------------------------------------------------------------------------------------------------
# 10. Resumed names the unknown attempts.


def test_resumed_shows_unknown_attempts_with_title_style_and_time(journal: Journal) -> None:
    with (
        hostile(lambda req, sock: respond(sock, 502, {"message": "bad gateway"})) as server,
        client_for(server, journal) as client,
    ):
        with pytest.raises(InternalServerError):
            client.generate(action="custom", title="Harbour lights", style="folk")
        found = client.unfinished()
    assert isinstance(found, Resumed) and len(found.unknown) == 1
    text = repr(found)
    assert "1 unknown" in text and "Harbour lights" in text
    assert any(ch.isdigit() for ch in text.split("Harbour lights", 1)[1])
