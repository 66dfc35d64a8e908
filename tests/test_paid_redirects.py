"""A redirect answering a paid create: the create may have been carried out (303 See Other says it was), so the
caller is told the outcome is unknown, the attempt is journalled unknown, and nothing is resent or followed."""

from __future__ import annotations

import asyncio

import pytest
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen.client.faces import AsyncMusicClient, MusicClient
from ipymusicgen.errors import CreateOutcomeUnknownError, RedirectRefusedError
from ipymusicgen.storage.journal import Journal

pytestmark = pytest.mark.usefixtures("clean_env")  # no MUSICGEN_* setting of the machine leaks in

KEY = "sk-redirect-canary-7f3a"


def redirecting(status: int):
    def handler(req: RawRequest, sock: object) -> None:
        respond(sock, status, {"moved": True}, {"Location": f"/v1/result?k={req.headers.get('x-api-key', '')}"})  # type: ignore[arg-type]

    return handler


@pytest.mark.parametrize("status", [303, 301, 302, 307, 308])
def test_a_redirect_to_a_paid_create_is_an_unknown_outcome_journalled_unknown(journal: Journal, status: int) -> None:
    with (
        HostileServer(redirecting(status)) as server,
        MusicClient(
            KEY, base_url=server.url, v2_base_url=server.url, journal=journal, timeout=2.0, max_retries=0
        ) as client,
    ):
        with pytest.raises(CreateOutcomeUnknownError) as caught:
            client.generate(action="auto", style="lo-fi")
        with pytest.raises(CreateOutcomeUnknownError):
            client.submit_v2(is_auto=1, model_version="v4.5", prompt="a v2 create")
        assert len(server.requests) == 2  # neither followed nor resent
    exc = caught.value
    assert not isinstance(exc, RedirectRefusedError)
    assert f"HTTP {status}" in str(exc) and "NOT resent" in str(exc)
    assert KEY not in str(exc)
    assert exc.attempt_id is not None
    assert [a.outcome for a in journal.attempts()] == ["unknown", "unknown"]
    assert exc.attempt_id == journal.attempts()[0].id


def test_a_redirect_to_a_paid_create_from_the_async_client_is_unknown_too(journal: Journal) -> None:
    async def create() -> None:
        async with AsyncMusicClient(
            KEY, base_url=server.url, v2_base_url=server.url, journal=journal, timeout=2.0, max_retries=0
        ) as client:
            await client.generate(action="auto", style="lo-fi")

    with HostileServer(redirecting(303)) as server, pytest.raises(CreateOutcomeUnknownError):
        asyncio.run(create())
    assert [a.outcome for a in journal.attempts()] == ["unknown"]


def test_a_redirect_to_a_read_is_still_refused_as_a_redirect(journal: Journal) -> None:
    with (
        HostileServer(redirecting(303)) as server,
        MusicClient(
            KEY, base_url=server.url, v2_base_url=server.url, journal=journal, timeout=2.0, max_retries=0
        ) as client,
        pytest.raises(RedirectRefusedError),
    ):
        client.tasks(["t1"])
    assert journal.attempts() == []


def redirecting_creates(req: RawRequest, sock: object) -> None:
    if req.path == "/v1/get_api_key_info":
        respond(sock, 200, {"status": 200, "message": "ok", "data": {"key_music_counts": 100}})  # type: ignore[arg-type]
    elif req.path == "/v1/music/generate":
        respond(sock, 303, {}, {"Location": "/v1/music/tasks?ids=t1"})  # type: ignore[arg-type]
    else:
        respond(sock, 200, {"status": 200, "message": "ok", "data": []})  # type: ignore[arg-type]


def test_a_batch_row_answered_by_a_redirect_is_unknown_and_not_resent(journal: Journal) -> None:
    with (
        HostileServer(redirecting_creates) as server,
        MusicClient(
            KEY, base_url=server.url, v2_base_url=server.url, journal=journal, timeout=2.0, max_retries=0
        ) as client,
    ):
        batch = client.batch([{"action": "auto", "style": "lo-fi"}], name="redirected", stall_timeout=5)
        creates = [r for r in server.requests if r.path == "/v1/music/generate"]
    assert len(creates) == 1
    assert batch.counts().get("unknown") == 1, batch.counts()
    assert [a.outcome for a in journal.attempts()] == ["unknown"]
