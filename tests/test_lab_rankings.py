"""Leaderboards fitted on all votes at once (Bradley-Terry, `choix`): the order of the votes never matters, a
clear majority ranks first, and the interval each row shows narrows as votes accumulate."""

from __future__ import annotations

import random

import pytest

from ipymusicgen.lab.ratings import Vote, leaderboard


def votes_of(*runs: tuple[str, str, int]) -> list[Vote]:
    """Votes in runs: (winner, loser, how many), timestamped in the order given."""
    votes = []
    for winner, loser, count in runs:
        votes.extend(Vote(winner, loser, True, float(len(votes) + i)) for i in range(count))
    return votes


def board(votes: list[Vote]):
    return leaderboard("model", votes, lambda song: song)


def test_a_clear_majority_ranks_first_whatever_run_of_votes_came_last() -> None:
    """A beats B 1000 to 600; the last 600 votes all went to B (an online update let them decide)."""
    found = board(votes_of(("A", "B", 1000), ("B", "A", 600)))
    assert [row["model"] for row in found.rows] == ["A", "B"]
    top, bottom = found.rows
    assert (top["wins"], top["losses"], top["votes"]) == (1000, 600, 1600)
    # Bradley-Terry: the gap between the two is the log of the odds, log(1000 / 600)
    assert top["rating"] - bottom["rating"] == pytest.approx(0.511, abs=0.01)
    assert top["low"] > bottom["high"]  # 1600 votes separate them


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_order_of_the_votes_changes_nothing(seed: int) -> None:
    votes = votes_of(("A", "B", 30), ("B", "C", 20), ("C", "A", 12), ("B", "A", 18), ("C", "B", 9), ("D", "C", 4))
    reference = board(votes).rows
    shuffled = votes[:]
    random.Random(seed).shuffle(shuffled)
    shuffled = [Vote(v.winner, v.loser, v.blind, float(i)) for i, v in enumerate(shuffled)]  # new times too
    assert board(shuffled).rows == reference
    assert board(list(reversed(votes))).rows == reference


def test_the_interval_narrows_with_ten_times_the_votes() -> None:
    few = board(votes_of(("A", "B", 10), ("B", "A", 6))).rows
    many = board(votes_of(("A", "B", 100), ("B", "A", 60))).rows
    for small, large in zip(few, many, strict=True):
        assert small["model"] == large["model"]
        assert large["high"] - large["low"] < 0.5 * (small["high"] - small["low"])
        assert large["low"] < large["rating"] < large["high"] and large["sigma"] < small["sigma"]
    assert many[0]["rating"] - many[1]["rating"] == pytest.approx(0.511, abs=0.02)


def test_the_interval_is_shown_in_the_table() -> None:
    found = board(votes_of(("A", "B", 10), ("B", "A", 6)))
    top = found.rows[0]
    assert f"{top['low']:.2f} to {top['high']:.2f}" in repr(found)
    assert "95%" in repr(found) and "95%" in found._repr_html_()
    assert list(found.to_pandas().columns) == ["model", *found.COLUMNS]


def test_one_sided_and_unconnected_votes_give_finite_numbers() -> None:
    """Five wins and no loss, and two pairs never compared with each other: no infinite strength."""
    found = board(votes_of(("A", "B", 5), ("C", "D", 1)))
    assert found.rows[0]["model"] == "A"
    for row in found.rows:
        assert all(abs(row[c]) < 50 for c in ("rating", "low", "high", "sigma"))
    assert board([]).rows == [] and "no votes" in repr(board([]))


def test_votes_within_one_group_are_left_out() -> None:
    found = leaderboard("model", votes_of(("a1", "a2", 5), ("a1", "b1", 2)), lambda song: song[0])
    assert [(r["model"], r["wins"], r["losses"]) for r in found.rows] == [("a", 2, 0), ("b", 0, 2)]
