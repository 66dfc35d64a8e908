"""Spend measured on the key, run by run: a re-run never counts what the key spent between runs, a run that
other paid calls overlapped is unknown rather than wrong, and days and models show measured figures where every
call of theirs was measured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until

from ipymusicgen import MusicClient, Settings
from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal

KEY = "spend-key"
GENERATE = "/v1/music/generate"


def rows(count: int) -> list[dict[str, object]]:
    return [{"style": f"row {n}", "mv": "MFV2.0"} for n in range(count)]


@pytest.fixture
def service() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={KEY: 500}) as running:
        yield running


def client_of(service: Sandbox, journal: Path) -> MusicClient:
    settings = Settings.from_env().with_changes(poll_interval=0.05)
    return MusicClient(KEY, base_url=service.base_url, v2_base_url=service.v2_base_url, journal=Journal(journal),
                       archive=False, settings=settings)  # fmt: skip


def spend(journal: Path, by: str) -> dict[str, dict]:
    with Library(journal) as library:
        return {str(r[by]): r for r in library.spend(by=by).rows}


@pytest.mark.slow
def test_a_rerun_is_measured_on_its_own(service: Sandbox, tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    with client_of(service, journal) as client:
        first = run_batch(client, rows(3), name="album", concurrency=1, wait=False)
        wait_until(lambda: service.request_counts().get(GENERATE, 0) >= 1, "the first create")
        first.stop()
        first.wait(60)
        assert [r.state for r in first.rows].count("skipped") == 2
        client.wait(client.generate(action="auto", style="not in the batch").ids)  # 2 credits between the runs
        again = run_batch(client, rows(3), name="album", concurrency=1)
    assert [r.state for r in again.rows] == ["complete"] * 3
    assert first.real_cost_per_call == 2 and again.real_cost_per_call == 2
    album = spend(journal, "batch")["album"]
    assert album["credits_measured"] == 6  # 2 + 4: not the 8 the key lost from the first run's start to the last's end
    (day,) = spend(journal, "day").values()
    assert day["credits_measured"] is None  # a call no run measured


@pytest.mark.slow
def test_a_run_that_other_paid_calls_overlapped_is_unknown(service: Sandbox, tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    service.set_faults([{"kind": "slow", "path": GENERATE, "seconds": 1, "count": 1}])
    with client_of(service, journal) as client, client_of(service, journal) as other:
        batch = run_batch(client, rows(1), name="crowded", wait=False)
        wait_until(lambda: service.request_counts().get(GENERATE, 0) >= 1, "the batch's create went out")
        other.wait(other.generate(action="auto", style="meanwhile").ids)  # the key pays for this inside the window
        batch.wait(60)
    assert spend(journal, "batch")["crowded"]["credits_measured"] is None


def test_days_and_models_show_measured_figures_when_every_call_was_measured(service: Sandbox, tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    with client_of(service, journal) as client:
        run_batch(client, rows(2), name="only-batches")
    (day,) = spend(journal, "day").values()
    assert day["calls"] == 2 and day["credits_measured"] == 4
    assert spend(journal, "model")["MFV2.0"]["credits_measured"] == 4
    assert spend(journal, "batch")["only-batches"]["credits_measured"] == 4
