"""Holes found by attacking the gateway's engine paths (issue 37): a price read from a body field the engine reads
otherwise, and what must hold on the paths and keys around them. Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage import ledger_dollars
from ipymusicgen.storage.ledger_engines import open_ledger


def dollar_user(database: str, name: str, dollars: str) -> str:
    token = add_user(database, name)
    assert cli("user", "budget-usd", name, dollars, "--database", database)[0] == 0
    return token


def rows(database: str) -> list[dict[str, Any]]:
    ledger = open_ledger(database)
    try:
        return ledger_dollars.calls(ledger)
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


@pytest.fixture
def engines_gateway(database: str, upstream: Sandbox, clean_env: None) -> Iterator[GatewayThread]:
    upstream.reset()
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY), "lyria": (upstream.engines_base_url, CANARY_KEY)}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        yield running


def plan(*seconds: int) -> dict[str, Any]:
    return {
        "positive_global_styles": ["slow drone"],
        "negative_global_styles": [],
        "sections": [
            {"section_name": f"part {i}", "positive_local_styles": [], "negative_local_styles": [],
             "duration_ms": s * 1000, "lines": []}
            for i, s in enumerate(seconds)
        ],
    }  # fmt: skip


@pytest.mark.parametrize("length", [3_000, 0, 10_000])
def test_a_plans_sections_price_the_song_whatever_music_length_ms_says(
    engines_gateway: GatewayThread, database: str, upstream: Sandbox, length: int
) -> None:
    """ElevenLabs makes a planned song as long as its sections (music_length_ms goes with a prompt): a body naming a
    3 s length beside a ten-minute plan must be priced at ten minutes, not at 3 s."""
    token = dollar_user(database, "uma", "1")  # far below ten minutes ($7.50)
    body = {"composition_plan": plan(120, 120, 120, 120, 120), "music_length_ms": length}
    answer = httpx.post(engines_gateway.url + "/v1/music", json=body, headers={"xi-api-key": token}, timeout=120)
    assert answer.status_code == 402, (answer.status_code, answer.text[:200])
    assert upstream.request_counts().get("/v1/music") is None and rows(database) == []
