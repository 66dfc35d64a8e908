"""Rankings from pairwise votes, with their uncertainty: one Bradley-Terry fit of all the votes (`choix`).

Each vote is a comparison between the winner's group and the loser's group (a model, a style, a batch, or
the song itself). A vote between two songs of the same group says nothing about the group and is left out.
All votes are fitted at once (a maximum-likelihood Bradley-Terry fit of the win counts, with a weak prior,
`choix.ilsr_pairwise_dense`), so the order they were cast in changes nothing. `rating` is a group's
log-strength (the groups average 0; a gap of 1 means the better group wins about 73% of its votes); `sigma`
is its standard error, from the fit's Fisher information, and `low` to `high` the 95% interval, which
narrows as votes accumulate.
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


@dataclass(frozen=True)
class Vote:
    winner: str
    loser: str
    blind: bool
    voted_at: float


@dataclass
class Leaderboard:
    """Groups ranked by their fitted rating: a table with each 95% interval, and `.to_pandas()`."""

    by: str
    rows: list[dict[str, Any]]

    COLUMNS = ("rating", "low", "high", "sigma", "votes", "wins", "losses")

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=[self.by, *self.COLUMNS])

    def __repr__(self) -> str:
        if not self.rows:
            return f"Leaderboard by {self.by}: no votes between different {self.by}s yet"
        lines = [f"{'#':>2} {self.by:24} {'rating':>7} {'95% interval':>18} {'votes':>5} {'W-L':>9}"]
        for rank, row in enumerate(self.rows, 1):
            name = str(row[self.by])[:24]
            interval = f"{row['low']:.2f} to {row['high']:.2f}"
            wins_losses = f"{row['wins']}-{row['losses']}"
            lines.append(f"{rank:>2} {name:24} {row['rating']:7.2f} {interval:>18} {row['votes']:>5} {wins_losses:>9}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        heads = ("#", self.by, "rating", "95% interval", "sigma", "votes", "wins", "losses")
        head = "".join(f"<th>{html.escape(c)}</th>" for c in heads)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(cell)}</td>"
                for cell in (
                    str(rank),
                    str(row[self.by]),
                    f"{row['rating']:.2f}",
                    f"{row['low']:.2f} to {row['high']:.2f}",
                    f"{row['sigma']:.2f}",
                    str(row["votes"]),
                    str(row["wins"]),
                    str(row["losses"]),
                )
            )
            + "</tr>"
            for rank, row in enumerate(self.rows, 1)
        )
        return f"<table class='ipymusicgen-leaderboard'><tr>{head}</tr>{body}</table>"


def leaderboard(by: str, votes: Iterable[Vote], group_of: Callable[[str], str]) -> Leaderboard:
    """Rank the groups of the voted songs (`group_of(song id)`) from one fit of all the votes."""
    import numpy as np

    pairs: list[tuple[str, str]] = []
    for vote in votes:
        winner, loser = group_of(vote.winner), group_of(vote.loser)
        if winner != loser:
            pairs.append((winner, loser))
    if not pairs:
        return Leaderboard(by, [])
    groups = sorted({group for pair in pairs for group in pair}, key=str)
    index = {group: i for i, group in enumerate(groups)}
    wins = np.zeros((len(groups), len(groups)))  # wins[i, j]: how often i beat j; a count knows no order
    np.add.at(wins, ([index[w] for w, _ in pairs], [index[loser] for _, loser in pairs]), 1.0)
    strength, sigma = fit(wins)
    rows = [
        {
            by: group,
            "rating": round(float(strength[i]), 3),
            "low": round(float(strength[i] - Z95 * sigma[i]), 3),
            "high": round(float(strength[i] + Z95 * sigma[i]), 3),
            "sigma": round(float(sigma[i]), 3),
            "votes": int(wins[i].sum() + wins[:, i].sum()),
            "wins": int(wins[i].sum()),
            "losses": int(wins[:, i].sum()),
        }
        for group, i in index.items()
    ]
    rows.sort(key=lambda row: (-row["rating"], -row["votes"], str(row[by])))
    return Leaderboard(by, rows)


def fit(wins: Any) -> tuple[Any, Any]:
    """Bradley-Terry log-strengths (mean 0) from a matrix of win counts, and their standard errors.

    Every pair of groups starts with `PRIOR_VOTES` won each way (a prior toward equal strength that keeps a
    one-sided record finite and ties groups that never met); `choix.ilsr_pairwise_dense` finds the maximum
    likelihood of those counts. The covariance is the pseudo-inverse of the Fisher information (a weighted
    graph Laplacian, singular only along the mean, which the data cannot tell)."""
    import choix
    import numpy as np

    count = len(wins)
    smoothed = wins + PRIOR_VOTES * (1.0 - np.eye(count))
    strength = choix.ilsr_pairwise_dense(smoothed, max_iter=1000, tol=1e-10)
    strength = strength - strength.mean()
    chance = 1.0 / (1.0 + np.exp(strength[None, :] - strength[:, None]))  # chance[i, j]: i beats j
    weights = (smoothed + smoothed.T) * chance * chance.T
    information = np.diag(weights.sum(axis=1)) - weights
    covariance = np.linalg.pinv(information)
    return strength, np.sqrt(np.clip(np.diag(covariance), 0.0, None))
