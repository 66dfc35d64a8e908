"""wait(), watchers and batches never poll a real service faster than the floor (0.5 s by default), however
small an interval they are given; the embedded sandbox, local and free, has no floor."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from hostile_server import HostileServer, RawRequest, respond

from ipymusicgen import MusicClient, Settings
from ipymusicgen.errors import WaitTimeoutError

RUNNING = [{"id": "t1", "status": 1, "title": "x"}]


@pytest.mark.slow
def test_a_tiny_interval_is_raised_to_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_MIN_POLL_INTERVAL")
    polls: list[float] = []

    def handler(request: RawRequest, sock: Any) -> None:
        polls.append(time.monotonic())
        respond(sock, 200, RUNNING)

    server = HostileServer(handler)
    try:
        with MusicClient("a-real-key", base_url=server.url, v2_base_url=server.url, journal=False,
                         archive=False) as client:  # fmt: skip
            assert client.settings.min_poll_interval == 0.5
            with pytest.raises(WaitTimeoutError):
                client.wait(["t1"], interval=1e-9, timeout=1.6)
    finally:
        server.stop.set()
    assert 2 <= len(polls) <= 5  # at 1e-9 s there would be thousands
    gaps = [later - earlier for earlier, later in itertools.pairwise(polls)]
    assert all(gap >= 0.45 for gap in gaps[:-1]), gaps  # (the last may be shorter: the wait's deadline came)


def test_the_floor_rule_in_one_place() -> None:
    real = Settings(api_key="k", min_poll_interval=0.5)
    assert real.poll_interval_for(1e-9) == 0.5 and real.poll_interval_for(2.0) == 2.0
    assert real.poll_interval_for() == real.poll_interval
    sandbox = Settings(api_key="k", embedded_sandbox=True)
    assert sandbox.poll_interval_for(0.05) == 0.05


def test_a_bad_floor_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipymusicgen.errors import RequestValidationError

    with pytest.raises(RequestValidationError, match="min_poll_interval"):
        MusicClient("k", settings=Settings(min_poll_interval=float("nan")), journal=False, archive=False)
    monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "-1")
    with pytest.raises(ValueError, match="MUSICGEN_MIN_POLL_INTERVAL"):
        Settings.from_env()
