"""The leaderboard's cost per win across providers (issue 37, "Compare engines"): an engine's songs show dollars per
won vote (their journalled dollar price), the service's songs credits per win, each in its own column, never
added; a tampered price is no price."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal


def engine_song(journal: Journal, provider: str, usd: str) -> str:
    task_id = f"{provider}-{'0' * 31}{len(usd)}{provider[0]}"[: len(provider) + 33]
    attempt = journal.begin(f"{provider} compose", "https://host.test",
                            {"provider": provider, "style": "x", "estimate_usd": usd})  # fmt: skip
    journal.submitted(attempt, [task_id])
    return task_id


def service_song(journal: Journal, name: str) -> str:
    attempt = journal.begin("generate", "https://host.test", {"action": "auto", "style": "a", "mv": "MFV2.0"})
    journal.submitted(attempt, [name])
    return name


def test_engines_songs_show_dollars_per_win_and_the_service_credits_never_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    try:
        eleven = engine_song(journal, "elevenlabs", "1.50")
        lyria = engine_song(journal, "lyria", "0.04")
        tampered = engine_song(journal, "lyria", "NaN")
        service = service_song(journal, "svc-one")
    finally:
        journal.close()
    with Library(path) as library:
        library.vote(eleven, service)  # elevenlabs wins 2 of 2
        library.vote(eleven, lyria)
        library.vote(lyria, service)  # lyria: 1 win of 3
        library.vote(service, tampered)
        board = library.leaderboard("provider", min_votes=1)
    rows = {row["provider"]: row for row in board.rows}
    assert rows["elevenlabs"]["dollars_per_win"] == pytest.approx(1.50)  # $1.50 a song, every vote won
    assert rows["lyria"]["dollars_per_win"] == pytest.approx(0.12)  # $0.04 (NaN is no price) over a share of 1/3
    assert rows["musicful"]["dollars_per_win"] is None and rows["musicful"]["credits_per_win"] is not None
    assert rows["elevenlabs"]["credits_per_win"] is None
    shown = repr(board) + board._repr_html_()
    assert "$1.50" in shown and "dollars" in shown and "NaN" not in shown
    assert "dollars_per_win" in board.to_pandas().columns
    assert Decimal("0.12")  # the figures are rounded to the cent
