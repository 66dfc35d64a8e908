"""The listening lab's records in the library: stars, pairwise votes, and a leaderboard from them (Bradley-Terry)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal


@pytest.fixture
def made(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Path, dict[str, list[str]]]]:
    """Six songs in a journal: two calls of two models (two takes each), each call with its own style."""
    path = tmp_path / "journal.sqlite3"
    ids: dict[str, list[str]] = {}
    with sandbox.client(journal=Journal(path), archive=False) as client:
        for model, style in (("MFV2.0", "lo-fi"), ("MFV3.0", "jazz"), ("MFV2.0", "folk")):
            found = list(client.generate(action="auto", style=style, mv=model).ids)
            ids.setdefault(model, []).extend(found)
            ids[style] = found
        client.wait([i for model in ("MFV2.0", "MFV3.0") for i in ids[model]])
    yield path, ids


def test_stars_are_kept_checked_and_sort_the_songs(made: tuple[Path, dict[str, list[str]]]) -> None:
    path, ids = made
    best, good = ids["jazz"][0], ids["lo-fi"][1]
    with Library(path) as library:
        library.rate(best, 5)
        library.rate(good, 3)
        for bad in (0, 6, 2.5, True, "5"):
            with pytest.raises(ValueError, match="1 to 5"):
                library.rate(good, bad)  # type: ignore[arg-type]
        with pytest.raises(KeyError):
            library.rate("no-such-song", 4)
    with Library(path) as library:  # a new process sees them
        ordered = library.songs(order="rating")
        assert [s.id for s in ordered[:2]] == [best, good] and ordered[0].stars == 5
        assert all(s.stars is None for s in ordered[2:])
        assert library.songs(text="jazz", order="rating")[0].id == best
        library.rate(best, None)
        assert library.song(best).stars is None
        with pytest.raises(ValueError, match="order"):
            library.songs(order="loudest")


def test_votes_are_kept_in_order_with_their_blind_flag(made: tuple[Path, dict[str, list[str]]]) -> None:
    path, ids = made
    a, b = ids["jazz"]
    with Library(path) as library:
        library.vote(a, b)
        library.vote(b, a, blind=False)
        with pytest.raises(ValueError, match="two different"):
            library.vote(a, a)
        with pytest.raises(KeyError):
            library.vote(a, "nope")
        results = library.compare_results()
        assert [(r["winner"], r["loser"], r["blind"]) for r in results] == [(a, b, True), (b, a, False)]
        assert results[0]["winner_title"] and "2 vote(s)" in repr(results)
        assert [r["winner"] for r in library.compare_results(blind=True)] == [a]
        assert list(results.to_pandas().columns[:3]) == ["winner", "loser", "blind"]


def test_the_leaderboard_ranks_groups_from_votes_with_their_uncertainty(
    made: tuple[Path, dict[str, list[str]]],
) -> None:
    path, ids = made
    new, old = ids["MFV3.0"], ids["MFV2.0"]
    with Library(path) as library:
        assert library.leaderboard("model").rows == []
        library.vote(new[0], old[0])
        first = library.leaderboard("model")
        library.vote(new[1], old[1])
        library.vote(new[0], old[2])
        library.vote(old[3], new[1])
        library.vote(old[0], old[1])  # same model on both sides: says nothing about models
        board = library.leaderboard("model")
        assert [row["model"] for row in board.rows] == ["MFV3.0", "MFV2.0"]
        top, bottom = board.rows
        assert (top["wins"], top["losses"], top["votes"]) == (3, 1, 4) and (bottom["wins"], bottom["losses"]) == (1, 3)
        assert top["sigma"] < first.rows[0]["sigma"]  # more votes, less uncertain
        assert top["low"] < top["rating"] < top["high"] and top["rating"] > bottom["rating"]
        by_song = library.leaderboard("song")
        assert by_song.rows[0]["song"] == new[0] and by_song.rows[0]["wins"] == 2
        assert {row["style"] for row in library.leaderboard("style").rows} == {"jazz", "lo-fi", "folk"}
        assert "MFV3.0" in repr(board) and "<table" in board._repr_html_()
        with pytest.raises(ValueError, match="by must be one of"):
            library.leaderboard("colour")


def test_ratings_live_in_the_journal_file_with_a_schema_step_of_their_own(
    made: tuple[Path, dict[str, list[str]]],
) -> None:
    path, ids = made
    with Library(path) as library:
        library.rate(ids["folk"][0], 4)
    db = sqlite3.connect(path)
    assert db.execute("SELECT stars FROM ratings").fetchall() == [(4,)]
    with pytest.raises(sqlite3.IntegrityError):  # the file itself refuses a sixth star
        db.execute("INSERT INTO ratings (id, stars, rated_at) VALUES ('x', 6, 0)")
    db.close()
