"""A batch's summary says what its engines' rows cost, in dollars, apart from the service's credits (issue 37:
units never added). Before, a batch of ElevenLabs and Lyria rows said only "~0 credits spent (estimate)"."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ipymusicgen import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox

KEY = "batch-dollars-key-0123"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}


@pytest.fixture
def engine_client(service: Sandbox, tmp_path: Path) -> Iterator[MusicClient]:
    from ipymusicgen.workspace.workspace import build_client

    settings = Settings.from_env().with_changes(
        api_key=service.api_key,
        base_url=service.base_url,
        v2_base_url=service.v2_base_url,
        **service.engine_settings(KEY),
        journal_path=tmp_path / "journal.sqlite3",
        poll_interval=0.05,
    )
    client = build_client(settings, archive=False)
    yield client
    client.engine_calls.join(30)
    client.close()


@pytest.mark.slow
def test_a_batch_of_engine_rows_says_their_dollars_apart_from_credits(
    engine_client: MusicClient, service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    service.set_faults("rate_limit:count=1:path=/v1/music")  # ElevenLabs' 429 before work: not charged
    rows: list[dict[str, Any]] = [
        {"provider": "lyria", "style": "folk"},  # $0.04
        {"provider": "lyria", "model": "lyria-3-pro-preview", "style": "rain"},  # $0.08
        {"provider": "elevenlabs", "style": "refused", "seconds": 61},  # $1.50 asked, refused: not charged
    ]
    batch = engine_client.batch(rows, name="engine-dollars", budget="$5", concurrency=1, wait=True)
    assert [r.state for r in batch.rows][:2] == ["complete", "complete"] and batch.rows[2].state != "complete"
    summary = batch.summary()
    assert summary["spent_usd_estimate"] == Decimal("0.12")  # the refused row cost nothing
    assert summary["spent_estimate"] == 0  # credits: none (never dollars added in)
    line = batch.progress_line()
    assert "$0.12" in line and "dollars" in line and "credits" in line
