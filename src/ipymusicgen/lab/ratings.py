"""Rankings from pairwise votes, with their uncertainty: one Bradley-Terry fit of all the votes (`choix`).

Each vote is a comparison between the winner's group and the loser's group (a model, a style, a batch, or
the song itself). A vote between two songs of the same group says nothing about the group and is left out.
All votes are fitted at once (a penalised maximum-likelihood Bradley-Terry fit, `choix.opt_pairwise`), so
the order they were cast in changes nothing. `rating` is a group's log-strength (the groups average 0; a
gap of 1 means the better group wins about 73% of its votes); `sigma` is its standard error, from the fit's
Fisher information, and `low` to `high` the 95% interval, which narrows as votes accumulate.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

PENALTY = 0.01
"""choix's L2 regularisation: a wide Gaussian prior (sd about 7) that keeps one-sided records finite."""
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
    data = sorted((index[w], index[loser]) for w, loser in pairs)  # sorted: the fit cannot see the votes' order
    strength, sigma = fit(len(groups), data)
    wins = np.bincount([w for w, _ in data], minlength=len(groups))
    losses = np.bincount([loser for _, loser in data], minlength=len(groups))
    rows = [
        {
            by: group,
            "rating": round(float(strength[i]), 3),
            "low": round(float(strength[i] - Z95 * sigma[i]), 3),
            "high": round(float(strength[i] + Z95 * sigma[i]), 3),
            "sigma": round(float(sigma[i]), 3),
            "votes": int(wins[i] + losses[i]),
            "wins": int(wins[i]),
            "losses": int(losses[i]),
        }
        for group, i in index.items()
    ]
    rows.sort(key=lambda row: (-row["rating"], -row["votes"], str(row[by])))
    return Leaderboard(by, rows)


def fit(count: int, data: list[tuple[int, int]]) -> tuple[Any, Any]:
    """Bradley-Terry log-strengths (mean 0) of `count` items from (winner, loser) pairs, and their standard
    errors: the covariance is the inverse of the penalised Fisher information (the objective's Hessian at the
    estimate), taken within the mean-0 plane, since only differences between strengths are identified."""
    import choix
    import numpy as np
    from choix.opt import PairwiseFcts

    strength = choix.opt_pairwise(count, data, alpha=PENALTY, method="Newton-CG")
    strength = strength - strength.mean()
    information = PairwiseFcts(data, PENALTY).hessian(strength)
    centre = np.eye(count) - 1.0 / count
    covariance = centre @ np.linalg.inv(information) @ centre
    return strength, np.sqrt(np.clip(np.diag(covariance), 0.0, None))
