"""The world of the gateway-batch tests: a module's upstream sandbox, a gateway in a thread that follows songs fast,
and the rows and clients they send (each module's fixtures are a line over these)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from gateway_helpers import CANARY_KEY, GatewayThread

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

GENERATE = "/v1/music/generate"
BATCHES = "/gateway/v1/batches"


@contextmanager
def upstream_sandbox() -> Iterator[Sandbox]:
    """The module's upstream: fast stages, 4-second songs, a key with credits for every batch."""
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 100_000}) as server:
        yield server


@contextmanager
def fast_gateway(database: str, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayThread]:
    """A gateway in a thread over `upstream` that follows its batches' songs every 0.1 s."""
    monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
    monkeypatch.setenv("MUSICGEN_POLL_INTERVAL", "0.05")
    monkeypatch.setenv("MUSICGEN_GATEWAY_FOLLOW_S", "0.1")
    upstream.reset()
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as running:
        yield running


def rows_of(n: int, word: str = "row") -> list[dict[str, str]]:
    return [{"style": f"{word} {i}", "mv": "MFV2.0"} for i in range(n)]  # 2 credits each


def through(gateway: GatewayThread, token: str, journal: Path) -> MusicClient:
    """A notebook's client pointed at the gateway, journalling to `journal`."""
    return MusicClient(token, base_url=gateway.url, v2_base_url=gateway.url, journal=Journal(journal), timeout=20)
