"""Rankings from pairwise votes, with their uncertainty: Plackett-Luce ratings from `openskill`.

Each vote is a match between the winner's group and the loser's group (a model, a style, a batch, or
the song itself), played in the order the votes were cast. A vote between two songs of the same group
says nothing about the group and is left out. `rating` is the conservative ordinal (mu - 3 sigma):
a group with few votes ranks low until the votes say otherwise.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

SIGMAS = 3.0
"""How many standard deviations the ordinal keeps below the mean (openskill's default view of a rating)."""


@dataclass(frozen=True)
class Vote:
    winner: str
    loser: str
    blind: bool
    voted_at: float


@dataclass
class Leaderboard:
    """Groups ranked by their rating from the votes: a table, and `.to_pandas()`."""

    by: str
    rows: list[dict[str, Any]]

    COLUMNS = ("rating", "mu", "sigma", "votes", "wins", "losses")

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=[self.by, *self.COLUMNS])

    def __repr__(self) -> str:
        if not self.rows:
            return f"Leaderboard by {self.by}: no votes between different {self.by}s yet"
        lines = [f"{'#':>2} {self.by:24} {'rating':>7} {'mu':>6} {'± sigma':>8} {'votes':>5} {'W-L':>7}"]
        for rank, row in enumerate(self.rows, 1):
            name = str(row[self.by])[:24]
            wins_losses = f"{row['wins']}-{row['losses']}"
            lines.append(
                f"{rank:>2} {name:24} {row['rating']:7.2f} {row['mu']:6.2f} {row['sigma']:8.2f} "
                f"{row['votes']:>5} {wins_losses:>7}"
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in ("#", self.by, *self.COLUMNS))
        body = "".join(
            "<tr>"
            + f"<td>{rank}</td>"
            + "".join(
                f"<td>{html.escape(f'{row[c]:.2f}' if isinstance(row[c], float) else str(row[c]))}</td>"
                for c in (self.by, *self.COLUMNS)
            )
            + "</tr>"
            for rank, row in enumerate(self.rows, 1)
        )
        return f"<table class='ipymusicgen-leaderboard'><tr>{head}</tr>{body}</table>"


def leaderboard(by: str, votes: Iterable[Vote], group_of: Callable[[str], str]) -> Leaderboard:
    """Rank the groups of the voted songs (`group_of(song id)`) from the votes, oldest vote first."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    ratings: dict[str, Any] = {}
    tally: dict[str, dict[str, int]] = {}
    for vote in sorted(votes, key=lambda v: v.voted_at):
        winner, loser = group_of(vote.winner), group_of(vote.loser)
        if winner == loser:
            continue
        for group in (winner, loser):
            ratings.setdefault(group, model.rating(name=group))
            tally.setdefault(group, {"wins": 0, "losses": 0})
        [[ratings[winner]], [ratings[loser]]] = model.rate([[ratings[winner]], [ratings[loser]]])
        tally[winner]["wins"] += 1
        tally[loser]["losses"] += 1
    rows = [
        {
            by: group,
            "rating": round(float(r.mu - SIGMAS * r.sigma), 3),
            "mu": round(float(r.mu), 3),
            "sigma": round(float(r.sigma), 3),
            "votes": tally[group]["wins"] + tally[group]["losses"],
            **tally[group],
        }
        for group, r in ratings.items()
    ]
    rows.sort(key=lambda row: (-row["rating"], -row["votes"], str(row[by])))
    return Leaderboard(by, rows)
