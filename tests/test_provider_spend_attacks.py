"""Attacks on spend per provider (issue 37, "Money across providers"): a call that may have been charged is listed
as unknown however the journal holds it (in flight, or left pending by a process that died), and a provider name
the project never wrote (a tampered journal, escape codes) is never counted in the service's credits nor shown."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal


def engine(provider: str, usd: str, model: str = "music_v1") -> dict:
    return {"provider": provider, "model": model, "style": "x", "estimate_usd": usd}


def by_provider(path: Path) -> dict[str, dict]:
    with Library(path) as library:
        return {r["provider"]: r for r in library.spend(by="provider").rows}


def test_an_engine_call_left_pending_is_listed_as_unknown_not_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    try:
        journal.begin("elevenlabs compose", "https://host.test", engine("elevenlabs", "2.25"))  # in flight
        dead = journal.begin("lyria generate", "https://host.test", engine("lyria", "0.08", "lyria-3-pro-preview"))
        served = journal.begin("generate", "https://host.test", {"action": "auto", "style": "a", "mv": "MFV2.0"})
    finally:
        journal.close()
    db = sqlite3.connect(path)
    with db:  # the senders of these two were killed: another host's process, never alive here
        db.execute("UPDATE attempts SET owner_host = 'gone.example', owner_pid = 1 WHERE id IN (?, ?)", (dead, served))
    db.close()
    rows = by_provider(path)
    assert set(rows) == {"elevenlabs", "lyria", "musicful"}
    assert rows["elevenlabs"]["calls"] == 1 and rows["elevenlabs"]["unknown"] == 1
    assert rows["elevenlabs"]["usd_estimated"] == Decimal("2.25")  # may have been charged: its price, not 0
    assert rows["lyria"]["unknown"] == 1 and rows["lyria"]["usd_estimated"] == Decimal("0.08")
    assert rows["musicful"]["unknown"] == 1 and rows["musicful"]["credits_estimated"] > 0
    assert rows["elevenlabs"]["credits_estimated"] is None  # never credits


@pytest.mark.parametrize("name", ["\x1b[31mevil", "ELEVENLABS", "lyria\n", "", "musicful\x00"])
def test_a_provider_the_project_never_wrote_is_not_counted_as_the_services_credits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    try:
        tampered = journal.begin("elevenlabs compose", "https://host.test", engine("elevenlabs", "7.50"))
        journal.submitted(tampered, [])
    finally:
        journal.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE attempts SET provider = ? WHERE id = ?", (name, tampered))
    db.close()
    with Library(path) as library:
        spend = library.spend(by="provider")
    rows = {r["provider"]: r for r in spend.rows}
    assert "musicful" not in rows  # an ElevenLabs call is not 3 credits of the service's
    [other] = rows.values()
    assert other["calls"] == 1 and other["unpriced"] == 1 and other["credits_estimated"] is None
    assert other["provider"] == "other" and other["usd_estimated"] is None  # unpriced, not $0
    shown = repr(spend) + spend._repr_html_() + repr(spend.rows)
    assert "\x1b" not in shown and "\x00" not in shown and "evil" not in shown
    assert spend.total["credits_estimated"] is None
