"""The batch progress view sends its rows whole once, then only what changed (a versioned patch): bytes per update
measured on the widget's real comm, and the patches rebuild exactly the view's data."""

from __future__ import annotations

import copy
import json
from typing import Any

import comm
import pytest
from helpers import ManualClock, advance_until_done

from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.widgets.batch import BatchView


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any], int]]:
    recorded: list[tuple[str, dict[str, Any], int]] = []

    def publish_msg(self: comm.DummyComm, msg_type: str, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if msg_type == "comm_msg" and isinstance(data, dict):
            size = len(json.dumps(data, separators=(",", ":"), default=str).encode())
            recorded.append((self.comm_id, copy.deepcopy(data), size))

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish_msg)
    return recorded


def test_a_200_row_batch_view_sends_what_changed(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, wire: list[tuple[str, dict[str, Any], int]]
) -> None:
    sandbox.state.max_running = 1000
    sandbox.state.account(sandbox.api_key).music_counts = 10_000  # the sandbox's reset restores both
    view = BatchView()
    rows = [{"style": f"lo-fi hip hop with rain on the window, take {n:03d}", "mv": "MFV2.0"} for n in range(200)]
    batch = run_batch(client, rows, concurrency=50, wait=False, store=BatchStore(None), on_update=view.update)
    advance_until_done(batch, clock, sandbox)
    view.update(batch)
    mine = [(data, size) for cid, data, size in wire if cid == view.comm.comm_id]
    whole = len(json.dumps(view.data, separators=(",", ":")).encode())
    sizes = [size for _, size in mine]
    print(f"\nbatch view: whole {whole} bytes; {len(sizes)} updates, {sum(sizes)} bytes in all, largest {max(sizes)}")
    board: dict[str, Any] = {}
    for data, _ in mine:
        if "data" in data.get("state", {}):
            board = copy.deepcopy(data["state"]["data"])
        content = data.get("content", {}) if data.get("method") == "custom" else {}
        if content.get("kind") == "patch":
            assert content["version"] == board["version"] + 1
            board.update(content["set"])
            for index, row in content["rows"]:
                board["rows"][index] = row
            board["version"] = content["version"]
    assert board == view.data
    whole_updates = [size for data, size in mine if "data" in data.get("state", {})]
    assert len(whole_updates) == 1  # the rows whole once; after that, patches
    wire.clear()
    view._note("a note")  # one field changed: a small patch
    ((data, size),) = [(d, s) for cid, d, s in wire if cid == view.comm.comm_id]
    assert data["method"] == "custom" and size < 1_000 < whole
