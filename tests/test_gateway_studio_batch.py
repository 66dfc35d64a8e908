"""The studio's Batch pane through a team gateway (issue 39): the browser's intents (input, submit, confirm) sent to
the studio's widget in Python hand the batch to the gateway whole, the pane's view follows it to the end, and a
studio closed right after Start (the notebook gone) stops nothing: the gateway makes every row once. Through real
parts: the uvicorn sandbox as the upstream, a gateway served by uvicorn, the journal's file, SQLite and a real
PostgreSQL ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_batch_world import BATCHES, GENERATE, fast_gateway, upstream_sandbox
from gateway_helpers import GatewayThread, add_user, paid_counts
from helpers import wait_until
from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.studio import Studio, studio

LINES = '--style "studio a"\n--style "studio b"\n--style "studio c"'
pytestmark = pytest.mark.slow  # a gateway, its worker and songs in real time


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with upstream_sandbox() as server:
        yield server


@pytest.fixture
def gateway(
    database: str, upstream: Sandbox, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GatewayThread]:
    with fast_gateway(database, upstream, monkeypatch) as running:
        yield running


def intent(made: Studio, **content: Any) -> None:
    """What the browser sends: a custom message to the studio's view."""
    made.view._handle_custom_msg(content, [])


def gateway_rows(gateway: GatewayThread, token: str, name: str) -> list[str]:
    answer = httpx.get(gateway.url + BATCHES, params={"name": name}, headers={"x-api-key": token}, timeout=20)
    return [r["state"] for r in answer.json()["data"]["rows"]] if answer.status_code == 200 else []


def started(gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path, user: str) -> tuple[Any, ...]:
    """A user's studio over the gateway, its batch typed, asked and confirmed: (studio, client, token)."""
    token = add_user(database, user, budget=40)
    client = MusicClient(token, base_url=gateway.url, v2_base_url=gateway.url, journal=Journal(tmp_path / "j"))
    made = studio(client, confirm=True)
    intent(made, kind="tab", tab="batch")  # the browser sends only what the shown tab offers
    intent(made, kind="input", form="batch", name="lines", value=LINES)
    intent(made, kind="input", form="batch", name="name", value="from the studio")
    intent(made, kind="submit", form="batch")
    shown = made.view.panes["batch"]
    assert shown["confirm"].startswith("Send 3 rows"), (shown["status"], shown["error"], shown.get("problems"))
    assert paid_counts(upstream).get(GENERATE, 0) == 0, "nothing sent before the confirm"
    intent(made, kind="confirm", form="batch")
    return made, client, token


def test_the_studios_batch_pane_hands_its_batch_to_the_gateway_and_follows_it(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    made, client, token = started(gateway, database, upstream, tmp_path, "sia")
    try:
        batch = made.batch.batch
        assert batch is not None and made.batch.state()["has_batch"]
        wait_until(lambda: batch.done, "the studio's batch to end")
        assert [r.state for r in batch.rows] == ["complete"] * 3, batch.progress_line()
        assert gateway_rows(gateway, token, "from the studio") == ["complete"] * 3, "run at the gateway, by name"
        shown = lambda: made.batch.view.data.get("counts", {}).get("complete")  # noqa: E731
        wait_until(lambda: shown() == 3, "the pane's view to show the three rows complete")
        assert made.batch.view.data["line"].startswith("batch from the studio: 3/3 done"), made.batch.view.data["line"]
    finally:
        made.close()
        client.close()
    assert paid_counts(upstream)[GENERATE] == 3, "each row once"


def test_a_studio_closed_right_after_start_stops_nothing_at_the_gateway(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    made, client, token = started(gateway, database, upstream, tmp_path, "tad")
    made.close()  # the notebook goes away: its view and polling end
    client.close()
    wait_until(lambda: gateway_rows(gateway, token, "from the studio") == ["complete"] * 3, "the gateway finishes")
    assert paid_counts(upstream)[GENERATE] == 3
