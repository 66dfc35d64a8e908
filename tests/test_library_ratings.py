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
        first = library.leaderboard("model", min_votes=1)
        library.vote(new[1], old[1])
        library.vote(new[0], old[2])
        library.vote(old[3], new[1])
        library.vote(old[0], old[1])  # same model on both sides: says nothing about models
        board = library.leaderboard("model", min_votes=1)
        assert [row["model"] for row in board.rows] == ["MFV3.0", "MFV2.0"]
        top, bottom = board.rows
        assert (top["wins"], top["losses"], top["votes"]) == (3, 1, 4) and (bottom["wins"], bottom["losses"]) == (1, 3)
        assert top["sigma"] < first.rows[0]["sigma"]  # more votes, less uncertain
        assert top["low"] < top["rating"] < top["high"] and top["rating"] > bottom["rating"]
        by_song = library.leaderboard("song", min_votes=1)
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


# -- issue 41: four outcomes kept in the journal, old votes kept, ranks by provider and model with cost per win --


def test_a_vote_takes_four_outcomes_and_the_journal_keeps_each(made: tuple[Path, dict[str, list[str]]]) -> None:
    path, ids = made
    a, b = ids["jazz"]
    with Library(path) as library:
        library.vote(a, b, "a")
        library.vote(a, b, "b")
        library.vote(a, b, outcome="tie")
        library.vote(b, a, outcome="both_bad", blind=False)
        library.vote(b, a)  # today's call: the first one won
        library.vote(winner=a, loser=b)  # and today's call by name
        for bad in ("A", "draw", "", None, 1, "tie "):
            with pytest.raises(ValueError, match="outcome must be one of"):
                library.vote(a, b, bad)  # type: ignore[arg-type]
        for mixed in ({"winner": a}, {"loser": b}, {"winner": a, "loser": b, "outcome": "tie"}):
            with pytest.raises(TypeError, match="names both songs"):
                library.vote(**mixed)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="needs two songs"):
            library.vote(a)
    with Library(path) as library:  # another process reads them back
        results = library.compare_results()
        assert [(r["winner"], r["loser"], r["outcome"], r["blind"]) for r in results] == [
            (a, b, "win", True), (b, a, "win", True), (a, b, "tie", True), (b, a, "both_bad", False),
            (b, a, "win", True), (a, b, "win", True),
        ]  # fmt: skip
        text = repr(results)
        assert "tied with" in text and "both bad" in text
        assert "outcome" in results.to_pandas().columns
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError):  # the file itself refuses an outcome it does not know
        db.execute("INSERT INTO comparisons (winner, loser, voted_at, outcome) VALUES ('x', 'y', 0, 'draw')")
    db.close()


def test_votes_in_a_journal_of_the_last_version_survive_as_wins(made: tuple[Path, dict[str, list[str]]]) -> None:
    """A journal written before outcomes (schema 12: comparisons without the column) opens with its votes."""
    path, ids = made
    new, old = ids["MFV3.0"], ids["MFV2.0"]
    with Library(path):
        pass  # the file is at the latest version now: take it back to the last one's shape
    db = sqlite3.connect(path)
    db.execute("DROP TABLE comparisons")
    db.execute(
        "CREATE TABLE comparisons (id INTEGER PRIMARY KEY AUTOINCREMENT, winner TEXT NOT NULL, loser TEXT NOT NULL,"
        " blind INTEGER NOT NULL DEFAULT 1, voted_at REAL NOT NULL, CHECK (winner != loser))"
    )
    rows = [(new[0], old[0], 1, 1.0), (old[1], new[1], 0, 2.0), (new[1], old[2], 1, 3.0)]
    db.executemany("INSERT INTO comparisons (winner, loser, blind, voted_at) VALUES (?, ?, ?, ?)", rows)
    db.execute("PRAGMA user_version = 12")
    db.commit()
    db.close()
    with Library(path) as library:
        results = library.compare_results()
        assert [(r["winner"], r["loser"], r["blind"], r["outcome"]) for r in results] == [
            (w, loser, bool(blind), "win") for w, loser, blind, _ in rows
        ]
        board = library.leaderboard("model", min_votes=1)
        assert {r["model"]: (r["wins"], r["losses"]) for r in board.rows} == {"MFV3.0": (2, 1), "MFV2.0": (1, 2)}
        library.vote(old[0], new[0], "tie")  # and takes new ones beside them
        assert [r["outcome"] for r in library.compare_results()] == ["win", "win", "win", "tie"]


def test_the_leaderboard_ranks_by_provider_and_model_with_cost_per_win_and_hides_thin_ranks(
    made: tuple[Path, dict[str, list[str]]],
) -> None:
    path, ids = made
    new, old = ids["MFV3.0"], ids["MFV2.0"]
    with Library(path) as library:
        for i in range(6):
            library.vote(new[i % 2], old[i % 4])
        library.vote(old[0], new[0])
        library.vote(new[1], old[1], "tie")
        library.vote(old[2], old[3], "both_bad")
        board = library.leaderboard("model")  # the default minimum: 10 votes
        rows = {row["model"]: row for row in board.rows}
        assert {row["provider"] for row in board.rows} == {"musicful"}
        assert list(board.to_pandas().columns[:2]) == ["provider", "model"]
        assert rows["MFV2.0"]["votes"] == 10 and rows["MFV2.0"]["rank"] == 1 and rows["MFV2.0"]["both_bad"] == 2
        assert rows["MFV3.0"]["votes"] == 8 and rows["MFV3.0"]["rank"] is None and rows["MFV3.0"]["needs"] == 2
        assert "needs 2 more votes" in repr(board)
        # MFV3.0: 3 credits a call of two songs -> 1.5 a song; 6 wins, 1 loss, 1 tie of 8 -> share 6.5/8
        assert rows["MFV3.0"]["credits_per_win"] == pytest.approx(round(1.5 / (6.5 / 8), 2))
        # MFV2.0: 2 credits a call of two -> 1.0 a song; 1 win, 6 losses, 1 tie, 2 both bad -> share 1.5/10
        assert rows["MFV2.0"]["credits_per_win"] == pytest.approx(round(1.0 / (1.5 / 10), 2))
        providers = library.leaderboard("provider", min_votes=1)
        assert [(row["provider"], row["votes"]) for row in providers.rows] == [("musicful", 2)]  # both bad only
        for bad in (-1, 2.5, True, "10"):
            with pytest.raises(ValueError, match="min_votes"):
                library.leaderboard("model", min_votes=bad)  # type: ignore[arg-type]


def test_an_exported_songs_votes_say_their_outcome(made: tuple[Path, dict[str, list[str]]]) -> None:
    """The export's sidecar (archive/export.py) counts a tie or a both-bad vote as what it is, not as a win of the
    song shown first."""
    from ipymusicgen.archive.export import _Context, ratings_of

    path, ids = made
    a, b = ids["jazz"]
    with Library(path) as library:
        library.vote(a, b)
        library.vote(a, b, "b")
        library.vote(a, b, "tie")
        library.vote(a, b, "both_bad")
        found = ratings_of(_Context(library), library.song(a))
    assert (found["votes_won"], found["votes_lost"], found["votes_tied"], found["votes_both_bad"]) == (1, 1, 1, 1)
    assert [(v["outcome"], v["won"], v["against"]) for v in found["votes"]] == [
        ("won", True, b), ("lost", False, b), ("tie", False, b), ("both_bad", False, b),
    ]  # fmt: skip


def test_engine_songs_rank_under_their_own_provider_and_are_not_priced_in_credits(
    made: tuple[Path, dict[str, list[str]]],
) -> None:
    """An engine's song (its task id of the project's making starts with its provider) is its provider's row; its
    price is in dollars, so its credits per win stay empty rather than mixing units."""
    path, ids = made
    engine = {"elevenlabs": "elevenlabs-" + "a" * 32, "lyria": "lyria-" + "b" * 32}
    db = sqlite3.connect(path)
    for task_id in engine.values():
        db.execute(
            "INSERT INTO tasks (id, host, state, created_at, updated_at) VALUES (?, 'engine', 'complete', 1, 1)",
            (task_id,),
        )
    db.commit()
    db.close()
    service = ids["MFV3.0"]
    with Library(path) as library:
        library.vote(service[0], engine["elevenlabs"])
        library.vote(engine["elevenlabs"], service[1], "tie")
        library.vote(engine["lyria"], service[0])
        library.vote(engine["lyria"], engine["elevenlabs"], "both_bad")
        rows = {row["provider"]: row for row in library.leaderboard("provider", min_votes=1).rows}
        assert set(rows) == {"musicful", "elevenlabs", "lyria"}
        assert (rows["elevenlabs"]["wins"], rows["elevenlabs"]["losses"], rows["elevenlabs"]["ties"]) == (0, 1, 1)
        assert rows["lyria"]["wins"] == 1 and rows["lyria"]["both_bad"] == 1
        assert rows["musicful"]["credits_per_win"] is not None
        assert rows["elevenlabs"]["credits_per_win"] is None and rows["lyria"]["credits_per_win"] is None
        models = library.leaderboard("model", min_votes=1).rows
        assert {(row["provider"], row["model"]) for row in models} == {
            ("musicful", "MFV3.0"), ("elevenlabs", "(none)"), ("lyria", "(none)"),
        }  # fmt: skip
