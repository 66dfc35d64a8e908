"""Money across providers in the journal: each attempt records its provider (a numbered migration fills it in for
attempts journalled before), and `library().spend(by="provider")` lists calls, estimates and unknowns per
provider, the service's credits and the engines' dollars in their own columns, never added together."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from ipymusicgen.models.dollar_prices import DollarPriceError
from ipymusicgen.song_library import Library
from ipymusicgen.storage import migrations
from ipymusicgen.storage.journal import Journal


def journal_at(path: Path) -> Journal:
    return Journal(path)


def attempt(journal: Journal, endpoint: str, payload: dict, outcome: str, ids: list[str] | None = None) -> str:
    attempt_id = journal.begin(endpoint, "https://host.test", payload)
    if outcome == "submitted":
        journal.submitted(attempt_id, ids or [])
    elif outcome == "unknown":
        journal.unknown(attempt_id, "dropped")
    elif outcome == "rejected":
        journal.rejected(attempt_id, "401")
    return attempt_id


def engine(provider: str, usd: str, model: str = "music_v1") -> dict:
    return {"provider": provider, "model": model, "style": "x", "estimate_usd": usd}


def provider_of(path: Path, attempt_id: str) -> str | None:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT provider FROM attempts WHERE id = ?", (attempt_id,)).fetchone()[0]
    finally:
        db.close()


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    journal = journal_at(path)
    try:
        attempt(journal, "generate", {"action": "auto", "style": "a", "mv": "MFV2.0"}, "submitted", ["svc-1", "svc-2"])
        attempt(journal, "generate", {"action": "auto", "style": "b", "mv": "MFV3.0"}, "unknown")
        attempt(journal, "elevenlabs compose", engine("elevenlabs", "1.50"), "submitted", ["elevenlabs-" + "a" * 32])
        attempt(journal, "elevenlabs compose", engine("elevenlabs", "0.75"), "unknown")
        attempt(journal, "lyria generate", engine("lyria", "0.04", "lyria-3-clip-preview"), "rejected")  # free
        attempt(journal, "lyria generate", engine("lyria", "0.04", "lyria-3-clip-preview"), "submitted",
                ["lyria-" + "b" * 32])  # fmt: skip
    finally:
        journal.close()
    return path


def by_provider(path: Path) -> dict[str, dict]:
    with Library(path) as library:
        return {r["provider"]: r for r in library.spend(by="provider").rows}


def test_each_attempt_records_its_provider_as_it_is_journalled(mixed: Path) -> None:
    journal = journal_at(mixed)
    try:
        service = journal.begin("generate", "https://host.test", {"style": "s"})
        lyria = journal.begin("lyria generate", "https://host.test", engine("lyria", "0.04"))
        hostile = journal.begin("generate", "https://host.test", {"provider": "\x1b[31mmusicful", "style": "s"})
    finally:
        journal.close()
    assert provider_of(mixed, service) == "musicful"
    assert provider_of(mixed, lyria) == "lyria"
    assert provider_of(mixed, hostile) == "musicful"  # an unknown name never becomes a provider


def test_the_migration_fills_in_the_provider_of_attempts_journalled_before_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    step = migrations.MIGRATIONS.index(migrations.m014_attempt_providers)
    for number in range(step):  # a journal as the release before wrote it
        migrations.MIGRATIONS[number](db)
    db.execute(f"PRAGMA user_version = {step}")
    rows = [
        ("a", "generate", '{"mv": "MFV2.0"}'),
        ("b", "elevenlabs compose", '{"provider": "elevenlabs", "estimate_usd": "0.75"}'),
        ("c", "lyria generate", "{}"),  # no provider in its payload: its endpoint tells
        ("d", "generate", "not json"),
    ]
    for attempt_id, endpoint, payload in rows:
        db.execute(
            "INSERT INTO attempts (id, endpoint, host, payload, created_at, outcome)"
            " VALUES (?, ?, 'h', ?, 1, 'unknown')",
            (attempt_id, endpoint, payload),
        )
    db.close()
    journal_at(path).close()  # opening migrates
    assert [provider_of(path, a) for a in "abcd"] == ["musicful", "elevenlabs", "lyria", "musicful"]


def test_spend_by_provider_keeps_credits_and_dollars_apart(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    monkeypatch.delenv("MUSICGEN_CREDIT_COSTS", raising=False)
    rows = by_provider(mixed)
    assert list(rows) == ["musicful", "elevenlabs", "lyria"]
    service, eleven, lyria = rows["musicful"], rows["elevenlabs"], rows["lyria"]
    assert (service["calls"], service["unknown"], service["songs"]) == (2, 1, 0)  # songs: complete ones
    assert service["credits_estimated"] == 2 + 3 and service["usd_estimated"] is None  # no rate set: no dollars
    assert (eleven["calls"], eleven["unknown"], eleven["songs"]) == (2, 1, 0)
    assert eleven["usd_estimated"] == Decimal("2.25") and eleven["credits_estimated"] is None  # never credits
    assert (lyria["calls"], lyria["unknown"]) == (1, 0)  # the refused call cost nothing
    assert lyria["usd_estimated"] == Decimal("0.04")
    assert eleven["usd_measured"] is None and service["credits_measured"] is None  # nothing measured here


def test_spend_by_provider_converts_credits_only_at_the_users_rate(
    mixed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_COSTS", raising=False)
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    service = by_provider(mixed)["musicful"]
    assert service["credits_estimated"] == 5 and service["usd_estimated"] == Decimal("0.25")
    for bad in ("NaN", "-0.05", "0", "1e30", "inf"):
        monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", bad)
        with pytest.raises(DollarPriceError, match="MUSICGEN_CREDIT_DOLLARS") as refused:
            by_provider(mixed)
        assert "\n" not in str(refused.value)


def test_a_tampered_price_in_the_journal_is_counted_unpriced_not_summed(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    journal = journal_at(path)
    try:
        for usd in ("NaN", "1e30", "-5", "\x1b[2J", "0.80"):
            attempt(journal, "elevenlabs compose", engine("elevenlabs", usd), "submitted", [])
    finally:
        journal.close()
    eleven = by_provider(path)["elevenlabs"]
    assert eleven["calls"] == 5 and eleven["unpriced"] == 4 and eleven["usd_estimated"] == Decimal("0.80")


def test_the_spend_table_shows_units_in_their_own_columns(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    with Library(mixed) as library:
        spend = library.spend(by="provider")
    text = repr(spend)
    assert "credits" in text and "$" in text and "elevenlabs" in text
    total = spend.total
    assert total["calls"] == 5 and total["credits_estimated"] == 5 and total["usd_estimated"] == Decimal("2.29")
    frame = spend.to_pandas()
    assert list(frame["provider"]) == ["musicful", "elevenlabs", "lyria"]
    assert "<script" not in spend._repr_html_()


def test_spend_by_day_no_longer_prices_an_engine_call_in_credits(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_COSTS", raising=False)
    with Library(mixed) as library:
        (day,) = library.spend(by="day").rows
    assert day["credits_estimated"] == 5  # the service's two calls; the engines' are dollars, not 3 credits each


def test_gateway_spend_by_provider_lists_each_provider_in_its_own_unit(tmp_path: Path) -> None:
    from gateway_helpers import cli

    from ipymusicgen.storage.ledger_engines import open_ledger

    database = str(tmp_path / "gateway.sqlite3")
    with open_ledger(database) as ledger:
        ledger.add_user("ann", "hash-of-ann", None)
        done = ledger.reserve("ann", None, "/v1/music/generate", "MFV3.0", 3).call_id
        ledger.finish(done, "done", 200, b"{}")
        ledger.reserve("ann", None, "/v1/music/generate", "MFV2.0", 2)  # pending: unknown as yet
        eleven = ledger.reserve("ann", None, "/v1/music", "music_v1", 1).call_id  # an engine path
        ledger.finish(eleven, "unknown", None, None)
        ledger.reserve("ann", None, "/v1beta/models/lyria-3-clip-preview:generateContent", "lyria", 1)
    code, out = cli("spend", "--by", "provider", "--database", database)
    assert code == 0, out
    lines = [line.split("\t") for line in out.strip().splitlines()]
    assert lines[0] == ["provider", "unit", "calls", "estimated", "measured", "unknown"]
    rows = {line[0]: line[1:] for line in lines[1:]}
    assert rows["musicful"] == ["credits", "2", "5", "-", "1"]
    assert rows["elevenlabs"] == ["unpriced", "1", "-", "-", "1"]  # never added to credits
    assert rows["lyria"] == ["unpriced", "1", "-", "-", "1"]
    assert "/v1/music/generate" not in out and "elevenlabs" in out
