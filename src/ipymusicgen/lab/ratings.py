"""Rankings from pairwise votes, with their uncertainty: one fit of all the votes, ties and "both bad" included.

Each vote compares two songs, so two groups (a provider, a model, a style, a batch, or the song itself), with one
of four outcomes (Music Arena's): the first preferred, the second preferred, a tie, or both bad. A vote between
two songs of the same group says nothing about the group and is left out, except "both bad", which counts
against each song's group (see below). All votes are fitted at once, so the order they were cast in changes
nothing:

- Without a tie, the fit is Bradley-Terry's (a maximum-likelihood fit of the win counts with a weak prior,
  `choix.ilsr_pairwise_dense`). `choix` has no model of ties.
- With ties, it is Davidson's (1970) extension of Bradley-Terry: a pair with strengths pi_i, pi_j ends
  i : j : tie with chances pi_i : pi_j : nu * sqrt(pi_i * pi_j), one tie parameter nu for all pairs. It is fitted
  here (`davidson`, scipy's L-BFGS-B on the exact gradient), since no maintained Python library fits it; its
  answer is checked in the tests against the closed form for two groups, Davidson's likelihood equations, and
  choix's Bradley-Terry as ties vanish.
- "Both bad" is a loss of each song's group to the rest of the field: one vote lost per song, shared evenly among
  the groups that were not in the vote (as if each song had lost to a typical other group). Both groups fall
  against all the others; between the two of them it says nothing. With no other group it is left out of the
  fit (still counted in the table).

`rating` is a group's log-strength (the groups average 0; a gap of 1 means the better group wins about 73%
of the votes the two do not tie); `sigma` its standard error, from the fit's Fisher information, and `low` to
`high` its 95% interval, which narrows as votes accumulate. A group's `rank` is 1 + the number of groups whose
interval lies wholly above its own (Chatbot Arena's rule), so two groups whose intervals overlap can share a
rank. A group with fewer than `min_votes` votes gets no rank and no rating: it "needs N more votes".
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

PRIOR_VOTES = 0.5
"""Votes every pair of groups starts with, each way: half a win each (see `fit`)."""
Z95 = 1.959964
"""A 95% interval is rating ± this many standard errors."""
MIN_VOTES = 10
"""Votes a group needs before its rank and rating are shown (Music Arena shows none below a minimum)."""
OUTCOMES = ("a", "b", "tie", "both_bad")
"""What a vote says of its two songs: the first preferred, the second, a tie, or both bad."""
STORED = ("win", "tie", "both_bad")
"""How the journal keeps an outcome: "win" (its first song preferred; "b" is kept with the songs swapped)."""


@dataclass(frozen=True)
class Vote:
    """One vote as the journal keeps it: `winner` preferred to `loser`, or (outcome "tie" / "both_bad") the two
    songs in the order they were shown."""

    winner: str
    loser: str
    blind: bool
    voted_at: float
    outcome: str = "win"


@dataclass
class Leaderboard:
    """Groups ranked by their fitted rating: a table with each 95% interval, and `.to_pandas()`.

    `keys` are the columns that name a group (`("provider", "model")` for models: a model is one provider's);
    `by` is the last of them."""

    by: str
    rows: list[dict[str, Any]]
    keys: tuple[str, ...] = ()
    min_votes: int = MIN_VOTES

    COLUMNS = (
        "rank", "rating", "low", "high", "sigma", "votes", "wins", "losses", "ties", "both_bad", "needs",
        "credits_per_win", "dollars_per_win",
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.keys = self.keys or (self.by,)

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=[*self.keys, *self.COLUMNS])

    def _name(self, row: dict[str, Any]) -> str:
        return " / ".join(str(row[key]) for key in self.keys)

    @staticmethod
    def _cells(row: dict[str, Any]) -> tuple[str, str, str]:
        """Rank, rating and interval as shown: "needs N more votes" in place of all three until it has them."""
        if row["rank"] is None:
            return "-", f"needs {row['needs']} more vote{'s' if row['needs'] != 1 else ''}", ""
        return str(row["rank"]), f"{row['rating']:.2f}", f"{row['low']:.2f} to {row['high']:.2f}"

    @staticmethod
    def _cost(row: dict[str, Any]) -> str:
        """Credits and dollars per win, each in its own unit (a group of both shows both, never added)."""
        credits, dollars = row["credits_per_win"], row.get("dollars_per_win")
        parts = ([] if credits is None else [f"{credits:g} cr"]) + ([] if dollars is None else [f"${dollars:.2f}"])
        return "; ".join(parts)

    def __repr__(self) -> str:
        if not self.rows:
            return f"Leaderboard by {self.by}: no votes between different {self.by}s yet"
        name = " / ".join(self.keys)
        lines = [
            f"{'#':>2} {name:28} {'rating':>18} {'95% interval':>15} {'votes':>5} {'W-L-T-bad':>12} {'cost/win':>15}"
        ]
        for row in self.rows:
            rank, rating, interval = self._cells(row)
            tally = f"{row['wins']}-{row['losses']}-{row['ties']}-{row['both_bad']}"
            lines.append(
                f"{rank:>2} {self._name(row)[:28]:28} {rating:>18} {interval:>15} {row['votes']:>5} {tally:>12}"
                f" {self._cost(row):>15}"
            )
        lines.append(f"(a rank is shown from {self.min_votes} votes; ranks share a number where intervals overlap)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        heads = ("#", *self.keys, "rating", "95% interval", "sigma", "votes", "wins", "losses", "ties", "both bad",
                 "cost per win (credits; dollars)")  # fmt: skip
        head = "".join(f"<th>{html.escape(c)}</th>" for c in heads)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(cell)}</td>"
                for cell in (
                    self._cells(row)[0],
                    *(str(row[key]) for key in self.keys),
                    *self._cells(row)[1:],
                    "" if row["sigma"] is None else f"{row['sigma']:.2f}",
                    *(str(row[c]) for c in ("votes", "wins", "losses", "ties", "both_bad")),
                    self._cost(row),
                )
            )
            + "</tr>"
            for row in self.rows
        )
        return f"<table class='ipymusicgen-leaderboard'><tr>{head}</tr>{body}</table>"


def _tally() -> dict[str, int]:
    return {"wins": 0, "losses": 0, "ties": 0, "both_bad": 0}


def leaderboard(
    by: str,
    votes: Iterable[Vote],
    group_of: Callable[[str], Any],
    *,
    keys: tuple[str, ...] = (),
    min_votes: int = MIN_VOTES,
    cost_of: Callable[[str], float | None] | None = None,
    dollars_of: Callable[[str], float | None] | None = None,
) -> Leaderboard:
    """Rank the groups of the voted songs from one fit of all the votes.

    `group_of(song id)` names a song's group: a value, or a tuple of values for `keys` (the group's columns).
    `cost_of(song id)`, when given, is a song's price (credits; None when unknown): `credits_per_win` is the
    group's mean price per song divided by its share of won votes (a tie counts half), what a won vote costs.
    `dollars_of(song id)`, likewise, an engine's song's price in US dollars: `dollars_per_win`, never added to
    the credits."""
    import numpy as np

    keys = keys or (by,)
    wins_between: list[tuple[Any, Any]] = []
    ties_between: list[tuple[Any, Any]] = []
    both_bad: list[tuple[Any, Any]] = []
    tallies: dict[Any, dict[str, int]] = {}
    songs: dict[Any, set[str]] = {}
    for vote in votes:
        first, second = group_of(vote.winner), group_of(vote.loser)
        if vote.outcome == "both_bad":
            both_bad.append((first, second))
            for group, song in ((first, vote.winner), (second, vote.loser)):
                tallies.setdefault(group, _tally())["both_bad"] += 1
                songs.setdefault(group, set()).add(song)
            continue
        if first == second:
            continue
        if vote.outcome == "tie":
            ties_between.append((first, second))
        else:
            wins_between.append((first, second))
        for group, song, won in ((first, vote.winner, "wins"), (second, vote.loser, "losses")):
            tallies.setdefault(group, _tally())["ties" if vote.outcome == "tie" else won] += 1
            songs.setdefault(group, set()).add(song)
    if not tallies:
        return Leaderboard(by, [], keys, min_votes)
    groups = sorted(tallies, key=str)
    index = {group: i for i, group in enumerate(groups)}
    wins = np.zeros((len(groups), len(groups)))  # wins[i, j]: how often i beat j; a count knows no order
    ties = np.zeros((len(groups), len(groups)))  # ties[i, j] = ties[j, i]: how often i and j tied
    for first, second in wins_between:
        wins[index[first], index[second]] += 1.0
    for first, second in ties_between:
        ties[index[first], index[second]] += 1.0
        ties[index[second], index[first]] += 1.0
    for pair in both_bad:  # each song's group loses one vote to the field: the groups not in this vote, evenly
        field = [index[group] for group in groups if group not in pair]
        for group in pair:
            if field:
                wins[field, index[group]] += 1.0 / len(field)
    strength, sigma = fit(wins, ties)
    rows = []
    for group in groups:
        i, tally = index[group], tallies[group]
        votes_in = sum(tally.values())
        ranked = votes_in >= min_votes
        names = group if isinstance(group, tuple) else (group,)
        rows.append(
            dict(zip(keys, names, strict=True))
            | {
                "rank": None,
                "rating": round(float(strength[i]), 3) if ranked else None,
                "low": round(float(strength[i] - Z95 * sigma[i]), 3) if ranked else None,
                "high": round(float(strength[i] + Z95 * sigma[i]), 3) if ranked else None,
                "sigma": round(float(sigma[i]), 3) if ranked else None,
                "votes": votes_in,
                **tally,
                "needs": max(0, min_votes - votes_in),
                "credits_per_win": _cost_per_win(tally, songs[group], cost_of),
                "dollars_per_win": _cost_per_win(tally, songs[group], dollars_of),
            }
        )
    ranked_rows = sorted((r for r in rows if r["rating"] is not None), key=lambda r: (-r["rating"], -r["votes"]))
    for row in ranked_rows:
        row["rank"] = 1 + sum(other["low"] > row["high"] for other in ranked_rows)
    waiting = sorted((r for r in rows if r["rating"] is None), key=lambda r: -r["votes"])
    return Leaderboard(by, ranked_rows + waiting, keys, min_votes)


def _cost_per_win(
    tally: dict[str, int], songs: set[str], cost_of: Callable[[str], float | None] | None
) -> float | None:
    """The group's mean price per song over its share of won votes (a tie half a win); None when unknown or no win."""
    won = tally["wins"] + 0.5 * tally["ties"]
    if cost_of is None or won <= 0:
        return None
    prices = [price for price in (cost_of(song) for song in sorted(songs)) if price is not None]
    if not prices:
        return None
    share = won / sum(tally.values())
    return round(sum(prices) / len(prices) / share, 2)


def fit(wins: Any, ties: Any = None, *, prior: float = PRIOR_VOTES) -> tuple[Any, Any]:
    """Log-strengths and their standard errors from a matrix of win counts (and a symmetric one of ties).

    Every pair of groups starts with `prior` won each way (a prior toward equal strength that keeps a one-sided
    record finite and ties groups that never met). Without ties `choix.ilsr_pairwise_dense` finds the maximum
    likelihood (Bradley-Terry); with ties, `davidson`. The covariance is the pseudo-inverse of the Fisher
    information (singular only along the common level, which the data cannot tell); the groups average 0."""
    import numpy as np

    count = len(wins)
    smoothed = np.asarray(wins, dtype=float) + prior * (1.0 - np.eye(count))
    tied = np.zeros((count, count)) if ties is None else np.asarray(ties, dtype=float)
    if tied.sum() > 0:
        strength, _nu, covariance = davidson(smoothed, tied)
    else:
        strength, covariance = _bradley_terry(smoothed)
    return strength, np.sqrt(np.clip(np.diag(covariance), 0.0, None))


def _bradley_terry(smoothed: Any) -> tuple[Any, Any]:
    import choix
    import numpy as np

    strength = choix.ilsr_pairwise_dense(smoothed, max_iter=1000, tol=1e-10)
    strength = strength - strength.mean()
    chance = 1.0 / (1.0 + np.exp(strength[None, :] - strength[:, None]))  # chance[i, j]: i beats j
    weights = (smoothed + smoothed.T) * chance * chance.T
    information = np.diag(weights.sum(axis=1)) - weights
    return strength, np.linalg.pinv(information)


def _chances(theta: Any, nu: float) -> tuple[Any, Any]:
    """Davidson's chances for every ordered pair: `win[i, j]` that i beats j, `tie[i, j]` that they tie."""
    import numpy as np

    half = 0.5 * (theta[:, None] + theta[None, :])
    log_denominator = np.logaddexp(np.logaddexp(theta[:, None], theta[None, :]), np.log(nu) + half)
    return np.exp(theta[:, None] - log_denominator), np.exp(np.log(nu) + half - log_denominator)


def davidson(wins: Any, ties: Any) -> tuple[Any, float, Any]:
    """Davidson's (1970) tie model by maximum likelihood: log-strengths (mean 0), nu, and the covariance of the
    log-strengths (pseudo-inverse of the expected Fisher information of strengths and nu).

    `wins[i, j]`: i beat j; `ties[i, j] = ties[j, i]`: i and j tied (at least one tie, else nu would be 0: use
    Bradley-Terry). The log-likelihood of a pair is w_ij*t_i + w_ji*t_j + n_tie*(log nu + (t_i + t_j)/2) -
    n_ij*log(e^t_i + e^t_j + nu*e^((t_i + t_j)/2)); it is maximised over (t, log nu) on its exact gradient.
    """
    import numpy as np
    from scipy.optimize import minimize

    count = len(wins)
    wins = np.asarray(wins, dtype=float)
    ties = np.asarray(ties, dtype=float)
    total = wins + wins.T + ties  # symmetric: votes between i and j
    tie_count = ties.sum() / 2.0
    scored = (wins + 0.5 * ties).sum(axis=1)  # Davidson's "score": a win, and half of each tie

    def objective(params: Any) -> tuple[float, Any]:
        theta, log_nu = params[:count], params[count]
        nu = float(np.exp(log_nu))
        half = 0.5 * (theta[:, None] + theta[None, :])
        log_denominator = np.logaddexp(np.logaddexp(theta[:, None], theta[None, :]), log_nu + half)
        np.fill_diagonal(log_denominator, 0.0)
        likelihood = (scored @ theta) + tie_count * log_nu - 0.5 * (total * log_denominator).sum()
        win, tie = _chances(theta, nu)
        gradient_theta = scored - (total * (win + 0.5 * tie)).sum(axis=1)
        gradient_nu = tie_count - 0.5 * (total * tie).sum()
        mean = theta.sum()  # fixes the common level (the likelihood does not see it): mean 0
        return -likelihood + 0.5 * mean**2, -np.append(gradient_theta, gradient_nu) + np.append(
            np.full(count, mean), 0.0
        )

    start = np.append(np.zeros(count), np.log(max(tie_count, 0.5) / max(total.sum() / 2.0 - tie_count, 0.5)))
    found = minimize(
        objective, start, jac=True, method="L-BFGS-B", options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-10}
    )
    theta, nu = found.x[:count] - found.x[:count].mean(), float(np.exp(found.x[count]))
    win, tie = _chances(theta, nu)
    own = win + 0.5 * tie  # a_ij: i's expected score against j
    information = np.zeros((count + 1, count + 1))
    off = total * (tie / 4.0 - own * own.T)
    np.fill_diagonal(off, 0.0)
    information[:count, :count] = np.diag(-off.sum(axis=1)) + off
    cross = (total * (tie / nu) * (win.T - win) / 2.0).sum(axis=1)
    information[:count, count] = information[count, :count] = cross
    information[count, count] = 0.5 * (total * tie * (1.0 - tie)).sum() / nu**2
    return theta, nu, np.linalg.pinv(information)[:count, :count]
