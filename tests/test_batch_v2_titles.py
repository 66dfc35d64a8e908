"""A batch's v2 rows keep the title and lyrics of their submit answer: the v2 query answers them blank."""

from __future__ import annotations

import asyncio

import pytest

from ipymusicgen import MusicClient
from ipymusicgen.batch.drivers import Batch, run_batch, run_batch_async
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.batches import BatchStore

LYRICS = "[Verse]\nneon on the wet road\n[Chorus]\ndrive until the morning"
V2_ROW = {"v2": True, "model_version": "v4.5", "prompt": "synthwave night drive", "is_auto": 0,
          "title": "Night Drive", "lyrics": LYRICS}  # fmt: skip


def _check(batch: Batch, sandbox: Sandbox) -> None:
    row = batch.rows[0]
    assert row.state == "complete", row.error
    assert sandbox.request_counts().get("/v2/query", 0) >= len(row.ids)  # the blanks were really read
    assert len(row.records) == len(row.ids) >= 1
    for record in row.records:
        assert record.state.value == "complete" and record.audio
        assert record.title == "Night Drive"
        assert record.lyrics == LYRICS


def test_a_v2_rows_title_and_lyrics_survive_to_the_finished_record(client: MusicClient, sandbox: Sandbox) -> None:
    batch = run_batch(client, [V2_ROW, {"style": "lo-fi", "mv": "MFV2.0"}], store=BatchStore(None))
    _check(batch, sandbox)
    assert batch.rows[1].state == "complete"


@pytest.mark.slow
def test_the_async_face_keeps_them_too(sandbox: Sandbox) -> None:
    async def scenario() -> Batch:
        async with sandbox.async_client() as client:
            return await run_batch_async(client, [V2_ROW], store=BatchStore(None))

    _check(asyncio.run(scenario()), sandbox)
