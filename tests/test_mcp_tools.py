"""The agent server's tools through the SDK's own client, in process, against a keyed sandbox playing a real
(paid) service: consent, budget, paying once, bad input, progress, the key kept out, what comes back."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import ManualClock, wait_until
from hostile_server import respond
from mcp import types
from mcp.client import Client

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.models.schema import PROMPT_MAX, TITLE_MAX
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.workspace.workspace import build_client

KEY = "k-agent-secret-7f3a9c"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 4}
"""The paid sandbox (`conftest.paid_sandbox`); its songs move on the wall clock here (this module's `service`)."""
GENERATE = "/v1/music/generate"
SUBMIT = "/v2/submit"
PAID_TOOLS = {"generate_song", "generate_song_v2", "write_lyrics", "run_batch", "make_extra"}
ALL_TOOLS = PAID_TOOLS | {"wait_for_songs", "get_songs", "search_library", "account", "batch_status", "unfinished"}
APP_ONLY = {"confirm_quote"}
"""Called by the consent card only (MCP Apps `_meta.ui.visibility: ["app"]`): see tests/test_mcp_consent_card.py."""
MODES = ("auto", "legacy")
"""The 2026-07-28 protocol (a paid tool returns its question as InputRequiredResult) and the handshake-era one
(the server sends elicitation/create mid-call): a user is asked either way."""

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@pytest.fixture
def service(paid_sandbox: Sandbox) -> Iterator[Sandbox]:
    paid_sandbox.reset()
    yield paid_sandbox
    paid_sandbox.reset()


@pytest.fixture
def make_desk(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., AgentDesk]]:
    """Desks over clients of the "real" service sharing one journal file (a restart is a new desk)."""
    made: list[MusicClient] = []

    def factory(budget: int | None = None, **changes: Any) -> AgentDesk:
        settings = Settings.from_env().with_changes(
            api_key=KEY,
            base_url=service.base_url,
            v2_base_url=service.v2_base_url,
            journal_path=tmp_path / "journal.sqlite3",
            poll_interval=0.05,
            **changes,
        )
        client = build_client(settings)
        made.append(client)
        return AgentDesk(client, budget=budget)

    yield factory
    for client in made:
        client.close()


class Asker:
    """The user behind the host: answers each consent question as told, and remembers the questions."""

    def __init__(self, action: str = "accept", send: bool = True) -> None:
        self.action, self.send = action, send
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        content = {"send": self.send} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)


def call(
    desk: AgentDesk,
    tool: str,
    arguments: dict[str, Any],
    *,
    asker: Elicit | None = None,
    mode: str = "auto",
    progress: list[tuple[float, float | None, str | None]] | None = None,
) -> types.CallToolResult:
    """One tool call through the SDK's client, connected to the server in this process."""

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append((done, total, message))

    async def run() -> types.CallToolResult:
        async with Client(build_server(desk), elicitation_callback=asker, mode=mode) as client:
            return await client.call_tool(tool, arguments, progress_callback=on_progress)

    return anyio.run(run)


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error(result: types.CallToolResult) -> str:
    assert result.is_error, result.content
    (block,) = result.content
    assert "\n" not in block.text, block.text
    return block.text


# -- the tools an agent sees ----------------------------------------------------------------------------------


def test_the_tools_carry_the_specs_bounds_and_read_only_hints(make_desk: Callable[..., AgentDesk]) -> None:
    async def listing() -> list[types.Tool]:
        async with Client(build_server(make_desk())) as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listing)}
    assert set(tools) == ALL_TOOLS | APP_ONLY
    for name, tool in tools.items():
        paid = name in PAID_TOOLS | APP_ONLY
        assert tool.annotations is not None and tool.annotations.read_only_hint is (not paid), name
    song = tools["generate_song"].input_schema["properties"]
    assert song["title"]["anyOf"][0]["maxLength"] == TITLE_MAX
    assert song["action"]["enum"][0] == "auto" and "artist_consistency" in song["action"]["enum"]
    assert song["instrumental"]["anyOf"][0]["maximum"] == 1 and "idempotency_key" in song and "max_credits" in song
    v2 = tools["generate_song_v2"].input_schema
    assert v2["properties"]["prompt"]["maxLength"] == PROMPT_MAX and v2["properties"]["prompt"]["minLength"] >= 1
    assert "prompt" in v2["required"]


# -- consent ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_paid_call_asks_first_and_sends_once_on_yes(
    make_desk: Callable[..., AgentDesk], service: Sandbox, mode: str
) -> None:
    asker = Asker()
    answer = data(call(make_desk(), "generate_song", {"style": "lo-fi rain"}, asker=asker, mode=mode))
    (question,) = asker.questions
    assert question.startswith("Pay about 3 credits (the key has 100 credits left)?") and '"lo-fi rain"' in question
    assert len(answer["task_ids"]) == 2 and answer["state"] == "sent" and answer["credits_estimate"] == 3
    assert service.request_counts()[GENERATE] == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("action", "send"), [("decline", False), ("cancel", False), ("accept", False)])
def test_a_declined_call_sends_nothing_and_says_so(
    make_desk: Callable[..., AgentDesk], service: Sandbox, mode: str, action: str, send: bool
) -> None:
    answer = data(call(make_desk(), "generate_song", {"style": "x"}, asker=Asker(action, send), mode=mode))
    assert answer["task_ids"] == [] and answer["state"] == "declined" and "nothing was sent" in answer["note"]
    assert service.request_counts().get(GENERATE, 0) == 0


def test_a_host_that_cannot_ask_needs_max_credits(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    desk = make_desk()
    assert "max_credits" in error(call(desk, "generate_song", {"style": "x"}))
    assert "more than max_credits=2" in error(call(desk, "generate_song", {"style": "x", "max_credits": 2}))
    assert service.request_counts().get(GENERATE, 0) == 0
    answer = data(call(desk, "generate_song", {"style": "x", "max_credits": 3}))
    assert answer["state"] == "sent" and service.request_counts()[GENERATE] == 1


def test_max_credits_below_the_estimate_is_refused_even_when_the_user_could_be_asked(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    asker = Asker()
    text = error(call(make_desk(), "generate_song", {"style": "x", "max_credits": 1}, asker=asker))
    assert text.endswith("more than max_credits=1") and asker.questions == []
    assert service.request_counts().get(GENERATE, 0) == 0


def test_write_lyrics_is_paid_and_asked_too(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    asker = Asker()
    answer = data(call(make_desk(), "write_lyrics", {"prompt": "rain on a tin roof"}, asker=asker))
    assert answer["state"] == "written" and answer["text"] and asker.questions[0].startswith("Pay about 1 credit (")
    declined = data(call(make_desk(), "write_lyrics", {"prompt": "x"}, asker=Asker("decline")))
    assert declined["state"] == "declined" and service.request_counts()["/v1/lyrics"] == 1


# -- money ------------------------------------------------------------------------------------------------------


def test_the_servers_budget_caps_what_it_spends_in_its_lifetime(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = make_desk(budget=4)
    assert data(call(desk, "generate_song", {"style": "one"}, asker=Asker()))["state"] == "sent"
    asker = Asker()
    text = error(call(desk, "generate_song_v2", {"prompt": "two"}, asker=asker))
    assert text.startswith("Error executing tool generate_song_v2: budget:") and "2 more credit(s) of its 4" in text
    assert asker.questions == []  # refused before anyone is asked
    assert service.request_counts()[GENERATE] == 1 and service.request_counts().get(SUBMIT, 0) == 0
    account = data(call(desk, "account", {}))  # the service charged 2 where the table guessed 3: measured counts
    assert account["server_budget_left"] == 2 and account["server_spent_estimate"] == 3
    assert account["server_spent_measured"] == 2
    assert account["credits_left"] == service.credits(KEY)


def test_no_credits_left_is_refused_before_sending(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    service.state.account(KEY).music_counts = 2
    text = error(call(make_desk(), "generate_song", {"style": "x"}, asker=Asker()))
    assert "credits: the key has 2 left" in text and service.request_counts().get(GENERATE, 0) == 0


# -- paying once ------------------------------------------------------------------------------------------------


def test_the_same_idempotency_key_returns_the_first_ids_across_a_restart(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    args = {"style": "rainy night", "title": "Rain", "action": "custom", "lyrics": "la la", "idempotency_key": "k-1"}
    first = data(call(make_desk(), "generate_song", args, asker=Asker()))
    asker = Asker()
    again = data(call(make_desk(), "generate_song", args, asker=asker))  # a new desk: the server restarted
    assert again["task_ids"] == first["task_ids"] and again["state"] == "replayed"
    assert asker.questions == [] and service.request_counts()[GENERATE] == 1
    changed = error(call(make_desk(), "generate_song", {**args, "title": "Sun"}, asker=Asker()))
    assert "idempotency_key: already used with different parameters" in changed
    assert service.request_counts()[GENERATE] == 1


def test_a_create_that_may_have_landed_is_unknown_listed_and_never_resent(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    service.set_faults(f"server_error:count=1:path={GENERATE}")
    args = {"style": "doubt", "idempotency_key": "k-doubt"}
    answer = data(call(make_desk(), "generate_song", args, asker=Asker()))
    assert answer["state"] == "unknown" and answer["task_ids"] == []
    again = data(call(make_desk(), "generate_song", args, asker=Asker()))
    assert again["state"] == "unknown" and service.request_counts()[GENERATE] == 1
    listed = data(call(make_desk(), "unfinished", {}))
    assert [a["endpoint"] for a in listed["unknown_attempts"]] == ["generate"]


def test_a_call_without_a_key_is_journalled_and_its_songs_listed_until_received(
    make_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(service.state.stage_seconds)
    monkeypatch.setattr(service.state, "clock", clock)
    desk = make_desk()
    ids = data(call(desk, "generate_song", {"style": "x"}, asker=Asker()))["task_ids"]
    assert set(data(call(desk, "unfinished", {}))["running_task_ids"]) == set(ids)
    clock.stages(10)
    data(call(desk, "wait_for_songs", {"task_ids": ids, "timeout_s": 30}))
    assert data(call(make_desk(), "unfinished", {}))["running_task_ids"] == []


# -- bad input ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("generate_song", {"action": "custom", "title": "x" * (TITLE_MAX + 1), "style": "pop"}, "title"),
        ("generate_song", {"action": "auto", "mv": "MFV9.9"}, "mv"),
        ("generate_song", {"action": "dance"}, "action"),
        ("generate_song", {"action": "concat"}, "continue_song_id"),
        ("generate_song", {"action": "auto", "instrumental": 7}, "instrumental"),
        ("generate_song_v2", {"prompt": "x" * (PROMPT_MAX + 1)}, "prompt"),
        ("generate_song", {"style": "x", "idempotency_key": "  "}, "idempotency_key"),
        ("run_batch", {"rows": [{"style": "ok"}, {"action": "custom", "title": "y" * 99}], "name": "b"}, "title"),
        ("wait_for_songs", {"task_ids": ["a"], "timeout_s": 601}, "timeout_s"),
        ("get_songs", {"task_ids": []}, "task_ids"),
        ("generate_song", {"style": "x", "max_credits": -1}, "max_credits"),
        ("search_library", {"limit": 0}, "limit"),
    ],
)
def test_bad_input_is_one_line_naming_the_field_and_nothing_is_sent(
    make_desk: Callable[..., AgentDesk], service: Sandbox, tool: str, arguments: dict[str, Any], field: str
) -> None:
    asker = Asker()
    text = error(call(make_desk(), tool, arguments, asker=asker))
    assert field in text and asker.questions == []
    assert not {GENERATE, SUBMIT, "/v1/get_api_key_info"} & set(service.request_counts())


# -- waiting, reading -----------------------------------------------------------------------------------------------


def test_wait_reports_progress_and_returns_running_songs_when_its_time_is_up(
    make_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(service.state.stage_seconds)
    monkeypatch.setattr(service.state, "clock", clock)
    desk = make_desk()
    ids = data(call(desk, "generate_song", {"style": "slow"}, asker=Asker()))["task_ids"]
    seen: list[tuple[float, float | None, str | None]] = []
    partial = data(call(desk, "wait_for_songs", {"task_ids": ids, "timeout_s": 0.3}, progress=seen))
    assert partial["all_finished"] is False and set(partial["still_running"]) == set(ids)
    assert {s["state"] for s in partial["songs"]} <= {"queued", "writing"}
    clock.stages(10)
    seen.clear()
    done = data(call(desk, "wait_for_songs", {"task_ids": ids, "timeout_s": 30}, progress=seen))
    assert done["all_finished"] and [s["state"] for s in done["songs"]] == ["ready", "ready"]
    assert seen and seen[-1][0] == seen[-1][1] == 6 and "ready" in (seen[-1][2] or "")
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)
    song = done["songs"][0]
    assert song["audio_url"].startswith("http://127.0.0.1") and song["duration_s"] and song["lyrics"]


@pytest.mark.slow
def test_songs_are_read_archived_searched_and_returned_as_audio(
    make_desk: Callable[..., AgentDesk], service: Sandbox, tmp_path: Path
) -> None:
    desk = make_desk()
    ids = data(call(desk, "generate_song", {"style": "harbour bells"}, asker=Asker()))["task_ids"]
    data(call(desk, "wait_for_songs", {"task_ids": ids, "timeout_s": 30}))
    with Library(tmp_path / "journal.sqlite3") as library:
        wait_until(lambda: all(library.archived_path(i) for i in ids), "both songs archived")
    result = call(desk, "get_songs", {"task_ids": ids, "include_audio": True})
    shown = data(result)
    assert all(Path(s["archived_path"]).is_file() for s in shown["songs"])
    audio = [block for block in result.content if block.type == "audio"]  # inline base64 only when asked for
    assert len(audio) == 2 and {a.mime_type for a in audio} == {"audio/mpeg"}
    links = [block for block in result.content if block.type == "resource_link"]  # and offered as links always
    assert [str(link.uri) for link in links] == [f"song://{i}/audio" for i in ids]
    found = data(call(desk, "search_library", {"text": "harbour"}))
    assert {s["id"] for s in found["songs"]} == set(ids)

    async def resource() -> str:
        async with Client(build_server(desk)) as client:
            read = await client.read_resource(f"song://{ids[0]}")
            return read.contents[0].text

    record = json.loads(anyio.run(resource))
    assert record["id"] == ids[0] and record["state"] == "ready"


@pytest.mark.slow
def test_a_batch_starts_at_once_and_reports_on_itself(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    desk = make_desk()
    rows = [{"style": "one"}, {"style": "two"}]
    asker = Asker()
    started = data(call(desk, "run_batch", {"rows": rows, "name": "agent-batch"}, asker=asker))
    assert started["state"] == "started" and asker.questions[0].startswith("Pay about 6 credits")
    wait_until(lambda: data(call(desk, "batch_status", {"name": "agent-batch"}))["running"] is False, "batch ends")
    status = data(call(desk, "batch_status", {"name": "agent-batch"}))
    assert len(status["ids"]) == 4 and service.request_counts()[GENERATE] == 2
    again = data(call(make_desk(), "run_batch", {"rows": rows, "name": "agent-batch"}, asker=Asker()))
    assert again["state"] == "started" and again["credits_estimate"] == 0
    assert "no batch" in error(call(desk, "batch_status", {"name": "nope"}))


# -- the key stays out ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_key_never_appears_in_results_progress_or_errors(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = make_desk()
    seen: list[tuple[float, float | None, str | None]] = []
    asker = Asker()
    texts = []
    made = call(desk, "generate_song", {"action": "custom", "style": f"echo {KEY}", "title": KEY}, asker=asker)
    ids = data(made)["task_ids"]
    texts += [made.content[0].text, *asker.questions]
    waited = call(desk, "wait_for_songs", {"task_ids": ids, "timeout_s": 30}, progress=seen)
    texts += [waited.content[0].text, json.dumps(seen)]
    service.set_faults(f"server_error:count=1:path={GENERATE}")
    texts.append(call(desk, "generate_song", {"style": KEY}, asker=Asker()).content[0].text)
    texts.append(call(desk, "generate_song", {"action": "custom", "title": KEY * 9}, asker=Asker()).content[0].text)
    texts += [call(desk, name, {}).content[0].text for name in ("account", "unfinished")]
    for text in texts:
        assert KEY not in text
    assert any("***" in text or "…" in text for text in texts)


def test_a_service_that_echoes_the_key_never_gets_it_into_a_tool_result(
    hostile_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A hostile service answers with the key in titles, fail reasons, key names and 422 messages."""

    def echo(request: Any, sock: Any) -> None:
        key = request.headers.get("x-api-key", "")
        if request.path == "/v1/get_api_key_info":
            data = {"key_name": key, "key_music_counts": 50, "key_status": 1}
            respond(sock, 200, {"status": 200, "message": "ok", "data": data})
        elif request.path == "/v1/music/generate":
            detail = [{"loc": ["body", "style"], "msg": f"bad style for {key}", "type": "x", "input": key}]
            respond(sock, 422, {"detail": detail})
        else:
            song = {"id": "t1", "status": 3, "title": f"Song of {key}", "fail_reason": f"key {key} refused"}
            respond(sock, 200, [song])

    server = hostile_server(echo)
    settings = Settings.from_env().with_changes(
        api_key=KEY, base_url=server.url, v2_base_url=server.url, journal_path=tmp_path / "j.sqlite3", max_retries=0
    )
    with build_client(settings, archive=False) as client:
        desk = AgentDesk(client)
        texts = [
            call(desk, "generate_song", {"style": "x", "max_credits": 10}).content[0].text,
            call(desk, "get_songs", {"task_ids": ["t1"]}).content[0].text,
            call(desk, "account", {}).content[0].text,
        ]
        desk.close()
    assert "Song of ***" in texts[1] and "UnprocessableEntityError" in texts[0]
    for text in texts:
        assert KEY not in text
