"""`client.generate(..., provider="elevenlabs" | "lyria")`: submitted ids like today, the attempt journalled BEFORE
sending, the call in the background, the audio archived from the answer, `wait()` giving records with `provider`.
An answer lost after sending is "may have been charged" and never sent again; a definite refusal is not charged
and says so; the keys never show. Hostile servers play 429, 5xx, a dropped connection and echoed keys."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ipymusicgen import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.errors import MissingKeyError, RequestValidationError, TaskFailedError
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal
from tests.hostile_server import HostileServer, RawRequest, respond

KEY = "engine-test-key-0123"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
LYRICS = "rain on the roof\nsoft and slow\n\nmorning light\nlet it go"


@pytest.fixture
def engine_clients(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., MusicClient]]:
    """Paid-style clients (a journal, an archive) whose engines are the module's sandbox, with its key."""
    from ipymusicgen.workspace.workspace import build_client

    made: list[MusicClient] = []

    def factory(**changes: Any) -> MusicClient:
        settings = Settings.from_env().with_changes(
            **{
                "api_key": service.api_key,
                "base_url": service.base_url,
                "v2_base_url": service.v2_base_url,
                "elevenlabs_base_url": service.engines_base_url,
                "gemini_base_url": service.engines_base_url,
                "elevenlabs_api_key": SecretStr(KEY),
                "gemini_api_key": SecretStr(KEY),
                "journal_path": tmp_path / "journal.sqlite3",
                "poll_interval": 0.05,
                **changes,
            }
        )
        made.append(client := build_client(settings, archive=tmp_path / "archive"))
        return client

    yield factory
    for client in made:
        client.engine_calls.join(30)
        client.close()


def attempts(tmp_path: Path) -> list[Any]:
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        return journal.attempts()
    finally:
        journal.close()


def test_an_elevenlabs_song_is_submitted_waited_and_archived_like_any_other(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients()
    submitted = client.generate(provider="elevenlabs", seconds=90, style="lo-fi rain", lyrics=LYRICS, seed=3)
    assert len(submitted.ids) == 1 and submitted.ids[0].startswith("elevenlabs-")
    [song] = client.wait(submitted, timeout=120, interval=0.05, archived=True)
    assert song.state is TaskState.COMPLETE and song.provider == "elevenlabs"
    assert song.duration_seconds == 90 and song.lyrics == LYRICS and song.charge == "charged"
    archived = list((tmp_path / "archive").glob("*.mp3"))
    assert len(archived) == 1 and archived[0].stat().st_size > 10_000
    assert service.request_counts() == {"/v1/music": 1}  # no task query for an engine song: nothing to poll
    [attempt] = attempts(tmp_path)
    assert (attempt.endpoint, attempt.outcome) == ("elevenlabs compose", "submitted")
    assert attempt.payload["seconds"] == 90 and KEY not in json.dumps(attempt.payload)


def test_a_lyria_clip_comes_back_with_its_lyrics_text(
    engine_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = engine_clients()
    [song] = client.wait(client.generate(provider="lyria", style="cheerful folk"), timeout=120, interval=0.05)
    assert song.state is TaskState.COMPLETE and song.provider == "lyria" and song.duration_seconds == 30
    assert song.lyrics and "[" in song.lyrics
    assert list(service.request_counts()) == ["/v1beta/models/lyria-3-clip-preview:generateContent"]


def test_word_timestamps_come_with_the_detailed_answer(engine_clients: Callable[..., MusicClient]) -> None:
    client = engine_clients()
    ids = client.generate(provider="elevenlabs", lyrics="one two\n\nthree", seconds=8, timestamps=True)
    [song] = client.wait(ids, timeout=60, interval=0.05)
    assert [w[0] for w in song.timestamps] == ["one", "two", "three"] and song.timestamps[-1][2] == 8000


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"provider": "lyria", "style": "folk", "seconds": 90}, "seconds: lyria (lyria-3-clip-preview) always"),
        ({"provider": "elevenlabs", "style": "folk", "seconds": 2}, "seconds: elevenlabs (music_v1) makes songs"),
        ({"provider": "elevenlabs", "style": "folk", "seconds": 601}, "at most 600"),
        ({"provider": "lyria", "style": "folk", "extend": "abc"}, "extend: lyria"),
        ({"provider": "elevenlabs", "style": "folk", "seed": 1}, "seed: elevenlabs"),
        ({"provider": "udio", "style": "folk"}, "provider: must be one of"),
    ],
)
def test_a_request_an_engine_cannot_honour_is_refused_before_anything_is_sent_or_journalled(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, fields: dict, said: str
) -> None:
    client = engine_clients()
    with pytest.raises(RequestValidationError) as refused:
        client.generate(**fields)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert service.request_counts() == {} and attempts(tmp_path) == []


def test_without_its_key_an_engine_song_is_refused_naming_the_variable(
    engine_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = engine_clients(elevenlabs_api_key=None)
    with pytest.raises(MissingKeyError, match="ELEVENLABS_API_KEY"):
        client.generate(provider="elevenlabs", style="folk", seconds=10)
    assert service.request_counts() == {}


def hostile_client(engine_clients: Callable[..., MusicClient], server: HostileServer) -> MusicClient:
    return engine_clients(elevenlabs_base_url=server.url, gemini_base_url=server.url)


def test_the_attempt_is_journalled_before_the_request_leaves(
    engine_clients: Callable[..., MusicClient], hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    seen: list[list[str]] = []

    def handler(request: RawRequest, sock: socket.socket) -> None:
        seen.append([a.outcome for a in attempts(tmp_path)])  # what the journal held when the request arrived
        respond(sock, 200, raw=b"\xff\xfbMP3", headers={"Content-Type": "audio/mpeg"})

    client = hostile_client(engine_clients, hostile_server(handler))
    [song] = client.wait(client.generate(provider="elevenlabs", style="folk", seconds=5), timeout=30, interval=0.05)
    assert song.state is TaskState.COMPLETE
    assert seen == [["pending"]]


def test_a_connection_dropped_after_the_request_may_have_been_charged_and_is_never_sent_again(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    service.set_faults("drop:after=true:path=/v1/music")
    client = engine_clients()
    ids = client.generate(provider="elevenlabs", style="folk", seconds=5)
    [song] = client.wait(ids, timeout=30, interval=0.05)
    assert song.state is TaskState.FAILED and song.charge == "may have been charged"
    assert "may have been charged" in song.fail_reason and "NOT sent again" in song.fail_reason
    client.wait(ids, timeout=5, interval=0.05)  # waiting again never re-sends
    with pytest.raises(TaskFailedError):
        client.wait(ids, timeout=5, interval=0.05, raise_on_failure=True)
    assert service.request_counts() == {"/v1/music": 1}
    [attempt] = attempts(tmp_path)
    assert attempt.outcome == "unknown"


@pytest.mark.parametrize(
    ("fault", "charge", "outcome"),
    [
        ("rate_limit", "not charged", "rejected"),
        ("server_error", "may have been charged", "unknown"),
        ("malformed", "may have been charged", "unknown"),
    ],
)
def test_what_a_failed_engine_call_means_for_money(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, fault: str, charge: str, outcome: str
) -> None:
    service.set_faults(f"{fault}:path=/v1beta/models")
    client = engine_clients()
    [song] = client.wait(client.generate(provider="lyria", style="folk"), timeout=30, interval=0.05)
    assert (song.state, song.charge) == (TaskState.FAILED, charge)
    assert charge in song.fail_reason
    assert sum(service.request_counts().values()) == 1  # never retried, whatever the status
    assert [a.outcome for a in attempts(tmp_path)] == [outcome]


def test_a_wrong_key_is_a_definite_refusal_that_says_it_was_not_charged(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients(elevenlabs_api_key=SecretStr("sk_not_this_one"))
    [song] = client.wait(client.generate(provider="elevenlabs", style="folk", seconds=5), timeout=30, interval=0.05)
    assert song.fail_code == 401 and song.charge == "not charged"
    assert "not charged" in song.fail_reason and "Invalid API key" in song.fail_reason
    assert [a.outcome for a in attempts(tmp_path)] == ["rejected"]


def test_an_echoed_key_never_reaches_a_record_the_journal_or_a_repr(
    engine_clients: Callable[..., MusicClient], hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    secret = "sk_Echo/Me+Please=="

    def handler(request: RawRequest, sock: socket.socket) -> None:
        echoes = [request.headers.get("xi-api-key", ""), urllib.parse.quote(secret, safe=""), secret.upper()]
        respond(sock, 401, {"detail": {"status": "invalid_api_key", "message": " / ".join(echoes)}})

    server = hostile_server(handler)
    client = engine_clients(elevenlabs_api_key=SecretStr(secret), elevenlabs_base_url=server.url)
    [song] = client.wait(client.generate(provider="elevenlabs", style="folk", seconds=5), timeout=30, interval=0.05)
    assert server.requests[0].headers["xi-api-key"] == secret  # it was sent, and echoed three ways
    shown = [
        song.model_dump_json(),
        repr(client),
        repr(client.settings),
        json.dumps([a.note for a in attempts(tmp_path)]),
    ]
    for text in shown:
        for form in (secret, urllib.parse.quote(secret, safe=""), secret.upper()):
            assert form not in text
    assert "***" in song.fail_reason


def test_the_engine_keys_and_base_urls_come_from_their_own_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELEVENLABS_API_KEY", " sk_eleven \n")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-gemini")
    monkeypatch.setenv("MUSICGEN_ELEVENLABS_BASE_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("MUSICGEN_GEMINI_BASE_URL", "https://gemini.example/")
    settings = Settings.from_env()
    assert settings.engine_key("elevenlabs") == "sk_eleven" and settings.engine_key("lyria") == "AIza-gemini"
    assert settings.engine_base_url("elevenlabs") == "http://127.0.0.1:9"
    assert settings.engine_base_url("lyria") == "https://gemini.example"
    assert "sk_eleven" not in repr(settings) and "AIza" not in repr(settings)
    monkeypatch.delenv("ELEVENLABS_API_KEY")
    monkeypatch.delenv("MUSICGEN_ELEVENLABS_BASE_URL")
    bare = Settings.from_env()
    assert bare.engine_key("elevenlabs") is None and bare.engine_base_url("elevenlabs") == "https://api.elevenlabs.io"


def test_a_plain_http_engine_host_elsewhere_is_refused_before_sending(
    engine_clients: Callable[..., MusicClient], tmp_path: Path
) -> None:
    client = engine_clients(gemini_base_url="http://gemini.example")
    with pytest.raises(Exception, match="plain http"):
        client.generate(provider="lyria", style="folk")
    assert attempts(tmp_path) == []


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from ipymusicgen.sandbox import Sandbox
    with Sandbox(stage_seconds=0.05, song_seconds=2) as sandbox:
        client = sandbox.client()
        songs = client.wait(client.generate(provider="elevenlabs", style="folk", seconds=4), interval=0.05)
        print(json.dumps({"state": songs[0].state.value, "sdk": "elevenlabs" in sys.modules}))
    """
)


@pytest.mark.slow
def test_paid_calls_never_go_through_the_elevenlabs_sdk() -> None:
    """The official SDK retries a POST on 429/5xx by default: the project's paid calls never load it."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"state": "complete", "sdk": False}


def test_another_client_on_the_journal_sees_an_engine_song_without_asking_the_service(
    engine_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    first = engine_clients()
    [made] = first.wait(first.generate(provider="lyria", style="folk"), timeout=60, interval=0.05)
    later = engine_clients()  # another kernel (or this one after a restart) on the same journal
    [seen] = later.wait([made.id], timeout=30, interval=0.05)
    assert (seen.state, seen.provider, seen.audio_url) == (TaskState.COMPLETE, "lyria", made.audio_url)
    assert "/v1/music/tasks" not in service.request_counts()  # the service never hears of an engine id


def test_an_engine_song_no_answer_is_known_of_may_have_been_charged_and_resume_lists_it(
    engine_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    service.set_faults("drop:after=true:path=/v1/music")
    first = engine_clients()
    [lost] = first.wait(first.generate(provider="elevenlabs", style="folk", seconds=5), timeout=30, interval=0.05)
    later = engine_clients()
    [seen] = later.wait([lost.id], timeout=30, interval=0.05)
    assert seen.state is TaskState.FAILED and seen.charge == "may have been charged"
    assert "NOT sent again" in seen.fail_reason
    [unknown] = later.resume().unknown
    assert unknown.endpoint == "elevenlabs compose" and unknown.payload["task_id"] == lost.id
    assert service.request_counts() == {"/v1/music": 1, "/gateway/v1/info": 1}  # asked: no gateway, not resent


def test_the_services_records_say_their_provider_too(
    engine_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = engine_clients()
    ids, submitted = (
        client.generate(action="auto", style="lo-fi"),
        client.submit_v2(is_auto=1, model_version="v4.5", prompt="rain"),
    )
    service.clock.stages(3)  # type: ignore[attr-defined]  # the service's songs move on the test's clock
    songs = client.wait(ids, timeout=30, interval=0.05)
    v2 = client.wait(submitted, timeout=30, interval=0.05)
    assert {s.provider for s in [*songs, *v2]} == {"musicful"}


def test_the_async_client_submits_and_waits_an_engine_song_the_same_way(service: Sandbox, tmp_path: Path) -> None:
    import asyncio

    from ipymusicgen import AsyncMusicClient

    async def scenario() -> Any:
        settings = Settings.from_env().with_changes(
            elevenlabs_base_url=service.engines_base_url, elevenlabs_api_key=SecretStr(KEY), poll_interval=0.05
        )
        async with AsyncMusicClient(KEY, base_url=service.base_url, settings=settings, journal=False,
                                    archive=False) as client:  # fmt: skip
            ids = await client.generate(provider="elevenlabs", style="folk", seconds=6)
            return await client.wait(ids, timeout=60, interval=0.05)

    [song] = asyncio.run(scenario())
    assert song.state is TaskState.COMPLETE and song.provider == "elevenlabs" and song.duration_seconds == 6


def test_an_answers_audio_is_kept_beside_the_journal_or_in_the_user_data_folder_never_in_a_shared_temp(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    import platformdirs

    from ipymusicgen.client.engine_calls import spool_dir

    journalled = engine_clients()
    assert spool_dir(journalled) == tmp_path / "engine-audio"
    settings = Settings.from_env().with_changes(elevenlabs_base_url=service.engines_base_url)
    bare = MusicClient(KEY, settings=settings, journal=False, archive=False)
    try:
        user_data = Path(platformdirs.user_data_dir("ipymusicgen", appauthor=False))
        assert spool_dir(bare) == user_data / "engine-audio"  # a paid song is never in a folder removed at exit
    finally:
        bare.close()
    played = service.client()
    try:
        folder = spool_dir(played)
        assert folder.name.startswith("ipymusicgen-engine-audio-") and folder.stat().st_mode & 0o077 == 0
    finally:
        played.close()


KILLED_CHILD = textwrap.dedent(
    """
    import sys, threading
    from pydantic import SecretStr
    from ipymusicgen import MusicClient
    from ipymusicgen.config import Settings
    from ipymusicgen.storage.journal import Journal

    url, journal_path, key = sys.argv[1:4]
    settings = Settings.from_env().with_changes(elevenlabs_base_url=url, elevenlabs_api_key=SecretStr(key))
    client = MusicClient("service-key-0000", base_url=url, settings=settings, journal=Journal(journal_path),
                         archive=False)
    print(client.generate(provider="elevenlabs", style="night drive", seconds=30).ids[0], flush=True)
    threading.Event().wait()  # the call runs in the background until this process is killed
    """
)


@pytest.mark.slow
def test_a_process_killed_while_its_engine_call_is_out_leaves_it_may_have_been_charged(
    hostile_server: Callable[..., HostileServer], tmp_path: Path
) -> None:
    import signal

    from tests.hostile_server import wait_for

    server = hostile_server(lambda request, sock: server.hold(sock))
    journal_path = tmp_path / "journal.sqlite3"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, server.url, str(journal_path), KEY],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        task_id = child.stdout.readline().strip()  # the id is printed as the call goes out in the background: the
        wait_for(server.received, "the engine call to arrive", timeout=120)  # two come in either order
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert task_id.startswith("elevenlabs-") and KEY not in task_id + out + err
    journal = Journal(journal_path)
    try:
        [attempt] = journal.attempts(outcome="unknown")  # a pending attempt of a dead process: maybe charged
    finally:
        journal.close()
    assert attempt.endpoint == "elevenlabs compose" and attempt.payload["task_id"] == task_id
    assert len(server.requests) == 1


@pytest.mark.slow
def test_an_answer_slower_than_the_engine_timeout_may_have_been_charged_and_is_not_sent_again(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    service.set_faults("slow:seconds=5:path=/v1beta/models")  # the work is done at once, the answer comes late
    client = engine_clients()
    client.engine_calls.timeout = 0.5
    [song] = client.wait(client.generate(provider="lyria", style="folk"), timeout=30, interval=0.05)
    assert (song.state, song.charge) == (TaskState.FAILED, "may have been charged")
    assert "NOT sent again" in song.fail_reason
    assert sum(service.request_counts().values()) == 1
    assert [a.outcome for a in attempts(tmp_path)] == ["unknown"]
