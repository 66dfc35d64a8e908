"""A confirm sends exactly what it showed: the studio's Batch tab freezes the rows it priced, and a pane the
request it priced; if the source changed in between, nothing is sent and it asks again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from helpers import wait_until

from ipymusicgen import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.batch_pane import BatchPane
from ipymusicgen.widgets.studio import Studio

KEY = "confirm-key"
PAID_SANDBOX = {"keys": {KEY: 500}, "stage_seconds": 0.05, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): its key may cost money, so every paid step asks first."""
GENERATE = "/v1/music/generate"


@pytest.fixture
def client(paid_sandbox: Sandbox) -> Iterator[MusicClient]:
    paid_sandbox.reset()
    with paid_sandbox.client(journal=False, archive=False) as made:
        yield made


def frame(count: int) -> pd.DataFrame:
    return pd.DataFrame({"style": [f"row {n}" for n in range(count)], "mv": ["MFV2.0"] * count})


@pytest.fixture
def form_on(client: MusicClient) -> Iterator[Callable[[dict[str, Any]], BatchPane]]:
    """The Batch tab of a studio on `client`, its rows from the variable `songs` of `namespace`."""
    made: list[Studio] = []

    def open_on(namespace: dict[str, Any]) -> BatchPane:
        made.append(studio := Studio(client))
        pane = studio.batch
        pane._shell = SimpleNamespace(user_ns=namespace)
        pane.focus("source")  # what opening the choice does: the variables are listed
        pane.set_values(source="songs")
        return pane

    yield open_on
    for studio in made:
        studio.close()


def press(pane: BatchPane, kind: str) -> None:
    """What the browser sends for Start ("submit"), "Confirm and send" ("confirm") or Cancel ("cancel")."""
    pane.studio.select("batch")  # a pane's buttons are pressed on its tab
    pane.studio._on_msg(pane.studio.view, {"kind": kind, "form": "batch"}, [])


@pytest.mark.slow
def test_the_batch_tab_sends_the_rows_it_priced_not_what_the_variable_became(
    form_on: Callable[[dict[str, Any]], BatchPane], paid_sandbox: Sandbox
) -> None:
    namespace: dict[str, Any] = {"songs": frame(1)}
    form = form_on(namespace)
    press(form, "submit")
    assert "Send 1 row?" in form.confirm and paid_sandbox.request_counts().get(GENERATE, 0) == 0
    namespace["songs"] = frame(20)  # a cell changes the variable after it was priced
    press(form, "confirm")
    assert paid_sandbox.request_counts().get(GENERATE, 0) == 0  # nothing sent: the rows are not the ones shown
    assert "changed since it was priced" in form.confirm and "Send 20 rows?" in form.confirm
    press(form, "confirm")  # confirming what is shown now
    wait_until(lambda: form.batch is not None and form.batch.done, "the batch of 20 ends")
    assert paid_sandbox.request_counts()[GENERATE] == 20


def test_a_confirmed_batch_sends_exactly_the_snapshot(
    form_on: Callable[[dict[str, Any]], BatchPane], paid_sandbox: Sandbox
) -> None:
    form = form_on({"songs": frame(2)})
    press(form, "submit")
    assert "Send 2 rows?" in form.confirm and "about 4 credits" in form.confirm
    press(form, "confirm")
    wait_until(lambda: form.batch is not None and form.batch.done, "the batch of 2 ends")
    assert paid_sandbox.request_counts()[GENERATE] == 2
    assert [r.request.to_payload()["style"] for r in form.batch.rows] == ["row 0", "row 1"]


def test_cancel_forgets_the_snapshot(form_on: Callable[[dict[str, Any]], BatchPane], paid_sandbox: Sandbox) -> None:
    form = form_on({"songs": frame(1)})
    press(form, "submit")
    press(form, "cancel")
    assert not form.confirm and form.priced is None
    press(form, "confirm")  # a confirm nobody was shown sends nothing
    press(form, "submit")  # asks again: a cancelled confirm is not a consent
    assert form.confirm and paid_sandbox.request_counts().get(GENERATE, 0) == 0


def test_a_pane_sends_the_request_it_priced_or_asks_again(client: MusicClient, paid_sandbox: Sandbox) -> None:
    studio = Studio(client)
    try:
        pane = studio.song
        pane.set_values(action="auto", style="lo-fi rain")
        studio._on_msg(studio.view, {"kind": "submit", "form": "song"}, [])
        assert pane.confirm and paid_sandbox.request_counts().get(GENERATE, 0) == 0
        pane.set_values(style="death metal")  # changed after it was priced: the confirm is gone
        studio._on_msg(studio.view, {"kind": "confirm", "form": "song"}, [])
        assert paid_sandbox.request_counts().get(GENERATE, 0) == 0
        studio._on_msg(studio.view, {"kind": "submit", "form": "song"}, [])
        studio._on_msg(studio.view, {"kind": "confirm", "form": "song"}, [])
        assert paid_sandbox.request_counts()[GENERATE] == 1
    finally:
        studio.close()
