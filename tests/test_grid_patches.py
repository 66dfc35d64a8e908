"""A 200-row grid view sends its whole board once, then only what changed: bytes per update measured on the widget's
real comm (every message it publishes, serialized as the kernel would), and the patches rebuild the same board."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import comm
import pytest
from helpers import ManualClock, advance_until_done, wait_until

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.lab.grid import MAX_CELLS, Grid
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.grid import GridView


class Wire:
    """What widgets publish on their comms: (comm id, message data, its size in bytes as JSON)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any], int]] = []

    def of(self, comm_id: str) -> list[tuple[dict[str, Any], int]]:
        return [(data, size) for cid, data, size in list(self.messages) if cid == comm_id]


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    recorded = Wire()

    def publish_msg(self: comm.DummyComm, msg_type: str, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if msg_type in ("comm_msg", "comm_open") and isinstance(data, dict):
            size = len(json.dumps(data, separators=(",", ":"), default=str).encode())
            recorded.messages.append((self.comm_id, copy.deepcopy(data), size))

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish_msg)
    return recorded


@pytest.fixture
def roomy(sandbox: Sandbox) -> Iterator[None]:
    """Let the sandbox run 200 calls at once (its default limit answers 429 sooner), with credits for them all
    (the sandbox's reset after the test restores both)."""
    sandbox.state.max_running = 1000
    sandbox.state.account(sandbox.api_key).music_counts = 10_000
    yield


def rebuild(messages: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """What grid.js does with the board's messages: take a whole `data`, apply each next-version patch."""
    board: dict[str, Any] = {}
    for data, _ in messages:
        state = data.get("state", {})
        if "data" in state:
            board = copy.deepcopy(state["data"])
        content = data.get("content", {}) if data.get("method") == "custom" else {}
        if content.get("kind") == "patch":
            assert content["version"] == board["version"] + 1, "patches come in order, none missed"
            board.update(content["set"])
            for r, c, cell in content["cells"]:
                board["rows"][r]["cells"][c] = cell
            board["version"] = content["version"]
    return board


def test_a_200_row_board_sends_what_changed_not_the_whole_board(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, wire: Wire, roomy: None
) -> None:
    axes = {"style": [f"style {n}" for n in range(MAX_CELLS // 2)], "mv": ["MFV2.0", "MFV3.0"]}
    plan = Grid(client, {"action": "auto"}, axes, name=f"g{uuid.uuid4().hex[:8]}")
    view = GridView(plan)
    board_id = view.board.comm.comm_id
    view.run(confirmed=True)
    batch = plan.batch
    advance_until_done(batch, clock, sandbox)
    wait_until(lambda: not view.board.data["running"], "the last round drawn")
    whole = len(json.dumps(view.board.data, separators=(",", ":")).encode())
    assert whole > 500_000  # the finished board: 200 cells of two song cards each

    messages = wire.of(board_id)
    updates = [size for data, size in messages if data.get("method") in ("update", "custom")]
    print(f"\nwhole board {whole} bytes; {len(updates)} updates in the run, {sum(updates)} bytes in all, "
          f"largest {max(updates)}")  # fmt: skip
    assert rebuild(messages) == view.board.data  # the patches make exactly the board Python has

    wire.messages.clear()
    first = batch.rows[0].ids[0]
    view.pick(first)  # one update: one card picked
    (pick,) = wire.of(board_id)
    print(f"one pick: {pick[1]} bytes (the whole board would be {whole})")
    assert pick[0]["method"] == "custom" and pick[1] < 8_000
    wire.messages.clear()
    view._draw()  # nothing changed: nothing sent
    assert wire.of(board_id) == []
    view.close()


def test_a_front_end_that_missed_a_patch_asks_for_the_whole_board(client: MusicClient, wire: Wire) -> None:
    view = GridView(Grid(client, {"action": "auto"}, {"style": ["a", "b"]}, name=f"g{uuid.uuid4().hex[:8]}"))
    board_id = view.board.comm.comm_id
    view.note = "changed"
    view._draw()
    wire.messages.clear()
    view.board._handle_custom_msg({"kind": "resync"}, [])
    ((data, _),) = wire.of(board_id)
    assert data["method"] == "update" and data["state"]["data"] == view.board.data
    assert data["state"]["data"]["note"] == "changed" and data["state"]["data"]["version"] == 2
    view.close()
