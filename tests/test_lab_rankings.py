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


def board(votes: list[Vote], min_votes: int = 1):
    return leaderboard("model", votes, lambda song: song, min_votes=min_votes)


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
    found = leaderboard("model", votes_of(("a1", "a2", 5), ("a1", "b1", 2)), lambda song: song[0], min_votes=1)
    assert [(r["model"], r["wins"], r["losses"]) for r in found.rows] == [("a", 2, 0), ("b", 0, 2)]


# -- issue 41: four outcomes, a tie model, "both bad", a minimum of votes, ranks from intervals, cost per win ------


def outcomes_of(*runs: tuple[str, str, str, int]) -> list[Vote]:
    """Votes in runs: (first song, second song, stored outcome "win"/"tie"/"both_bad", how many)."""
    votes: list[Vote] = []
    for first, second, outcome, count in runs:
        votes.extend(Vote(first, second, True, float(len(votes) + i), outcome) for i in range(count))
    return votes


def test_ties_are_fitted_as_ties_not_as_wins_of_the_song_shown_first() -> None:
    """37 ties between A and B (A always shown first), and each beats C the same: A and B end level."""
    found = board(outcomes_of(("A", "B", "tie", 37), ("A", "C", "win", 8), ("B", "C", "win", 8)))
    rows = {row["model"]: row for row in found.rows}
    assert (rows["A"]["ties"], rows["B"]["ties"], rows["A"]["wins"], rows["A"]["losses"]) == (37, 37, 8, 0)
    assert rows["A"]["rating"] == pytest.approx(rows["B"]["rating"], abs=1e-3)
    assert rows["C"]["rating"] < rows["A"]["rating"] - 1.0
    assert "8-0-37-0" in repr(found)


def test_the_davidson_fit_matches_its_closed_form_for_two_groups() -> None:
    """Two groups, w wins, l losses, t ties, no prior: the likelihood is a multinomial's, so the fit is exact:
    strength gap log(w / l) and nu = t / sqrt(w * l) (Davidson 1970, section 2), and the interval's variance
    that of the log of two multinomial counts' ratio."""
    import numpy as np

    from ipymusicgen.lab.ratings import davidson

    for won, lost, tied in ((30, 12, 9), (5, 40, 1), (7, 7, 60)):
        theta, nu, covariance = davidson(np.array([[0.0, won], [lost, 0.0]]), np.array([[0.0, tied], [tied, 0.0]]))
        assert theta[0] - theta[1] == pytest.approx(np.log(won / lost), abs=1e-6)
        assert nu == pytest.approx(tied / np.sqrt(won * lost), rel=1e-5)
        # the gap's variance is the multinomial's, 1/w + 1/l (delta method); each strength is half the gap
        assert covariance[0, 0] == pytest.approx((1 / won + 1 / lost) / 4, rel=1e-6)


def test_the_davidson_fit_solves_davidsons_likelihood_equations() -> None:
    """Five groups, seeded random wins and ties: at the fit each group's score (2 wins + ties) equals what the
    model expects of it, and the ties the expected ties (Davidson 1970, equations 3.2 and 3.3)."""
    import numpy as np

    from ipymusicgen.lab.ratings import _chances, davidson

    rng = np.random.default_rng(41)
    wins = rng.integers(0, 25, (5, 5)).astype(float)
    np.fill_diagonal(wins, 0)
    upper = np.triu(rng.integers(0, 9, (5, 5)), 1).astype(float)
    ties = upper + upper.T
    theta, nu, _ = davidson(wins, ties)
    total = wins + wins.T + ties
    win, tie = _chances(theta, nu)
    np.fill_diagonal(win, 0)
    np.fill_diagonal(tie, 0)
    assert (2 * wins + ties).sum(axis=1) == pytest.approx((total * (2 * win + tie)).sum(axis=1), rel=1e-6)
    assert ties.sum() / 2 == pytest.approx((total * tie).sum() / 2, rel=1e-6)
    assert abs(theta.mean()) < 1e-9


def test_as_ties_vanish_the_fit_becomes_choix_bradley_terry() -> None:
    import choix
    import numpy as np

    from ipymusicgen.lab.ratings import davidson, fit

    rng = np.random.default_rng(7)
    wins = rng.integers(0, 30, (6, 6)).astype(float) + 0.5
    np.fill_diagonal(wins, 0)
    ties = np.zeros((6, 6))
    ties[2, 4] = ties[4, 2] = 1e-6
    theta, nu, _ = davidson(wins, ties)
    reference = choix.ilsr_pairwise_dense(wins, max_iter=1000, tol=1e-12)
    assert theta == pytest.approx(reference - reference.mean(), abs=1e-3) and nu < 1e-4
    without, _ = fit(wins - 0.5 * (1 - np.eye(6)))  # no ties: choix itself
    assert without == pytest.approx(reference - reference.mean(), abs=1e-6)


def test_both_bad_counts_against_both_groups_and_for_the_rest() -> None:
    level = outcomes_of(("A", "C", "win", 6), ("C", "A", "win", 6), ("B", "C", "win", 6), ("C", "B", "win", 6))
    before = {row["model"]: row["rating"] for row in board(level).rows}
    assert before["A"] == pytest.approx(before["C"], abs=0.01)
    found = board(level + outcomes_of(("A", "B", "both_bad", 12)))
    after = {row["model"]: row for row in found.rows}
    assert set(after) == {"A", "B", "C"}
    assert after["A"]["both_bad"] == after["B"]["both_bad"] == 12 and after["C"]["both_bad"] == 0
    assert after["C"]["rating"] > after["A"]["rating"] + 0.3 and after["C"]["rating"] > after["B"]["rating"] + 0.3
    assert after["A"]["rating"] == pytest.approx(after["B"]["rating"], abs=0.01)  # between the two: nothing
    assert (after["C"]["wins"], after["C"]["losses"]) == (12, 12)  # the tally counts votes, not shares
    alone_pair = board(outcomes_of(("A", "B", "both_bad", 5)))  # no other group: nothing to rank them by
    assert [r["rating"] for r in alone_pair.rows] == [0.0, 0.0] and [r["both_bad"] for r in alone_pair.rows] == [5, 5]
    # both songs of one group: the group takes both losses
    alone = board(level + outcomes_of(("A", "A", "both_bad", 3)))
    ratings = {r["model"]: r for r in alone.rows}
    assert ratings["A"]["both_bad"] == 6
    assert ratings["A"]["rating"] < min(ratings["B"]["rating"], ratings["C"]["rating"])


def test_a_group_with_fewer_votes_than_the_minimum_shows_how_many_it_needs_not_a_rank() -> None:
    votes = outcomes_of(("A", "B", "win", 9), ("B", "A", "win", 3), ("C", "A", "win", 2), ("A", "C", "win", 4))
    found = leaderboard("model", votes, lambda song: song)  # the default minimum: 10 votes
    rows = {row["model"]: row for row in found.rows}
    assert rows["A"]["rank"] == rows["B"]["rank"] == 1 and rows["B"]["votes"] == 12  # their intervals overlap
    assert rows["C"]["rank"] is None and rows["C"]["rating"] is None and rows["C"]["needs"] == 4
    assert [row["model"] for row in found.rows] == ["A", "B", "C"]  # the waiting come last
    assert "needs 4 more votes" in repr(found) and "needs 4 more votes" in found._repr_html_()
    one_short = leaderboard("model", votes + outcomes_of(("C", "B", "win", 5)), lambda s: s, min_votes=12)
    assert "needs 1 more vote" in repr(one_short) and "needs 1 more votes" not in repr(one_short)
    assert all(row["rank"] is None for row in leaderboard("model", votes, lambda s: s, min_votes=100).rows)


def test_ranks_come_from_the_intervals_so_groups_that_overlap_share_one() -> None:
    """A and B are near-level over few votes; C loses most of its many votes: A and B share rank 1."""
    votes = outcomes_of(
        ("A", "B", "win", 6), ("B", "A", "win", 5), ("A", "C", "win", 60), ("C", "A", "win", 5),
        ("B", "C", "win", 60), ("C", "B", "win", 6),
    )  # fmt: skip
    found = board(votes, min_votes=10)
    assert [(row["model"], row["rank"]) for row in found.rows] == [("A", 1), ("B", 1), ("C", 3)]


def test_cost_per_win_is_the_price_of_a_song_over_its_share_of_won_votes() -> None:
    votes = outcomes_of(("a1", "b1", "win", 6), ("b2", "a2", "win", 2), ("a1", "b2", "tie", 4))
    prices = {"a1": 3.0, "a2": 3.0, "b1": 1.5, "b2": 1.5}
    found = leaderboard("model", votes, lambda song: song[0], min_votes=1, cost_of=prices.get)
    rows = {row["model"]: row for row in found.rows}
    # a: 6 wins, 2 losses, 4 ties of 12 votes -> share 8/12; 3 credits a song -> 4.5 credits a won vote
    assert rows["a"]["credits_per_win"] == pytest.approx(4.5)
    # b: 2 wins, 6 losses, 4 ties -> share 4/12; 1.5 a song -> 4.5
    assert rows["b"]["credits_per_win"] == pytest.approx(4.5)
    lost = leaderboard("model", outcomes_of(("a1", "b1", "win", 3)), lambda s: s[0], min_votes=1, cost_of=prices.get)
    assert {r["model"]: r["credits_per_win"] for r in lost.rows} == {"a": 3.0, "b": None}  # no win: no price
    unknown = leaderboard("model", votes, lambda s: s[0], min_votes=1, cost_of=lambda song: None)
    assert all(row["credits_per_win"] is None for row in unknown.rows)


def test_a_group_named_by_several_columns_is_one_row_with_each_column() -> None:
    votes = outcomes_of(("s1", "e1", "win", 3), ("e1", "s2", "win", 1))
    provider = {"s": "musicful", "e": "elevenlabs"}
    found = leaderboard(
        "model", votes, lambda song: (provider[song[0]], "v" + song[1]), keys=("provider", "model"), min_votes=1
    )
    assert {(row["provider"], row["model"]) for row in found.rows} == {("musicful", "v1"), ("musicful", "v2"),
                                                                      ("elevenlabs", "v1")}  # fmt: skip
    assert list(found.to_pandas().columns[:3]) == ["provider", "model", "rank"]
    assert "elevenlabs / v1" in repr(found)
