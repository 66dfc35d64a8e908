"""MusicClient and AsyncMusicClient over httpx.MockTransport: endpoints, errors, retries, secrecy, wait, download."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

import ipymusicgen.client.core as core_mod
import ipymusicgen.client.faces as client_mod
import ipymusicgen.client.responses as responses_mod
import ipymusicgen.client.retry as retry_mod
import ipymusicgen.client.waiting as waiting_mod
from ipymusicgen import __version__
from ipymusicgen.client.faces import IDS_QUERY_BUDGET, AsyncMusicClient, MusicClient, chunk_ids
from ipymusicgen.config import Settings
from ipymusicgen.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    CreateOutcomeUnknownError,
    EnvelopeError,
    InsecureTransportError,
    InsufficientCreditsError,
    InternalServerError,
    MusicGenError,
    NotFoundError,
    RateLimitError,
    RequestValidationError,
    TaskFailedError,
    UnprocessableEntityError,
    WaitTimeoutError,
)
from ipymusicgen.models.schema import KeyInfo, LyricsResult, TaskRecord, V2Song
from ipymusicgen.models.tasks import TaskSet, TaskState

pytestmark = pytest.mark.usefixtures("clean_env")  # no MUSICGEN_* setting of the machine leaks in

KEY = "sk-CANARY-5e1f0c7a9b3d"
BASE = "http://127.0.0.1:9"
V2_BASE = "http://localhost:7"
V1_HOST, V2_HOST = "127.0.0.1", "localhost"


def envelope(data: Any, status: int = 200, message: str = "Success") -> dict[str, Any]:
    return {"status": status, "message": message, "data": data}


class Server:
    """A MockTransport handler: records every request and answers from a script.

    Each reply is a JSON-able body (sent with HTTP 200), an `httpx.Response`, an exception class (raised
    as if the transport failed), or a function of the request. The last reply repeats.
    """

    def __init__(self, *replies: Any) -> None:
        self.requests: list[httpx.Request] = []
        self.replies = list(replies) or [{}]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        # A copy as it went over the wire: the client strips the key from its own request object afterwards.
        self.requests.append(
            httpx.Request(request.method, request.url, headers=request.headers.copy(), content=request.read())
        )
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, type) and issubclass(reply, Exception):
            raise reply(f"simulated {reply.__name__}", request=request)
        if callable(reply) and not isinstance(reply, httpx.Response):
            reply = reply(request)
        if isinstance(reply, httpx.Response):
            return reply
        return httpx.Response(200, json=reply)

    @property
    def count(self) -> int:
        return len(self.requests)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


class Face:
    """The same calls on MusicClient or AsyncMusicClient; async calls run in `asyncio.run`."""

    def __init__(self, kind: str, handler: Any, **kwargs: Any) -> None:
        self.kind = kind
        transport = httpx.MockTransport(handler)
        kwargs.setdefault("api_key", KEY)
        kwargs.setdefault("base_url", BASE)
        kwargs.setdefault("v2_base_url", V2_BASE)
        # no archiver: it would fetch a finished song's audio through this transport from its own thread, a
        # request the test did not make, arriving whenever that thread runs (tests/test_archive*.py cover it)
        kwargs.setdefault("archive", False)
        if kind == "sync":
            self.client: Any = MusicClient(http_client=httpx.Client(transport=transport), **kwargs)
        else:
            self.client = AsyncMusicClient(http_client=httpx.AsyncClient(transport=transport), **kwargs)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if self.kind == "sync":
            return method
        return lambda *args, **kwargs: asyncio.run(method(*args, **kwargs))


class Clock:
    """Fake time for the client module: sleeping records the delay and moves the clock on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> Clock:
    fake = Clock()
    fake_time = SimpleNamespace(sleep=fake.sleep, monotonic=fake.monotonic, time=fake.time)
    for module in (core_mod, client_mod, responses_mod, retry_mod, waiting_mod):
        monkeypatch.setattr(module, "time", fake_time)
    monkeypatch.setattr(client_mod, "_async_sleep", fake.async_sleep)
    return fake


@pytest.fixture
def no_jitter(monkeypatch):
    monkeypatch.setattr(retry_mod, "random", SimpleNamespace(random=lambda: 0.0))


@pytest.fixture(params=["sync", "async"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def make(kind):
    def factory(server: Any, **kwargs: Any) -> Face:
        return Face(kind, server, **kwargs)

    return factory


def body_of(request: httpx.Request) -> Any:
    return json.loads(request.content) if request.content else None


def no_key_in(exc: BaseException) -> None:
    for text in (str(exc), repr(exc), *(str(a) for a in exc.args), getattr(exc, "message", "")):
        assert KEY not in text


# ---------------------------------------------------------------------------------------------------
# Every endpoint: method, path, query, body, headers, and both response shapes.

V1_REQUIRED = {
    "auto": {"style": "lo-fi rain"},
    "custom": {"lyrics": "[Verse]\nla", "title": "Rain", "style": "pop"},
    "extend": {"continue_song_id": "song-1", "continue_at": 42.5},
    "concat": {"continue_song_id": "song-1"},
    "upload": {"audio_url": "https://example.com/a.mp3"},
    "upload_extend": {"audio_url": "https://example.com/a.mp3", "continue_at": 10},
    "artist_consistency": {"singer_id": "singer-9", "style": "jazz"},
}


@pytest.mark.parametrize("action", list(V1_REQUIRED))
@pytest.mark.parametrize("wrapped", [True, False], ids=["envelope", "bare"])
def test_generate_every_action(make, action, wrapped):
    data = {"ids": ["t1", "t2"]}
    server = Server(envelope(data) if wrapped else data)
    result = make(server).generate(action=action, **V1_REQUIRED[action])
    assert result.ids == ["t1", "t2"]
    request = server.last
    assert (request.method, request.url.host, request.url.path) == ("POST", V1_HOST, "/v1/music/generate")
    assert request.headers["content-type"] == "application/json"
    sent = body_of(request)
    assert sent["action"] == action
    for field, value in V1_REQUIRED[action].items():
        assert sent[field] == value
    assert None not in sent.values()


def test_generate_accepts_a_mapping_and_a_model(make):
    from ipymusicgen.models.schema import CustomRequest

    server = Server(envelope({"ids": ["t1"]}))
    client = make(server)
    client.generate({"action": "custom", "title": "A"})
    client.generate(CustomRequest(title="B", mv="MFV2.0"))
    assert body_of(server.requests[0]) == {"action": "custom", "instrumental": 0, "title": "A"}
    assert body_of(server.requests[1]) == {"action": "custom", "instrumental": 0, "title": "B", "mv": "MFV2.0"}


def test_generate_with_unknown_model_when_the_client_allows_it(make):
    server = Server(envelope({"ids": ["t1"]}))
    make(server, allow_unknown_models=True).generate(action="auto", mv="MFV9.0")
    assert body_of(server.last)["mv"] == "MFV9.0"


SONG = {
    "song_id": "s1",
    "status": "RUNNING",
    "audio": "",
    "audio_duration": -1,
    "image": "",
    "lyric": "",
    "tags": "pop",
    "title": "T",
}


@pytest.mark.parametrize("wrapped", [True, False], ids=["envelope", "bare"])
def test_submit_v2(make, wrapped):
    songs = [SONG, {**SONG, "song_id": "s2"}]
    server = Server(envelope(songs) if wrapped else songs)
    result = make(server).submit_v2(is_auto=0, model_version="v4.0", prompt="sad piano", lyrics="la la")
    assert [s.id for s in result] == ["s1", "s2"]
    assert all(isinstance(s, V2Song) and s.state is TaskState.PROCESSING for s in result)
    request = server.last
    assert (request.method, request.url.host, request.url.path) == ("POST", V2_HOST, "/v2/submit")
    assert body_of(request) == {
        "is_auto": 0,
        "model_version": "v4.0",
        "prompt": "sad piano",
        "lyrics": "la la",
        "title": "",
        "instrumental": 0,
        "continue_at": 0,
        "continue_song_id": "",
    }
    assert request.headers["x-api-key"] == KEY


@pytest.mark.parametrize(
    "reply",
    [
        envelope([{**SONG, "status": "FINISHED", "audio": "https://x/a.mp3", "audio_duration": 93000}]),
        envelope({**SONG, "status": "FINISHED", "audio": "https://x/a.mp3", "audio_duration": 93000}),
        {**SONG, "status": "FINISHED", "audio": "https://x/a.mp3", "audio_duration": 93000},
        [
            {**SONG, "song_id": "other"},
            {**SONG, "status": "FINISHED", "audio": "https://x/a.mp3", "audio_duration": 93000},
        ],
    ],
    ids=["envelope-list", "envelope-object", "bare-object", "bare-list-picks-the-id"],
)
def test_query_v2(make, reply):
    server = Server(reply)
    song = make(server).query_v2("s1")
    assert song.id == "s1"
    assert song.state is TaskState.COMPLETE
    assert song.duration_seconds == 93
    request = server.last
    assert (request.method, request.url.host, request.url.path) == ("GET", V2_HOST, "/v2/query")
    assert request.url.params["song_id"] == "s1"
    assert request.content == b""


@pytest.mark.parametrize(
    "reply",
    [
        envelope({"text": "[Verse]\nrain", "title": "Rain"}),
        envelope({"lyrics": "[Verse]\nrain", "title": "Rain"}),
        {"lyrics": "[Verse]\nrain", "title": "Rain"},
        {"text": "[Verse]\nrain", "title": "Rain"},
    ],
    ids=["data.text", "data.lyrics", "top-level-lyrics", "bare-text"],
)
def test_lyrics(make, reply):
    server = Server(reply)
    result = make(server).lyrics("a song about rain")
    assert isinstance(result, LyricsResult)
    assert (result.text, result.title) == ("[Verse]\nrain", "Rain")
    request = server.last
    assert (request.method, request.url.path) == ("POST", "/v1/lyrics")
    assert body_of(request) == {"prompt": "a song about rain"}


KEY_RECORD = {
    "x_api_key": KEY,
    "key_status": 1,
    "key_music_counts": 40,
    "email": "me@example.com",
    "member_id": "m1",
    "key_created_at": "2024-01-02T03:04:05Z",
    "key_updated_at": "2024-01-03T03:04:05Z",
    "key_recently_used_at": "2024-01-04T03:04:05Z",
    "key_name": "default",
}


@pytest.mark.parametrize("wrapped", [True, False], ids=["envelope", "bare"])
def test_key_info(make, wrapped):
    server = Server(envelope(KEY_RECORD) if wrapped else KEY_RECORD)
    info = make(server).key_info()
    assert isinstance(info, KeyInfo)
    assert info.key_music_counts == 40
    assert info.key_created_at is not None and info.key_created_at.year == 2024
    assert KEY not in repr(info) and KEY not in str(info) and KEY not in info.model_dump_json()
    request = server.last
    assert (request.method, request.url.path, request.content) == ("GET", "/v1/get_api_key_info", b"")


TASKS = [
    {
        "id": "a",
        "status": 0,
        "duration": 61000,
        "audio_url": "https://x/a.mp3",
        "title": "A",
        "fail_code": 0,
        "fail_reason": "",
    },
    {"id": "b", "status": 1, "duration": -1, "audio_url": ""},
]


@pytest.mark.parametrize("wrapped", [True, False], ids=["envelope", "bare"])
@pytest.mark.parametrize("ids", [["a", "b"], "a,b", " a , b "], ids=["list", "string", "spaced-string"])
def test_tasks(make, wrapped, ids):
    server = Server(envelope(TASKS) if wrapped else TASKS)
    records = make(server).tasks(ids)
    assert [r.id for r in records] == ["a", "b"]
    assert [r.state for r in records] == [TaskState.COMPLETE, TaskState.PROCESSING]
    assert records[0].duration_seconds == 61.0 and records[1].duration_seconds is None
    request = server.last
    assert server.count == 1
    assert (request.method, request.url.path) == ("GET", "/v1/music/tasks")
    assert request.url.params["ids"] == "a,b"
    assert request.url.query == b"ids=a,b"  # literally `?ids=a,b`, as the service is observed to take it


SONG_URL_CALLS = [
    ("generate_vibe", "/v1/music/generate-vibe", {"singer_id": "singer-7"}, "singer-7"),
    ("generate_vibe", "/v1/music/generate-vibe", {"id": "singer-7"}, "singer-7"),
    ("generate_vibe", "/v1/music/generate-vibe", "singer-7", "singer-7"),
    ("generate_wav", "/v1/music/generate-wav", {"wav_url": "https://x/a.wav"}, "https://x/a.wav"),
    ("generate_wav", "/v1/music/generate-wav", {"url": "https://x/a.wav"}, "https://x/a.wav"),
    ("generate_mp4", "/v1/music/generate-mp4", {"mp4_url": "https://x/a.mp4"}, "https://x/a.mp4"),
    ("generate_mp4", "/v1/music/generate-mp4", {"video_url": "https://x/a.mp4"}, "https://x/a.mp4"),
]


@pytest.mark.parametrize(("method", "path", "data", "expected"), SONG_URL_CALLS)
@pytest.mark.parametrize("wrapped", [True, False], ids=["envelope", "bare"])
def test_song_url_endpoints(make, method, path, data, expected, wrapped):
    server = Server(envelope(data) if wrapped else data)
    assert getattr(make(server), method)("song-42") == expected
    request = server.last
    assert (request.method, request.url.host, request.url.path) == ("POST", V1_HOST, path)
    assert request.url.params["song_id"] == "song-42"


@pytest.mark.parametrize("method", ["generate_vibe", "generate_wav", "generate_mp4"])
def test_song_url_endpoints_without_a_value(make, method):
    with pytest.raises(APIResponseValidationError):
        getattr(make(Server(envelope({"nothing": 1}))), method)("song-42")


# One call per endpoint, for the tests that sweep all of them: (name, call, good reply, paid).
ENDPOINTS = {
    "generate": (lambda c: c.generate(action="auto", style="x"), envelope({"ids": ["t1"]}), True),
    "submit_v2": (lambda c: c.submit_v2(is_auto=1, model_version="v4.5", prompt="x"), envelope([SONG]), True),
    "lyrics": (lambda c: c.lyrics("rain"), envelope({"text": "la"}), True),
    "generate_vibe": (lambda c: c.generate_vibe("s"), envelope({"singer_id": "v"}), True),
    "generate_wav": (lambda c: c.generate_wav("s"), envelope({"wav_url": "https://x/a.wav"}), True),
    "generate_mp4": (lambda c: c.generate_mp4("s"), envelope({"mp4_url": "https://x/a.mp4"}), True),
    "key_info": (lambda c: c.key_info(), envelope(KEY_RECORD), False),
    "tasks": (lambda c: c.tasks(["a"]), envelope(TASKS[:1]), False),
    "query_v2": (lambda c: c.query_v2("s1"), envelope([SONG]), False),
}
PAID = [name for name, (_, _, paid) in ENDPOINTS.items() if paid]
READS = [name for name, (_, _, paid) in ENDPOINTS.items() if not paid]


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_every_endpoint_sends_the_key_and_user_agent(make, name):
    call, reply, _ = ENDPOINTS[name]
    server = Server(reply)
    call(make(server))
    request = server.last
    assert request.headers["x-api-key"] == KEY
    user_agent = request.headers["user-agent"]
    assert "ipymusicgen" in user_agent and __version__ in user_agent
    assert request.headers["accept"] == "application/json"


def test_no_key_header_without_a_key(make):
    server = Server(envelope(KEY_RECORD))
    make(server, api_key=None).key_info()
    assert "x-api-key" not in server.last.headers


def test_key_and_hosts_come_from_the_environment(monkeypatch, kind):
    monkeypatch.setenv("MUSICGEN_API_KEY", KEY)
    monkeypatch.setenv("MUSICGEN_BASE_URL", "http://127.0.0.1:5/")
    server = Server(envelope(KEY_RECORD))
    transport = httpx.MockTransport(server)
    if kind == "sync":
        MusicClient(http_client=httpx.Client(transport=transport)).key_info()
    else:
        asyncio.run(AsyncMusicClient(http_client=httpx.AsyncClient(transport=transport)).key_info())
    assert server.last.headers["x-api-key"] == KEY
    assert str(server.last.url) == "http://127.0.0.1:5/v1/get_api_key_info"


# ---------------------------------------------------------------------------------------------------
# Error kinds.


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("name", ["generate", "key_info"])
def test_401_403_is_an_authentication_error_with_a_hint(make, status, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(status, json={"detail": "Not authenticated"}))
    with pytest.raises(AuthenticationError) as info:
        call(make(server))
    assert info.value.status_code == status
    assert "MUSICGEN_API_KEY" in str(info.value)
    assert server.count == 1  # an auth failure is not retried


@pytest.mark.parametrize("name", ["generate", "key_info", "tasks"])
def test_http_500_saying_the_key_is_invalid_is_an_authentication_error(make, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(500, json={"status": 500, "message": "Invalid API key"}))
    with pytest.raises(AuthenticationError) as info:
        call(make(server))
    assert "MUSICGEN_API_KEY" in str(info.value)
    assert server.count == 1  # a refused key stays refused: reads do not retry it either


def test_envelope_saying_the_key_is_missing_is_an_authentication_error(make):
    server = Server(envelope(None, status=400, message="x-api-key is required"))
    with pytest.raises(AuthenticationError, match="MUSICGEN_API_KEY"):
        make(server).generate(action="auto")


@pytest.mark.parametrize("name", ["generate", "tasks"])
def test_404_is_not_found(make, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(NotFoundError) as info:
        call(make(server))
    assert info.value.status_code == 404
    assert server.count == 1


def test_422_is_unprocessable_with_its_details(make):
    detail = [
        {"loc": ["body", "prompt"], "msg": "Field required", "type": "missing"},
        {
            "loc": ["body", "title"],
            "msg": "String should have at most 80 characters",
            "type": "string_too_long",
            "input": "x" * 90,
            "ctx": {"max_length": 80},
        },
    ]
    server = Server(httpx.Response(422, json={"detail": detail}))
    with pytest.raises(UnprocessableEntityError) as info:
        make(server).generate(action="custom", title="ok")
    error = info.value
    assert error.status_code == 422
    assert [d.loc for d in error.detail] == [["body", "prompt"], ["body", "title"]]
    assert error.detail[1].ctx == {"max_length": 80}
    message = str(error)
    for entry in detail:
        assert entry["loc"][-1] in message and entry["msg"] in message
    assert server.count == 1


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_429_is_a_rate_limit_error(make, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(429, json={"message": "Too many requests"}, headers={"Retry-After": "0"}))
    with pytest.raises(RateLimitError) as info:
        call(make(server))
    assert info.value.status_code == 429


@pytest.mark.parametrize("status", [500, 502, 503, 504])
@pytest.mark.parametrize("name", ["generate", "key_info"])
def test_5xx_is_an_internal_server_error(make, status, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(status, text="upstream exploded"))
    with pytest.raises(InternalServerError) as info:
        call(make(server))
    assert info.value.status_code == status
    assert isinstance(info.value, APIStatusError)


@pytest.mark.parametrize("message", ["no credits", "Insufficient credits", "Your balance is not enough"])
@pytest.mark.parametrize("name", ["generate", "submit_v2", "lyrics"])
def test_envelope_400_without_credits(make, name, message):
    call, _, _ = ENDPOINTS[name]
    server = Server(envelope(None, status=400, message=message))
    with pytest.raises(InsufficientCreditsError) as info:
        call(make(server))
    assert isinstance(info.value, EnvelopeError)
    assert info.value.status_code == 400
    assert message in str(info.value)
    assert server.count == 1


@pytest.mark.parametrize("status", [500, 400000, "400000", 400])
def test_envelope_error_status(make, status):
    server = Server(envelope(None, status=status, message="parameter error"))
    with pytest.raises(EnvelopeError) as info:
        make(server).generate(action="auto")
    assert not isinstance(info.value, InsufficientCreditsError)
    assert info.value.status_code == int(status)
    assert "parameter error" in str(info.value)


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_non_json_200_is_a_response_validation_error(make, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(200, text="<html>gateway</html>"))
    with pytest.raises(APIResponseValidationError):
        call(make(server))
    assert server.count == 1


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        ("generate", envelope({"nothing": "here"})),
        ("generate", envelope(None)),
        ("tasks", envelope(5)),
        ("tasks", [{"no_id": 1}]),
        ("key_info", [1, 2, 3]),
        ("key_info", envelope({**KEY_RECORD, "key_created_at": "not a date"})),
        ("lyrics", envelope({"title": "no text"})),
        ("submit_v2", envelope([{"no_song_id": 1}])),
        ("query_v2", envelope([])),
    ],
)
def test_wrong_shape_is_a_response_validation_error(make, name, reply):
    call, _, _ = ENDPOINTS[name]
    with pytest.raises(APIResponseValidationError):
        call(make(Server(reply)))


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_connect_error_is_a_connection_error_after_retries(make, name):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.ConnectError)
    with pytest.raises(APIConnectionError) as info:
        call(make(server))
    assert not isinstance(info.value, CreateOutcomeUnknownError | APITimeoutError)
    assert server.count == 3  # connect errors were never sent, so even paid calls are retried


@pytest.mark.parametrize("name", READS)
@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.ConnectTimeout])
def test_timeout_on_a_read_is_a_timeout_error_after_retries(make, name, exc):
    call, _, _ = ENDPOINTS[name]
    server = Server(exc)
    with pytest.raises(APITimeoutError):
        call(make(server))
    assert server.count == 3


# ---------------------------------------------------------------------------------------------------
# Retry policy.


@pytest.mark.parametrize("name", READS)
@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_reads_retry_on_transient_status_then_raise(make, name, status):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(status, json={"message": "busy"}))
    with pytest.raises(APIStatusError) as info:
        call(make(server))
    assert info.value.status_code == status
    assert server.count == 3


@pytest.mark.parametrize("name", READS)
@pytest.mark.parametrize("failure", [httpx.ReadTimeout, httpx.ConnectError, httpx.RemoteProtocolError])
def test_reads_recover_after_transient_failures(make, name, failure):
    call, reply, _ = ENDPOINTS[name]
    server = Server(failure, httpx.Response(503), reply)
    assert call(make(server)) is not None
    assert server.count == 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_reads_do_not_retry_client_errors(make, status):
    server = Server(httpx.Response(status, json={"detail": []}))
    with pytest.raises(APIStatusError):
        make(server).tasks(["a"])
    assert server.count == 1


@pytest.mark.parametrize(("max_retries", "requests"), [(0, 1), (1, 2), (4, 5)])
def test_max_retries_is_honoured(make, max_retries, requests):
    server = Server(httpx.Response(503))
    with pytest.raises(InternalServerError):
        make(server, max_retries=max_retries).key_info()
    assert server.count == requests


def test_default_max_retries_is_two():
    assert Settings().max_retries == 2


@pytest.mark.parametrize("retry_after", ["0", "2", "1.5"])
def test_retry_after_is_honoured(make, clock, retry_after):
    server = Server(httpx.Response(429, headers={"Retry-After": retry_after}), envelope(KEY_RECORD))
    make(server).key_info()
    assert server.count == 2
    assert clock.sleeps == [float(retry_after)]


def test_retry_after_ms_is_honoured(make, clock):
    server = Server(httpx.Response(503, headers={"retry-after-ms": "250"}))
    with pytest.raises(InternalServerError):
        make(server).key_info()
    assert clock.sleeps == [0.25, 0.25]


@pytest.mark.usefixtures("no_jitter")
def test_without_retry_after_delays_grow_exponentially(make, clock):
    server = Server(httpx.Response(503))
    with pytest.raises(InternalServerError):
        make(server, max_retries=5).key_info()
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]


@pytest.mark.usefixtures("no_jitter")
def test_absurd_retry_after_falls_back_to_backoff(make, clock):
    server = Server(httpx.Response(503, headers={"Retry-After": "86400"}))
    with pytest.raises(InternalServerError):
        make(server).key_info()
    assert clock.sleeps == [0.5, 1.0]


def test_backoff_with_jitter_stays_in_bounds_and_grows(make, clock):
    server = Server(httpx.ReadTimeout)
    with pytest.raises(APITimeoutError):
        make(server, max_retries=3).tasks("a")
    assert len(clock.sleeps) == 3
    for attempt, delay in enumerate(clock.sleeps):
        assert 0.75 * 0.5 * 2**attempt <= delay <= 0.5 * 2**attempt
    assert clock.sleeps[0] < clock.sleeps[1] < clock.sleeps[2]


@pytest.mark.parametrize("name", PAID)
@pytest.mark.parametrize(
    ("status", "error"), [(500, InternalServerError), (502, InternalServerError), (429, RateLimitError)]
)
def test_paid_calls_are_sent_once_on_error_status(make, clock, name, status, error):
    call, _, _ = ENDPOINTS[name]
    server = Server(httpx.Response(status, json={"message": "try later"}))
    with pytest.raises(error):
        call(make(server))
    assert server.count == 1
    assert clock.sleeps == []


@pytest.mark.parametrize("name", PAID)
@pytest.mark.parametrize("failure", [httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteTimeout])
def test_paid_calls_are_sent_once_when_the_outcome_is_unknown(make, name, failure):
    call, _, _ = ENDPOINTS[name]
    server = Server(failure)
    with pytest.raises(CreateOutcomeUnknownError) as info:
        call(make(server))
    assert server.count == 1
    assert "NOT resent" in str(info.value)


@pytest.mark.parametrize("name", PAID)
def test_paid_calls_are_retried_when_demonstrably_not_sent(make, name):
    call, reply, _ = ENDPOINTS[name]
    server = Server(httpx.ConnectError, httpx.ConnectError, reply)
    assert call(make(server)) is not None
    assert server.count == 3


class RecordingJournal:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def begin(self, endpoint, host, payload):
        self.events.append(("begin", endpoint, host, dict(payload)))
        return "attempt-1"

    def submitted(self, attempt_id, ids, *, v2=False):
        self.events.append(("submitted", attempt_id, list(ids), v2))

    def unknown(self, attempt_id, note):
        self.events.append(("unknown", attempt_id))

    def rejected(self, attempt_id, note):
        self.events.append(("rejected", attempt_id))

    def observe(self, records):
        self.events.append(("observe", [r.id for r in records]))

    def downloaded(self, task_id, path):
        self.events.append(("downloaded", task_id))


def test_paid_call_is_journalled_before_sending_and_ids_recorded(make):
    journal = RecordingJournal()

    def reply(request):
        assert journal.events and journal.events[0][0] == "begin"  # recorded before the request left
        return httpx.Response(200, json=envelope({"ids": ["t1", "t2"]}))

    make(Server(reply), journal=journal).generate(action="auto", style="x")
    assert journal.events[0] == ("begin", "generate", BASE, {"action": "auto", "instrumental": 0, "style": "x"})
    assert journal.events[1] == ("submitted", "attempt-1", ["t1", "t2"], False)


def test_unknown_outcome_is_journalled_with_the_attempt(make):
    journal = RecordingJournal()
    with pytest.raises(CreateOutcomeUnknownError) as info:
        make(Server(httpx.ReadTimeout), journal=journal).generate(action="auto")
    assert info.value.attempt_id == "attempt-1"
    assert ("unknown", "attempt-1") in journal.events


# ---------------------------------------------------------------------------------------------------
# Client-side validation happens before anything is sent.


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.generate(action="auto", lyrics="not part of auto"),
        lambda c: c.generate(action="custom", title="t" * 81),
        lambda c: c.generate(action="custom", mv="MFV9.9"),
        lambda c: c.generate(action="concat"),
        lambda c: c.generate(action="custom", instrumental=2),
        lambda c: c.generate(action="custom", mv="MFV1.0", lyrics="w " * 3001),
        lambda c: c.submit_v2(is_auto=0, model_version="v4.5", prompt=""),
        lambda c: c.submit_v2(is_auto=0, model_version="v4.5", prompt="p" * 181),
        lambda c: c.submit_v2(is_auto=0, model_version="v3.0", prompt="x", continue_song_id="s", continue_at=0),
        lambda c: c.submit_v2(is_auto=0, model_version="v9", prompt="x"),
        lambda c: c.submit_v2(model_version="v4.5", prompt="x"),
        lambda c: c.lyrics(""),
    ],
)
def test_validation_errors_are_raised_before_any_request(make, call):
    server = Server(envelope({"ids": ["t1"]}))
    with pytest.raises(RequestValidationError):
        call(make(server))
    assert server.count == 0


# ---------------------------------------------------------------------------------------------------
# Key secrecy.


def test_key_not_in_client_or_settings_repr(make):
    face = make(Server({}))
    for text in (repr(face.client), str(face.client), repr(face.client.settings), str(face.client.settings)):
        assert KEY not in text
    assert "set" in repr(face.client)


def test_key_not_in_settings_from_env(monkeypatch):
    monkeypatch.setenv("MUSICGEN_API_KEY", KEY)
    settings = Settings.from_env()
    assert settings.key_value() == KEY
    assert KEY not in repr(settings) and KEY not in str(settings)


ECHOES = {
    "401": lambda r: httpx.Response(401, json={"message": f"Invalid API key {KEY}"}),
    "403": lambda r: httpx.Response(403, text=f"forbidden for key {KEY}"),
    "500-invalid-key": lambda r: httpx.Response(500, json={"message": f"invalid key: {KEY}"}),
    "404": lambda r: httpx.Response(404, json={"detail": f"no such key {KEY}"}),
    "422": lambda r: httpx.Response(
        422,
        json={
            "detail": [{"loc": ["header", "x-api-key"], "msg": f"bad value {KEY}", "type": "value_error", "input": KEY}]
        },
    ),
    "429": lambda r: httpx.Response(429, json={"message": f"too fast, {KEY}"}),
    "503": lambda r: httpx.Response(503, json={"message": f"down; your key {KEY}"}),
    "envelope-credits": lambda r: httpx.Response(200, json=envelope(None, status=400, message=f"no credits on {KEY}")),
    "envelope-400000": lambda r: httpx.Response(200, json=envelope(None, status=400000, message=f"bad {KEY}")),
    "not-json": lambda r: httpx.Response(200, text=f"<html>{KEY}</html>"),
}


@pytest.mark.parametrize("reply", ECHOES.values(), ids=list(ECHOES))
@pytest.mark.parametrize("name", ["generate", "key_info"])
def test_key_redacted_from_errors_when_the_server_echoes_it(make, reply, name):
    call, _, _ = ENDPOINTS[name]
    with pytest.raises(MusicGenError) as info:
        call(make(Server(reply)))
    no_key_in(info.value)


@pytest.mark.parametrize("name", ["generate", "key_info"])
def test_key_redacted_from_transport_errors(make, name):
    call, _, _ = ENDPOINTS[name]

    def fail(request):
        raise httpx.ReadTimeout(f"timed out talking with key {KEY}", request=request)

    with pytest.raises(APIConnectionError) as info:
        call(make(Server(fail)))
    no_key_in(info.value)


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        ("key_info", envelope({**KEY_RECORD, "key_status": f"weird {KEY}"})),
        ("generate", envelope({"ids": {"echo": KEY}})),
        ("tasks", envelope([{"id": "a", "status": f"x{KEY}"}])),
    ],
)
def test_key_redacted_from_response_shape_errors(make, name, reply):
    call, _, _ = ENDPOINTS[name]
    with pytest.raises(APIResponseValidationError) as info:
        call(make(Server(reply)))
    no_key_in(info.value)


# ---------------------------------------------------------------------------------------------------
# Plain http is refused for a key unless the host is this machine or the user opts in.


@pytest.mark.parametrize(
    "urls",
    [
        {"base_url": "http://api.example.com"},
        {"v2_base_url": "http://api.example.com"},
        {"base_url": "http://10.0.0.5:8000"},
        {"base_url": "http://127.0.0.1.example.com"},
    ],
)
def test_insecure_transport_refused(kind, urls):
    cls = MusicClient if kind == "sync" else AsyncMusicClient
    with pytest.raises(InsecureTransportError) as info:
        cls(api_key=KEY, **urls)
    assert KEY not in str(info.value)
    assert "allow_insecure_http" in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"api_key": KEY, "base_url": "http://127.0.0.1:9", "v2_base_url": "http://localhost:7"},
        {"api_key": KEY, "base_url": "http://[::1]:9", "v2_base_url": "https://api.example.com"},
        {"api_key": KEY, "base_url": "https://api.example.com"},
        {"api_key": KEY, "base_url": "http://api.example.com", "allow_insecure_http": True},
        {"base_url": "http://api.example.com"},
    ],
)
def test_insecure_transport_allowed(kind, kwargs):
    cls = MusicClient if kind == "sync" else AsyncMusicClient
    cls(**kwargs)


def test_insecure_http_opt_in_from_the_environment(monkeypatch):
    monkeypatch.setenv("MUSICGEN_ALLOW_INSECURE_HTTP", "1")
    MusicClient(api_key=KEY, base_url="http://api.example.com")


# ---------------------------------------------------------------------------------------------------
# wait(): one batched query per round until every task is complete or failed.


def task(task_id: str, status: int, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "status": status, **extra}


def tasks_server(*rounds: list[dict[str, Any]]) -> Server:
    def reply_for(round_records):
        def reply(request):
            wanted = request.url.params["ids"].split(",")
            return httpx.Response(200, json=envelope([r for r in round_records if r["id"] in wanted]))

        return reply

    return Server(*(reply_for(r) for r in rounds))


def test_wait_polls_until_all_finished(make, clock):
    server = tasks_server(
        [task("a", 1), task("b", 1)],
        [task("a", 0, audio_url="https://x/a.mp3"), task("b", 2, audio_url="https://x/b-preview")],
        [task("b", 0, audio_url="https://x/b.mp3")],
    )
    updates: list[list[str]] = []
    records = make(server).wait(["a", "b"], interval=3, on_update=lambda rs: updates.append([r.id for r in rs]))
    assert [r.id for r in records] == ["a", "b"]
    assert all(r.state is TaskState.COMPLETE for r in records)
    assert [r.url.params["ids"] for r in server.requests] == ["a,b", "a,b", "b"]  # one query per round
    assert updates == [["a", "b"], ["a", "b"], ["b"]]
    assert clock.sleeps == [3, 3]


def test_wait_on_update_only_when_something_changed(make):
    server = tasks_server([task("a", 1)], [task("a", 1)], [task("a", 0)])
    updates: list[list[str]] = []
    make(server).wait("a", interval=1, on_update=lambda rs: updates.append([r.status for r in rs]))
    assert updates == [[1], [0]]
    assert server.count == 3


def test_wait_timeout_lists_pending_tasks(make, clock):
    server = tasks_server([task("a", 0), task("b", 1), task("c", 2)])
    with pytest.raises(WaitTimeoutError) as info:
        make(server).wait(["a", "b", "c"], timeout=12, interval=5)
    assert info.value.pending == ["b", "c"]
    assert clock.sleeps == [5, 5, 2]  # never sleeps past the deadline
    assert server.count == 4
    assert isinstance(info.value, TimeoutError)


def test_wait_raise_on_failure(make):
    server = tasks_server([task("a", 0), task("b", 3, fail_code=1001, fail_reason="content policy")])
    with pytest.raises(TaskFailedError) as info:
        make(server).wait(["a", "b"], raise_on_failure=True)
    assert info.value.fail_code == 1001
    assert info.value.fail_reason == "content policy"
    assert info.value.task.id == "b"
    assert "content policy" in str(info.value) and "1001" in str(info.value)


def test_wait_returns_failed_tasks_without_raising_by_default(make):
    server = tasks_server([task("a", 0), task("b", 1, fail_reason="moderation")])
    records = make(server).wait(["a", "b"])
    assert [r.state for r in records] == [TaskState.COMPLETE, TaskState.FAILED]


def test_wait_v2_songs(make, clock):
    server = Server(
        envelope([{**SONG, "status": "RUNNING"}]),
        envelope([{**SONG, "status": "FINISHED", "audio": "https://x/s1.mp3", "audio_duration": 100000}]),
    )
    records = make(server).wait(v2_ids=["s1"], interval=2)
    assert [r.state for r in records] == [TaskState.COMPLETE]
    assert all(r.url.path == "/v2/query" and r.url.host == V2_HOST for r in server.requests)
    assert clock.sleeps == [2]


def test_poll_is_one_round(make):
    server = tasks_server([task("a", 1), task("b", 0)])
    tasks = TaskSet(["a", "b"])
    changed = make(server).poll(tasks)
    assert [r.id for r in changed] == ["a", "b"]
    assert tasks.unfinished() == (["a"], [])
    assert server.count == 1


def test_task_set_knows_which_tasks_are_v2():
    tasks = TaskSet(["a"], v2_ids=["s"])
    tasks.add(["t"], v2=True)
    assert [tasks.is_v2(i) for i in ("a", "s", "t", "unknown")] == [False, True, True, False]


# ---------------------------------------------------------------------------------------------------
# ids chunking.


def test_chunk_ids_one_group_within_budget():
    ids = [f"id{i}" for i in range(100)]
    assert chunk_ids(ids) == [ids]


def test_chunk_ids_at_the_exact_budget():
    assert chunk_ids(["aaaa", "bbbbb"], budget=10) == [["aaaa", "bbbbb"]]  # "aaaa,bbbbb" is 10 characters
    assert chunk_ids(["aaaa", "bbbbbb"], budget=10) == [["aaaa"], ["bbbbbb"]]  # 11 characters


def test_chunk_ids_split_keeps_order_and_every_id():
    ids = [f"task-{i:04d}" for i in range(50)]
    chunks = chunk_ids(ids, budget=100)
    assert len(chunks) > 1
    assert [i for c in chunks for i in c] == ids
    assert all(len(",".join(c)) <= 100 for c in chunks)


def test_chunk_ids_empty():
    assert chunk_ids([]) == []


def test_tasks_query_is_chunked_only_beyond_the_budget(make):
    long_ids = [f"{i:036d}" for i in range(200)]  # 200 x 37 characters, well over the budget
    server = Server(
        lambda request: httpx.Response(
            200, json=envelope([{"id": i, "status": 1} for i in request.url.params["ids"].split(",")])
        )
    )
    records = make(server).tasks(long_ids)
    assert [r.id for r in records] == long_ids
    assert server.count > 1
    assert all(len(r.url.params["ids"]) <= IDS_QUERY_BUDGET for r in server.requests)

    few = long_ids[:100]  # 3,699 characters: one query
    server.requests.clear()
    make(server).tasks(few)
    assert server.count == 1


# ---------------------------------------------------------------------------------------------------
# Download.

AUDIO = b"ID3" + bytes(range(256)) * 64


def finished(title: str | None = "My Song", url: str = "https://cdn.example.com/files/abc.mp3", **extra) -> TaskRecord:
    return TaskRecord.model_validate({"id": "t1", "status": 0, "title": title, "audio_url": url, **extra})


def audio_server(content_type: str = "audio/mpeg") -> Server:
    return Server(httpx.Response(200, content=AUDIO, headers={"content-type": content_type}))


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_download_writes_the_file_named_from_the_title(make, tmp_path):
    server = audio_server()
    path = make(server).download(finished(), tmp_path)
    assert path == tmp_path / "My Song.mp3"
    assert path.read_bytes() == AUDIO
    assert leftovers(tmp_path) == ["My Song.mp3"]
    request = server.last
    assert str(request.url) == "https://cdn.example.com/files/abc.mp3"
    assert "x-api-key" not in request.headers
    assert KEY not in str(request.headers)


def test_download_never_overwrites(make, tmp_path):
    (tmp_path / "My Song.mp3").write_bytes(b"mine")
    path = make(audio_server()).download(finished(), tmp_path)
    assert path.name == "My Song (2).mp3"
    assert (tmp_path / "My Song.mp3").read_bytes() == b"mine"


@pytest.mark.parametrize(
    ("content_type", "url", "suffix"),
    [
        ("audio/wav", "https://x/a", ".wav"),
        ("application/octet-stream", "https://x/a.wav?sig=1", ".wav"),
        ("application/octet-stream", "https://x/a", ".mp3"),
    ],
)
def test_download_suffix(make, tmp_path, content_type, url, suffix):
    path = make(audio_server(content_type)).download(finished(url=url), tmp_path)
    assert path.suffix == suffix


def test_download_hostile_title_stays_in_the_directory(make, tmp_path):
    path = make(audio_server()).download(finished(title="../../etc/passwd"), tmp_path / "out")
    assert path.parent == tmp_path / "out"
    assert leftovers(tmp_path) == ["out"]


def test_download_of_a_plain_url(make, tmp_path):
    path = make(audio_server()).download("https://cdn.example.com/x.mp3", tmp_path)
    assert path.read_bytes() == AUDIO and path.parent == tmp_path


def test_download_journal(make, tmp_path):
    journal = RecordingJournal()
    make(audio_server(), journal=journal).download(finished(), tmp_path)
    assert ("downloaded", "t1") in journal.events


class BrokenStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """Some audio, then the connection drops."""

    def __iter__(self):
        yield AUDIO
        raise httpx.ReadError("connection reset by peer")

    async def __aiter__(self):
        yield AUDIO
        raise httpx.ReadError("connection reset by peer")


def test_download_failing_midway_leaves_nothing(make, tmp_path):
    server = Server(lambda request: httpx.Response(200, stream=BrokenStream(), headers={"content-type": "audio/mpeg"}))
    with pytest.raises(APIConnectionError):
        make(server).download(finished(), tmp_path)
    assert leftovers(tmp_path) == []


def test_download_http_error_leaves_nothing(make, tmp_path):
    server = Server(httpx.Response(404, text="not yet"))
    with pytest.raises(NotFoundError):
        make(server).download(finished(), tmp_path)
    assert leftovers(tmp_path) == []


def test_download_connect_error_is_a_connection_error(make, tmp_path):
    with pytest.raises(APIConnectionError):
        make(Server(httpx.ConnectError)).download(finished(), tmp_path)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "record",
    [
        {"status": 1, "audio_url": "https://x/a.mp3"},
        {"status": 2, "audio_url": "https://x/preview"},
        {"status": None, "audio_url": ""},
        {"status": 3, "audio_url": "https://x/a.mp3"},
        {"status": 0, "fail_code": 7, "audio_url": "https://x/a.mp3"},
    ],
)
def test_download_refuses_unfinished_tasks(make, tmp_path, record):
    server = audio_server()
    with pytest.raises(MusicGenError, match="not complete"):
        make(server).download(TaskRecord.model_validate({"id": "t1", **record}), tmp_path)
    assert server.count == 0
    assert leftovers(tmp_path) == []


def test_download_preview_only_when_allowed(make, tmp_path):
    preview = TaskRecord.model_validate({"id": "t1", "status": 2, "title": "P", "audio_url": "https://x/p.mp3"})
    path = make(audio_server()).download(preview, tmp_path, allow_preview=True)
    assert path.name == "P.mp3"


@pytest.mark.parametrize("url", ["", None, "file:///etc/passwd", "ftp://x/a.mp3", "javascript:alert(1)", "/tmp/a.mp3"])
def test_download_refuses_non_http_urls(make, tmp_path, url):
    server = audio_server()
    with pytest.raises(MusicGenError, match="http"):
        make(server).download(finished(url=url), tmp_path)
    assert server.count == 0


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x/a.mp3", "a.mp3"])
def test_download_refuses_non_http_plain_urls(make, tmp_path, url):
    server = audio_server()
    with pytest.raises(MusicGenError, match="http"):
        make(server).download(url, tmp_path)
    assert server.count == 0


def test_download_v2_song(make, tmp_path):
    song = V2Song.model_validate({**SONG, "status": "FINISHED", "audio": "https://x/s.mp3", "title": "Two"})
    server = audio_server()
    path = make(server).download(song, tmp_path)
    assert path.name == "Two.mp3"
    assert "x-api-key" not in server.last.headers


def test_errors_do_not_carry_the_key_in_their_request_or_body() -> None:
    server = Server(httpx.Response(500, json={"message": f"key {KEY} is invalid", "echo": [KEY]}))
    client = MusicClient(KEY, base_url=BASE, http_client=httpx.Client(transport=httpx.MockTransport(server)))
    with pytest.raises(AuthenticationError) as info:
        client.key_info()
    error = info.value
    assert "x-api-key" not in error.request.headers
    assert "x-api-key" not in error.response.request.headers
    assert KEY not in repr(error.body) and KEY not in str(error)
