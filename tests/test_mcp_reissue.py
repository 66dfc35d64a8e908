"""Agent calls safe to re-issue: a paid song call without an idempotency_key that repeats one made within the
ten-minute window (a host whose stream broke sends it again with a new request id) gets the first call's ids
and pays nothing; `again=true` pays for new songs. Every tool declares its output; archived songs are offered
as resource_links to `song://{id}/audio`. Through the SDK's own client, against a keyed sandbox; the window
runs on a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import wait_until
from mcp import types
from mcp.client import Client
from test_mcp_tools import Asker, call, data

from ipymusicgen.batch.drivers import request_hash
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.mcp.desk import REISSUE_WINDOW_S
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library

KEY = "k-reissue-secret-90be"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""
GENERATE = "/v1/music/generate"
SUBMIT = "/v2/submit"
PAID_SONG_TOOLS = ("generate_song", "generate_song_v2")


class WindowClock:
    """The desk's wall clock for the re-issue window, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def make_desk(paid_clients: Callable[..., MusicClient]) -> Callable[..., AgentDesk]:
    """Desks on one journal (a restarted server is a new desk, on a client of its own), all on one fake window
    clock."""
    clock = WindowClock()

    def factory() -> AgentDesk:
        desk = AgentDesk(paid_clients())
        desk.clock = clock
        return desk

    factory.clock = clock  # type: ignore[attr-defined]
    return factory


ARGS = {"generate_song": {"style": "rain on tin"}, "generate_song_v2": {"prompt": "rain on tin"}}
PATHS = {"generate_song": GENERATE, "generate_song_v2": SUBMIT}


@pytest.mark.parametrize("tool", PAID_SONG_TOOLS)
def test_a_reissued_call_without_a_key_pays_once_and_says_it_is_a_repeat(
    make_desk: Callable[..., AgentDesk], service: Sandbox, tool: str
) -> None:
    asker = Asker()
    first = data(call(make_desk(), tool, ARGS[tool], asker=asker))
    assert first["state"] == "sent" and first["repeat"] is False and len(first["task_ids"]) == 2
    make_desk.clock.now += REISSUE_WINDOW_S - 1  # type: ignore[attr-defined]
    again = data(call(make_desk(), tool, ARGS[tool], asker=asker))  # a new connection, a restarted server
    assert again["task_ids"] == first["task_ids"] and again["repeat"] is True and again["state"] == "replayed"
    assert "repeat" in again["note"] and "again=true" in again["note"]
    assert len(asker.questions) == 1  # a repeat costs nothing, so nobody is asked
    assert service.request_counts()[PATHS[tool]] == 1


@pytest.mark.parametrize("tool", PAID_SONG_TOOLS)
def test_again_true_pays_for_new_songs_on_purpose(
    make_desk: Callable[..., AgentDesk], service: Sandbox, tool: str
) -> None:
    desk = make_desk()
    first = data(call(desk, tool, ARGS[tool], asker=Asker()))
    asker = Asker()
    second = data(call(desk, tool, {**ARGS[tool], "again": True}, asker=asker))
    assert (
        second["state"] == "sent"
        and second["repeat"] is False
        and set(second["task_ids"]).isdisjoint(first["task_ids"])
    )
    assert len(asker.questions) == 1 and service.request_counts()[PATHS[tool]] == 2
    third = data(call(desk, tool, ARGS[tool], asker=Asker()))  # a plain repeat still gets the first call's songs
    assert third["task_ids"] == first["task_ids"] and service.request_counts()[PATHS[tool]] == 2


def test_the_window_is_ten_minutes_from_the_first_call_and_a_changed_request_is_new(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = make_desk()
    first = data(call(desk, "generate_song", {"style": "a"}, asker=Asker()))
    other = data(call(desk, "generate_song", {"style": "b"}, asker=Asker()))
    assert other["repeat"] is False and service.request_counts()[GENERATE] == 2
    make_desk.clock.now += REISSUE_WINDOW_S  # type: ignore[attr-defined]
    later = data(call(desk, "generate_song", {"style": "a"}, asker=Asker()))
    assert later["state"] == "sent" and set(later["task_ids"]).isdisjoint(first["task_ids"])
    assert service.request_counts()[GENERATE] == 3
    make_desk.clock.now += 60  # type: ignore[attr-defined]
    repeat = data(call(desk, "generate_song", {"style": "a"}, asker=Asker()))
    assert repeat["task_ids"] == later["task_ids"] and service.request_counts()[GENERATE] == 3


def test_a_declined_call_reissued_is_asked_again_and_sent_once(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = make_desk()
    declined = data(call(desk, "generate_song", {"style": "x"}, asker=Asker("decline")))
    assert declined["state"] == "declined" and service.request_counts().get(GENERATE, 0) == 0
    asker = Asker()
    sent = data(call(desk, "generate_song", {"style": "x"}, asker=asker))
    assert sent["state"] == "sent" and len(asker.questions) == 1
    assert data(call(desk, "generate_song", {"style": "x"}, asker=Asker()))["task_ids"] == sent["task_ids"]
    assert service.request_counts()[GENERATE] == 1


def test_every_tool_declares_its_output_and_paid_ones_say_how_to_reissue(
    make_desk: Callable[..., AgentDesk],
) -> None:
    async def listing() -> list[types.Tool]:
        async with Client(build_server(make_desk())) as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listing)}
    for name, tool in tools.items():
        assert tool.output_schema is not None and tool.output_schema.get("type") == "object", name
        assert tool.output_schema.get("properties"), name  # its fields named, not just "an object"
    for name in PAID_SONG_TOOLS:
        tool = tools[name]
        assert {"task_ids", "repeat", "state"} <= set(tool.output_schema["properties"])
        assert "again=true" in (tool.description or "") and "10 minutes" in (tool.description or "")
        assert tool.input_schema["properties"]["again"]["type"] == "boolean"
    assert {"songs", "all_finished"} <= set(tools["get_songs"].output_schema["properties"])
    assert "once per song" in (tools["make_extra"].description or "")


def test_archived_songs_are_offered_as_resource_links_not_inline_audio(
    make_desk: Callable[..., AgentDesk], service: Sandbox, tmp_path: Path
) -> None:
    desk = make_desk()
    ids = data(call(desk, "generate_song", {"style": "harbour"}, asker=Asker()))["task_ids"]
    service.clock.stages(10)  # type: ignore[attr-defined]
    data(call(desk, "wait_for_songs", {"task_ids": ids, "timeout_s": 30}))
    with Library(tmp_path / "journal.sqlite3") as library:
        wait_until(lambda: all(library.archived_path(i) for i in ids), "both songs archived")
        files = {i: Path(library.archived_path(i)) for i in ids}
    result = call(desk, "get_songs", {"task_ids": ids})
    assert not result.is_error and result.structured_content is not None
    assert [s["id"] for s in result.structured_content["songs"]] == ids
    assert not [b for b in result.content if b.type == "audio"]
    links = [b for b in result.content if b.type == "resource_link"]
    assert [str(link.uri) for link in links] == [f"song://{i}/audio" for i in ids]
    assert {link.mime_type for link in links} == {"audio/mpeg"}

    async def read(uri: str) -> Any:
        async with Client(build_server(desk)) as client:
            return (await client.read_resource(uri)).contents[0]

    import base64

    block = anyio.run(read, f"song://{ids[0]}/audio")
    assert base64.b64decode(block.blob) == files[ids[0]].read_bytes()
    inline = call(desk, "get_songs", {"task_ids": ids, "include_audio": True})
    assert len([b for b in inline.content if b.type == "audio"]) == 2  # inline only when asked


def test_a_reissue_while_the_first_call_is_still_in_flight_sends_nothing(
    make_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    """The host gave up on a call the server is still sending, and re-issued it."""
    desk = make_desk()
    plan = desk.plan("v1", {"style": "in flight"})
    desk.store.open_batch(plan.name, [(request_hash(plan.request, False), "{}", False)])
    assert desk.store.claim(plan.name, 0, plan.estimate)  # the first call, between its claim and its answer
    asker = Asker()
    again = data(call(desk, "generate_song", {"style": "in flight"}, asker=asker))
    assert again["state"] == "sending" and again["task_ids"] == [] and again["repeat"] is True
    assert "being sent now" in again["note"] and asker.questions == []
    assert service.request_counts().get(GENERATE, 0) == 0
