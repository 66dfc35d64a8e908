"""The sandbox's fault plan on every engine endpoint it serves (issue 37): ElevenLabs `POST /v1/music`,
`/v1/music/detailed` and `/v1/music/stem-separation`, and Gemini's `generateContent` for Lyria, each answering in its
engine's own error shape; and what the project's client makes of each fault. A 429 is a definite refusal before work:
not charged, journalled `rejected`, and it says so. A 5xx, a connection dropped once the request was read (before or
after the engine did the work) or an answer slower than the client waits may have been charged: journalled
`unknown`, said so, and never sent again by a wait, a resume, a re-run batch or an agent's re-issue. Through the
client against the module's keyed sandbox (uvicorn on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client import Client
from test_mcp_engine_songs import in_thread, ok
from test_mcp_tools import Asker

from ipymusicgen import MusicClient
from ipymusicgen.archive.extras import UnknownExtraError, make_extra
from ipymusicgen.config import Settings
from ipymusicgen.errors import APIStatusError, MusicGenError
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

KEY = "engine-faults-key-4d2e"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
LYRIA = "/v1beta/models/lyria-3-clip-preview:generateContent"
COMPOSE = "/v1/music"
DETAILED = "/v1/music/detailed"
STEMS = "/v1/music/stem-separation"
SONGS: dict[str, tuple[str, dict[str, Any]]] = {
    "elevenlabs compose": (COMPOSE, {"provider": "elevenlabs", "style": "folk", "seconds": 5}),
    "elevenlabs detailed": (
        DETAILED,
        {"provider": "elevenlabs", "lyrics": "one two", "seconds": 5, "timestamps": True},
    ),
    "lyria generateContent": (LYRIA, {"provider": "lyria", "style": "folk"}),
}
DOUBTFUL = ("server_error", "drop", "drop:after=true")
"""Faults after which the engine may have done the work: the client cannot tell, so it may have been charged."""


@pytest.fixture
def engine_clients(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., MusicClient]]:
    """Paid-style clients (a journal, an archive) whose engines are the module's sandbox, with its key."""
    from ipymusicgen.workspace.workspace import build_client

    made: list[MusicClient] = []

    def factory() -> MusicClient:
        settings = Settings.from_env().with_changes(
            api_key=service.api_key,
            base_url=service.base_url,
            v2_base_url=service.v2_base_url,
            **service.engine_settings(KEY),
            journal_path=tmp_path / "journal.sqlite3",
            poll_interval=0.05,
        )
        made.append(client := build_client(settings, archive=tmp_path / "archive"))
        return client

    yield factory
    for client in made:
        client.engine_calls.join(30)
        client.close()


def outcomes(tmp_path: Path, endpoint_prefix: str = "") -> list[str]:
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        return [a.outcome for a in journal.attempts() if a.endpoint.startswith(endpoint_prefix)]
    finally:
        journal.close()


# -- the sandbox: every fault on every engine endpoint, in the engine's own shape ------------------------------------


@pytest.mark.parametrize("path", [COMPOSE, DETAILED, STEMS, LYRIA, LYRIA.replace("/v1beta/", "/v1/")])
@pytest.mark.parametrize("fault", ["rate_limit", "server_error", "drop", "drop:after=true"])
def test_each_fault_plays_on_each_engine_endpoint_in_its_engines_error_shape(
    service: Sandbox, path: str, fault: str
) -> None:
    service.set_faults(f"{fault}:path={path}")
    google = "generateContent" in path
    headers = {"x-goog-api-key": KEY} if google else {"xi-api-key": KEY}
    body = {"contents": [{"parts": [{"text": "folk"}]}]} if google else {"prompt": "folk", "music_length_ms": 3000}
    with httpx.Client(base_url=service.engines_base_url, timeout=30) as http:
        if fault.startswith("drop"):
            with pytest.raises(httpx.TransportError):  # read whole, then hung up on: no status line at all
                http.post(path, json=body, headers=headers)
            assert service.request_counts() == {path: 1}
            return
        answer = http.post(path, json=body, headers=headers)
    status = 429 if fault == "rate_limit" else 500
    assert answer.status_code == status and service.request_counts() == {path: 1}
    if google:
        error = answer.json()["error"]
        assert error["code"] == status and error["status"] == ("RESOURCE_EXHAUSTED" if status == 429 else "INTERNAL")
    else:  # ElevenLabs: {"detail": {"status", "message"}}; its 429 is system_busy (or too_many_concurrent_requests)
        detail = answer.json()["detail"]
        assert detail["status"] == ("system_busy" if status == 429 else "internal_server_error") and detail["message"]
    if status == 429:
        assert answer.headers["retry-after"] == "1"


@pytest.mark.slow
@pytest.mark.parametrize("path", [COMPOSE, LYRIA])
def test_a_slow_answer_on_an_engine_endpoint_comes_whole_but_late(service: Sandbox, path: str) -> None:
    """The work is done at once and the answer held back: a client that waits long enough gets the song."""
    service.set_faults(f"slow:seconds=0.6:path={path}")
    google = path == LYRIA
    headers = {"x-goog-api-key": KEY} if google else {"xi-api-key": KEY}
    body = {"contents": [{"parts": [{"text": "folk"}]}]} if google else {"prompt": "folk", "music_length_ms": 3000}
    with httpx.Client(base_url=service.engines_base_url, timeout=30) as http:
        answer = http.post(path, json=body, headers=headers)
    assert answer.status_code == 200 and answer.elapsed.total_seconds() >= 0.6


# -- the client: refused and not charged, or may have been charged and never sent again ------------------------------


@pytest.mark.parametrize("song", SONGS)
def test_a_429_before_work_is_refused_not_charged_and_says_so(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, song: str
) -> None:
    path, fields = SONGS[song]
    service.set_faults(f"rate_limit:path={path}")
    client = engine_clients()
    [made] = client.wait(client.generate(**fields), timeout=30, interval=0.05)
    assert (made.state, made.fail_code, made.charge) == (TaskState.FAILED, 429, "not charged")
    assert "not charged" in made.fail_reason
    assert "Too many requests" in made.fail_reason  # the engine's own message, read from its own shape
    assert outcomes(tmp_path) == ["rejected"] and service.request_counts() == {path: 1}  # never retried


@pytest.mark.parametrize("song", SONGS)
@pytest.mark.parametrize("fault", DOUBTFUL)
def test_a_doubtful_answer_may_have_been_charged_and_no_wait_or_resume_sends_it_again(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, song: str, fault: str
) -> None:
    path, fields = SONGS[song]
    service.set_faults(f"{fault}:path={path}")
    client = engine_clients()
    ids = client.generate(**fields)
    [made] = client.wait(ids, timeout=30, interval=0.05)
    assert (made.state, made.charge) == (TaskState.FAILED, "may have been charged")
    assert "may have been charged" in made.fail_reason and "NOT sent again" in made.fail_reason
    service.clear_faults()  # the engine would answer now: nothing may send it again anyway
    client.wait(ids, timeout=5, interval=0.05)
    later = engine_clients()  # another kernel, later: it reads the journal, asks no engine
    [seen] = later.wait(list(ids.ids), timeout=5, interval=0.05)
    assert seen.charge == "may have been charged"
    [unknown] = later.resume().unknown
    assert unknown.payload["task_id"] == made.id
    assert outcomes(tmp_path) == ["unknown"]
    # resume() asked once whether this host is a team gateway keeping the answer (a GET, nothing paid): it is not
    assert service.request_counts() == {path: 1, "/gateway/v1/info": 1}


@pytest.mark.parametrize("fault", DOUBTFUL)
def test_a_batch_row_that_may_have_been_charged_is_not_sent_by_its_rerun(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, fault: str
) -> None:
    rows = [{"provider": "elevenlabs", "style": "folk", "seconds": 5}, {"provider": "lyria", "style": "harp"}]
    service.set_faults(f"{fault}:path={COMPOSE}")
    client = engine_clients()
    first = client.batch(rows, name="faulted", budget="$5", concurrency=1, wait=True)
    assert first.rows[0].state in ("failed", "unknown") and first.rows[1].state == "complete", first.rows
    service.clear_faults()
    again = engine_clients().batch(rows, name="faulted", budget="$5", concurrency=1, wait=True)
    assert again.rows[1].state == "complete"
    sent = {p: n for p, n in service.request_counts().items() if p in (COMPOSE, LYRIA)}  # not the key's counts
    assert sent == {COMPOSE: 1, LYRIA: 1}  # the rerun sent neither row again
    assert sorted(outcomes(tmp_path)) == ["submitted", "unknown"]


@pytest.mark.parametrize("song", ["elevenlabs compose", "lyria generateContent"])
def test_an_agents_reissue_of_a_call_that_may_have_been_charged_sends_nothing(
    engine_clients: Callable[..., MusicClient], service: Sandbox, song: str
) -> None:
    path, fields = SONGS[song]
    service.set_faults(f"drop:after=true:path={path}")
    desk = AgentDesk(engine_clients(), budget="$5")
    arguments = {k: v for k, v in fields.items() if k != "timestamps"}

    async def body() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(build_server(desk), elicitation_callback=Asker()) as client:
            first = ok(await client.call_tool("generate_song", arguments))
            desk.client.engine_calls.join(30)  # the compose ran (and was lost) in the client's background thread
            waited = ok(await client.call_tool("wait_for_songs", {"task_ids": first["task_ids"], "timeout_s": 5}))
            return first, waited, ok(await client.call_tool("generate_song", arguments))

    first, waited, again = in_thread(body)
    assert first["state"] == "sent" and waited["songs"][0]["state"] == "failed"
    assert again["repeat"] is True and again["task_ids"] == first["task_ids"]
    assert service.request_counts() == {path: 1}


@pytest.mark.parametrize(
    ("fault", "refusal", "outcome"),
    [("rate_limit", "not charged", "rejected"), ("server_error", "may have been charged", "unknown"),
     ("drop", "may have been charged", "unknown"), ("drop:after=true", "may have been charged", "unknown")],
)  # fmt: skip
def test_stems_on_each_fault_are_refused_or_kept_in_doubt_and_never_sent_twice(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, fault: str, refusal: str, outcome: str
) -> None:
    client = engine_clients()
    [song] = client.wait(client.generate(provider="lyria", style="folk"), timeout=60, interval=0.05)
    service.set_faults(f"{fault}:path={STEMS}")
    with pytest.raises(MusicGenError) as first:
        make_extra(client, song.id, "stems")
    assert refusal in str(first.value) or isinstance(first.value, APIStatusError | UnknownExtraError), first.value
    service.clear_faults()
    if outcome == "rejected":  # nothing was held: asked again, it is made
        assert make_extra(engine_clients(), song.id, "stems").state == "made"
        assert service.request_counts()[STEMS] == 2
        assert outcomes(tmp_path, "elevenlabs stem")[0] == "rejected"
    else:
        with pytest.raises(UnknownExtraError, match="may have been charged"):
            make_extra(engine_clients(), song.id, "stems")
        assert service.request_counts()[STEMS] == 1
        assert outcomes(tmp_path, "elevenlabs stem") == ["unknown"]


@pytest.mark.parametrize("song", SONGS)
def test_a_garbled_answer_may_have_been_charged_and_is_kept_in_doubt(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, song: str
) -> None:
    """A 200 whose body is no song (the `malformed` fault: a cut-off JSON where audio or Google's JSON belongs): the
    engine did the work, so it may have been charged; nothing is sent again."""
    path, fields = SONGS[song]
    service.set_faults(f"malformed:path={path}")
    client = engine_clients()
    ids = client.generate(**fields)
    [made] = client.wait(ids, timeout=30, interval=0.05)
    assert (made.state, made.charge) == (TaskState.FAILED, "may have been charged"), made.fail_reason
    client.wait(ids, timeout=5, interval=0.05)
    assert outcomes(tmp_path) == ["unknown"] and service.request_counts() == {path: 1}
