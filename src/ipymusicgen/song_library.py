"""The user's library: every journalled song, searchable, with favourites, notes, takes, lineage and spend.

`ipymusicgen.library()` opens it over the journal in use (the durable one with a key, the sandbox's own
otherwise). Search is SQLite FTS5 over title, style, lyrics and prompt; pages are LIMIT/OFFSET over an
index, so 10,000 songs page as fast as 100.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import numbers
import re
import time
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .storage.errors import StorageUnavailableError
from .storage.journal import JournalWriteWarning
from .storage.library import LibraryStore, unpack_peaks
from .storage.provider_spend import ProviderSpend, spend_rows
from .storage.songs import ORDERS, SongFilter

if TYPE_CHECKING:
    from .archive.events import ArchiveEvents
    from .lab.ratings import Leaderboard
    from .storage.database import Database

SPEND_BY = ("day", "model", "batch", "provider")
LEADERBOARD_BY = ("provider", "model", "style", "batch", "song")
OUTCOMES = ("a", "b", "tie", "both_bad")
"""What `Library.vote` takes: the first song preferred, the second, a tie, or both bad (Music Arena's four)."""
_STATE_ALIASES = MappingProxyType({"ready": "complete", "writing": "processing", "queued": "processing"})
_WORD = re.compile(r"\w[\w\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]*", re.UNICODE)
"""A word as FTS5's unicode61 tokenizer sees it: combining accents stay in the word (it folds them away)."""


@dataclass(frozen=True)
class LibrarySong:
    """One song as the library knows it (journal row + library row)."""

    id: str
    call: str | None
    take: int
    state: str
    title: str | None
    style: str | None
    created_at: float
    audio_url: str | None = None
    cover_url: str | None = None
    song_id: str | None = None
    fail_reason: str | None = None
    lyrics: str | None = field(default=None, repr=False)
    prompt: str | None = None
    model: str | None = None
    action: str | None = None
    batch: str | None = None
    duration_s: float | None = None
    parent_id: str | None = None
    favourite: bool = False
    kept: bool = False
    note: str | None = None
    archive_path: str | None = None
    archive_size: int | None = None
    wav_path: str | None = None
    cover_path: str | None = None
    archive_error: str | None = None
    peaks: list[list[float]] = field(default_factory=list, repr=False)
    stars: int | None = None
    """The song's rating, 1 to 5 (`Library.rate`), or None."""
    bpm: float | None = None
    musical_key: str | None = None
    """e.g. "A minor" (`ipymusicgen.analyze`)."""
    lufs: float | None = None
    true_peak_db: float | None = None
    silence_start_s: float | None = None
    silence_end_s: float | None = None
    analysis_error: str | None = None
    asked_seconds: float | None = None
    """The length the request asked for (`--seconds 90`: an engine's song), or None when it named none."""

    @property
    def archived(self) -> Path | None:
        return Path(self.archive_path) if self.archive_path else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SongList(list[LibrarySong]):
    """Songs from a library query: a list, a small table in notebooks, a DataFrame on request."""

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in s.as_dict().items() if k != "peaks"} for s in self])

    def __repr__(self) -> str:
        if not self:
            return "SongList([])  # no songs"
        lines = [f"{len(self)} song(s):"]
        for s in self:
            star = "*" if s.favourite else " "
            lines.append(f" {star} {s.id[:12]:12} take {s.take} {s.state:10} {(s.title or 'untitled')[:40]!r}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "<tr><th>id</th><th>take</th><th>state</th><th>title</th><th>style</th><th>archived</th></tr>"
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (s.id, s.take, s.state, s.title or "", s.style or "", s.archive_path or s.archive_error or "")
            )
            + "</tr>"
            for s in self
        )
        return f"<table class='ipymusicgen-library-table'>{head}{rows}</table>"


def _range(name: str, bounds: Any) -> tuple[float | None, float | None] | None:
    """`(low, high)` (either end None) checked; a bad range raises ValueError naming it."""
    if bounds is None:
        return None
    if not isinstance(bounds, tuple | list) or len(bounds) != 2:
        raise ValueError(f"{name} takes (low, high), either end None (got {bounds!r})")
    ends: list[float | None] = []
    for end in bounds:
        if end is not None and (isinstance(end, bool) or not isinstance(end, numbers.Real) or not math.isfinite(end)):
            raise ValueError(f"{name}: each end is a finite number or None (got {end!r})")
        ends.append(None if end is None else float(end))
    return ends[0], ends[1]


class Comparisons(list[dict[str, Any]]):
    """The votes between songs: a list of dicts, a small table in notebooks, a DataFrame on request."""

    def to_pandas(self) -> Any:
        import pandas as pd

        columns = ["winner", "loser", "blind", "voted_at", "outcome", "winner_title", "loser_title"]
        return pd.DataFrame(self, columns=columns)

    def __repr__(self) -> str:
        if not self:
            return "Comparisons([])  # no votes yet"
        lines = [f"{len(self)} vote(s):"]
        for vote in self:
            how = "blind" if vote["blind"] else "open"
            winner = (vote["winner_title"] or vote["winner"])[:30]
            loser = (vote["loser_title"] or vote["loser"])[:30]
            said = {"tie": "tied with", "both_bad": "and both bad:"}.get(vote.get("outcome", "win"), "over")
            lines.append(f"  {winner!r} {said} {loser!r} ({how})")
        return "\n".join(lines)


@dataclass
class Spend:
    """Calls, songs and credits grouped by day, model or batch: a table, and `.to_pandas()`."""

    by: str
    rows: list[dict[str, Any]]

    COLUMNS = ("calls", "songs", "credits_estimated", "credits_measured")

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=[self.by, *self.COLUMNS])

    @property
    def total(self) -> dict[str, Any]:
        measured = [r["credits_measured"] for r in self.rows if r["credits_measured"] is not None]
        return {
            "calls": sum(r["calls"] for r in self.rows),
            "songs": sum(r["songs"] for r in self.rows),
            "credits_estimated": sum(r["credits_estimated"] for r in self.rows),
            "credits_measured": sum(measured) if measured else None,
        }

    def __repr__(self) -> str:
        lines = [f"{self.by:12} {'calls':>6} {'songs':>6} {'credits~':>9} {'measured':>9}"]
        for r in self.rows:
            measured = "" if r["credits_measured"] is None else str(r["credits_measured"])
            lines.append(
                f"{str(r[self.by])[:12]:12} {r['calls']:>6} {r['songs']:>6} {r['credits_estimated']:>9} {measured:>9}"
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in (self.by, *self.COLUMNS))
        cells = (self.by, *self.COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape('' if r[c] is None else str(r[c]))}</td>" for c in cells) + "</tr>"
            for r in self.rows
        )
        return f"<table class='ipymusicgen-spend'><tr>{head}</tr>{body}</table>"


def fts_query(text: str) -> str | None:
    """User text as a safe FTS5 query: every word must appear, the last one as a prefix (search as you type).

    Words are quoted, so FTS5 operators and column filters in the text are plain words. Whole words keep
    the index streaming newest first; only the last word pays for a prefix merge.
    """
    words = _WORD.findall(unicodedata.normalize("NFC", str(text or "")))[:32]  # "e" + U+0301 typed as "é"
    return " ".join([*(f'"{w}"' for w in words[:-1]), *(f'"{w}"*' for w in words[-1:])]) or None


def _whole(value: Any, name: str) -> int:
    """A page bound as SQLite takes it: 0 or more, at most its largest integer (a None limit: no bound)."""
    if value is None:
        return _SQLITE_MAX if name == "limit" else 0
    try:
        return max(0, min(int(value), _SQLITE_MAX))
    except (TypeError, ValueError, OverflowError):  # NaN, inf, text
        raise ValueError(f"{name} must be a whole number of songs (got {value!r})") from None


_SQLITE_MAX = 2**63 - 1


def _since(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value != value:
            raise ValueError("since must be a time, not NaN")
        return float(value)
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time()).timestamp()
    if isinstance(value, dt.timedelta):
        return time.time() - value.total_seconds()
    text = str(value).strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text)
    if match:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
        return time.time() - float(match.group(1)) * unit
    return dt.datetime.fromisoformat(text).timestamp()


def _song(row: Any) -> LibrarySong:
    return LibrarySong(
        id=row["id"], call=row["attempt_id"], take=int(row["take"] or 1), state=row["state"], title=row["title"],
        style=row["style"], created_at=row["created_at"], audio_url=row["audio_url"], cover_url=row["cover_url"],
        song_id=row["song_id"], fail_reason=row["fail_reason"], lyrics=row["lyrics"], prompt=row["prompt"],
        model=row["model"], action=row["action"], batch=row["batch"], duration_s=row["duration_s"],
        parent_id=row["parent_id"], favourite=bool(row["favourite"]), kept=bool(row["kept"]), note=row["note"],
        archive_path=row["archive_path"], archive_size=row["archive_size"], wav_path=row["wav_path"],
        cover_path=row["cover_path"], archive_error=row["archive_error"], peaks=unpack_peaks(row["peaks"]),
        stars=row["stars"], bpm=row["bpm"], musical_key=row["musical_key"], lufs=row["lufs"],
        true_peak_db=row["true_peak_db"], silence_start_s=row["silence_start_s"], silence_end_s=row["silence_end_s"],
        analysis_error=row["analysis_error"], asked_seconds=row.get("asked_seconds"),
    )  # fmt: skip


class Library:
    """Every song of a journal file. Cheap to open: every store over the file shares its one connection.

    It reads through a `Database` (`database`: its songs, and the extras its views offer): given one (a
    workspace's), the database's owner closes it; given a path (a script's own `Library(path)`), it opens a database
    of its own, closed by `close()`. `events`: the archive news of the workspace it belongs to (`Workspace.library()`
    gives its own), which its views hear; None for a library of no workspace."""

    def __init__(self, source: Database | str | Path, *, events: ArchiveEvents | None = None) -> None:
        self.events = events
        if isinstance(source, str | Path):
            from .storage.database import Database

            self.database, self._owns_database = Database(source), True
        else:
            self.database, self._owns_database = source, False
        self.store: LibraryStore = self.database.library
        self.path = self.store.path
        try:
            self.store.sync()
        except StorageUnavailableError as exc:  # another kernel holds the file: every song is still listed
            warnings.warn(
                f"The library could not index new songs in {self.path} ({exc}); they are listed, and searchable "
                "once the library is opened again.", JournalWriteWarning, stacklevel=2)  # fmt: skip

    def __repr__(self) -> str:
        count = self.store.song_count()
        return f"Library({str(self.path)!r}, {count} songs)"

    def close(self) -> None:
        """Close the database this library opened (a database it was given stays open: its owner closes it)."""
        if self._owns_database:
            self.database.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- finding -------------------------------------------------------------------------------------

    def _filter(
        self,
        text: str | None,
        state: str | None,
        favourite: bool | None,
        since: Any,
        model: str | None,
        batch: str | None,
        bpm: Any = None,
        key: str | None = None,
        lufs: Any = None,
    ) -> SongFilter:
        """The user's filters, checked and normalised, as the storage's `SongFilter`."""
        query = fts_query(text) if text else None
        return SongFilter(
            match=query,
            nothing=bool(text) and query is None,
            state=_STATE_ALIASES.get(state, state) if state else None,
            favourite=favourite,
            since=_since(since),
            model=model or None,
            batch=batch or None,
            bpm=_range("bpm", bpm),
            key=" ".join(str(key).split()) if key else None,
            lufs=_range("lufs", lufs),
        )

    def songs(
        self,
        text: str | None = None,
        state: str | None = None,
        favourite: bool | None = None,
        since: Any = None,
        model: str | None = None,
        batch: str | None = None,
        limit: int = 50,
        offset: int = 0,
        order: str = "newest",
        *,
        bpm: tuple[float | None, float | None] | None = None,
        key: str | None = None,
        lufs: tuple[float | None, float | None] | None = None,
    ) -> SongList:
        """Songs newest first (in the order the journal learnt of them), or best rated first (`order="rating"`).

        `text` is searched in title, style, lyrics and prompt (every word, as a prefix);
        `since` is a timestamp, datetime, date, timedelta, ISO text or "7d"/"12h";
        `bpm=(110, 130)`, `key="A minor"`, `lufs=(-16, -8)` filter on what `analyze()` measured (an end may be None).
        """
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")
        where = self._filter(text, state, favourite, since, model, batch, bpm, key, lufs)
        rows = self.store.songs(where, order=order, limit=_whole(limit, "limit"), offset=_whole(offset, "offset"))
        return SongList(_song(r) for r in rows)

    def count(self, text: str | None = None, state: str | None = None, favourite: bool | None = None,
              since: Any = None, model: str | None = None, batch: str | None = None, *, bpm: Any = None,
              key: str | None = None, lufs: Any = None) -> int:  # fmt: skip
        """How many songs `songs()` would page through with these filters."""
        return self.store.count(self._filter(text, state, favourite, since, model, batch, bpm, key, lufs))

    def song(self, task_id: str) -> LibrarySong:
        row = self.store.song(task_id)
        if row is None:
            raise KeyError(f"No song {task_id!r} in the library")
        return _song(row)

    def archived_path(self, task_id: str) -> Path | None:
        path = self.store.archive_path(task_id)
        return Path(path) if path and Path(path).is_file() else None

    def models(self) -> list[str]:
        return self.store.models()

    def batches(self) -> list[str]:
        return self.store.batch_names()

    # -- choosing ------------------------------------------------------------------------------------

    def favourite(self, task_id: str, on: bool = True) -> None:
        """Mark (or unmark) a favourite; kept in the journal file, so it survives restarts."""
        self.store.set_field(task_id, "favourite", 1 if on else 0)

    def note(self, task_id: str, text: str | None) -> None:
        """Attach a note to a song (None or "" removes it)."""
        self.store.set_field(task_id, "note", (text or None) and str(text)[:10_000])

    def keep(self, task_id: str) -> None:
        """Choose this take of its call: it is marked kept, the call's other takes are not."""
        song = self.song(task_id)
        for other in self.takes(task_id):
            self.store.set_field(other.id, "kept", 1 if other.id == song.id else 0)

    def rate(self, task_id: str, stars: int | None) -> None:
        """Give a song 1 to 5 stars (None takes the rating away); kept in the journal file."""
        if stars is not None and (
            isinstance(stars, bool) or not isinstance(stars, numbers.Integral) or not 1 <= stars <= 5
        ):
            raise ValueError(f"stars must be a whole number from 1 to 5, or None (got {stars!r})")
        self.store.rate(task_id, None if stars is None else int(stars))

    def vote(
        self, a: str | None = None, b: str | None = None, outcome: str = "a", *, blind: bool = True,
        wait: float | None = None, winner: str | None = None, loser: str | None = None,
    ) -> None:  # fmt: skip
        """Record a vote between songs `a` and `b`: `outcome` "a" (a preferred; `vote(winner, loser)` and
        `vote(winner=..., loser=...)` as before), "b", "tie" or "both_bad" (both count against their groups); blind
        unless `blind=False`. `wait`: seconds to wait for another kernel's write to the journal (default: the
        journal's own wait)."""
        if winner is not None or loser is not None:
            if winner is None or loser is None or a is not None or b is not None or outcome != "a":
                raise TypeError("vote(winner=..., loser=...) names both songs, and the call names no other")
            a, b = winner, loser
        if a is None or b is None:
            raise TypeError("vote() needs two songs: vote(a, b, outcome='a' | 'b' | 'tie' | 'both_bad')")
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(map(repr, OUTCOMES))} (got {outcome!r})")
        if a == b:
            raise ValueError("a vote needs two different songs")
        winner, loser = (b, a) if outcome == "b" else (a, b)
        stored = outcome if outcome in ("tie", "both_bad") else "win"
        self.store.vote(winner, loser, blind=blind, wait=wait, outcome=stored)

    def compare_results(self, *, blind: bool | None = None) -> Comparisons:
        """Every vote, oldest first, with both songs' titles: `blind=True` keeps only blind ones."""
        rows = self.store.comparisons(blind=blind)
        return Comparisons([dict(r) | {"blind": bool(r["blind"])} for r in rows])

    def leaderboard(self, by: str = "model", *, blind_only: bool = False, min_votes: int | None = None) -> Leaderboard:
        """Rank providers, models, styles, batches or songs from one fit of all the votes (`lab.ratings`:
        Bradley-Terry, Davidson's ties, "both bad" against both): each row's rank, rating and 95% interval
        (`low` to `high`, narrowing as votes accumulate), its votes, and its credits per won vote. A group with
        fewer than `min_votes` votes (default 10) shows how many more it needs instead of a rank. Models are
        named with their provider (a `provider` column). `credits_per_win` counts the service's songs in credits and
        `dollars_per_win` the engines' songs at their journalled dollar prices: two columns, never added."""
        from .lab.ratings import MIN_VOTES, Vote, leaderboard
        from .models.costs import cost_table, credits_for_model
        from .models.providers import MUSICFUL
        from .storage.provider_spend import usd_of

        if by not in LEADERBOARD_BY:
            raise ValueError(f"by must be one of {', '.join(LEADERBOARD_BY)} (got {by!r})")
        least = MIN_VOTES if min_votes is None else min_votes
        if isinstance(least, bool) or not isinstance(least, numbers.Integral) or least < 0:
            raise ValueError(f"min_votes must be a whole number, 0 or more (got {min_votes!r})")
        votes = [
            Vote(r["winner"], r["loser"], bool(r["blind"]), r["voted_at"], r["outcome"] or "win")
            for r in self.compare_results(blind=True if blind_only else None)
        ]
        ids = sorted({v.winner for v in votes} | {v.loser for v in votes})
        keys = ("provider", "model") if by == "model" else (by,)
        named = [self.store.groups(ids, key) for key in keys]
        groups = {task_id: tuple(found.get(task_id) or "(none)" for found in named) for task_id in ids}
        table = cost_table()
        service = [task_id for task_id, provider in self.store.groups(ids, "provider").items() if provider == MUSICFUL]
        calls = self.store.song_prices(service)  # in the service's credits (an engine's songs are priced in dollars)
        prices = {task_id: credits_for_model(model, table) / takes for task_id, (model, takes) in calls.items()}
        engines = [task_id for task_id in ids if task_id not in set(service)]
        dollars = {task_id: float(usd) / takes for task_id, (text, takes) in self.store.song_dollars(engines).items()
                   if (usd := usd_of(text)) is not None}  # fmt: skip  # a tampered price is no price
        return leaderboard(by, votes, groups.__getitem__, keys=keys, min_votes=int(least), cost_of=prices.get,
                           dollars_of=dollars.get)  # fmt: skip

    def takes(self, task_id: str) -> SongList:
        """Every song the same paid call made (this one included), in take order."""
        rows = self.store.takes(task_id)
        if not rows:
            return SongList([self.song(task_id)])
        return SongList(_song(r) for r in rows)

    def lineage(self, task_id: str) -> dict[str, Any]:
        """The extend/concat tree the song belongs to, from its first ancestor:
        `{"id", "title", "action", "state", "children": [...]}`; `"current": True` marks `task_id`."""
        root, seen = task_id, {task_id}
        while True:
            parent = self.store.parent(root)
            if not parent or parent in seen:
                break
            seen.add(parent)
            root = parent
        return self._subtree(root, task_id, set())

    def _subtree(self, node: str, current: str, seen: set[str]) -> dict[str, Any]:
        seen.add(node)
        info = self.store.node(node)
        children = self.store.children(node)
        return {
            "id": node,
            "title": info["title"] if info else None,
            "action": info["action"] if info else None,
            "state": info["state"] if info else "unknown",
            "current": node == current,
            "children": [self._subtree(c, current, seen) for c in children if c not in seen],
        }

    # -- spend ---------------------------------------------------------------------------------------

    def spend(self, by: str = "day") -> Spend | ProviderSpend:
        """Calls, songs and credits per day, model or batch. Credits are estimated from the price table
        (`costs.estimate_credits`) and, for batches that read the key's counts before and after, measured.
        `by="provider"`: calls, unknowns, the service's credits and the engines' dollars, each in its own column."""
        from .models.costs import estimate_credits
        from .models.providers import MUSICFUL

        if by not in SPEND_BY:
            raise ValueError(f"by must be one of {', '.join(SPEND_BY)} (got {by!r})")
        if by == "provider":  # credits and dollars in their own columns (storage/provider_spend.py)
            return ProviderSpend(spend_rows(self.store._rows, self._service_measured()))
        rows = self.store.spend(by)
        groups: dict[str, dict[str, Any]] = {}
        for r in rows:
            group = groups.setdefault(
                r["k"], {by: r["k"], "calls": 0, "songs": 0, "credits_estimated": 0, "credits_measured": None}
            )
            group["calls"] += int(r["calls"])
            group["songs"] += int(r["songs"] or 0)
            if r["p"] == MUSICFUL:  # an engine's call is priced in dollars (spend(by="provider")), never credits
                group["credits_estimated"] += int(r["calls"]) * estimate_credits({"mv": r["m"]} if r["m"] else {})
        for key_value, measured in self._measured(by, groups).items():
            groups[key_value]["credits_measured"] = measured
        return Spend(by, list(groups.values()))

    def _service_measured(self) -> int | None:
        """The service's credits measured on the key, when batch runs measured cleanly cover all of its calls."""
        runs = self._runs()
        from .models.providers import MUSICFUL

        calls = sum(int(r["calls"]) for r in self.store.spend("day") if r["p"] == MUSICFUL)
        if runs and all(run["spent"] is not None for run in runs) and sum(run["calls"] for run in runs) >= calls:
            return sum(run["spent"] for run in runs)
        return None

    def _runs(self) -> list[dict[str, Any]]:
        """Every batch run measured on the key: its spend, or None where it cannot be told (the run did not end,
        or other paid calls fell inside its window, so the key's counts moved for them too)."""
        runs = self.store.batch_runs()
        found = []
        for r in runs:
            ended = r["finished_at"] is not None and r["counts_before"] is not None and r["counts_after"] is not None
            clean = ended and int(r["paid_in_window"]) <= int(r["calls"])
            spent = int(r["counts_before"]) - int(r["counts_after"]) if clean else None
            found.append({"batch": r["batch"], "day": r["day"], "spent": spent, "calls": int(r["calls"]),
                          "models": (r["models"] or "").split(",")})  # fmt: skip
        return found

    def _measured(self, by: str, groups: dict[str, dict[str, Any]]) -> dict[str, int | None]:
        """Measured credits per group where every paid call of the group was measured; unknown (None) otherwise.

        A batch sums its runs (a re-run is measured on its own); a day or a model counts only when runs measured
        cleanly cover all of its calls (a model: runs of that one model). Estimates are never added in.
        """
        # every journal the library opens has its batch runs (migrations); a failing read is said, not hidden
        runs = self._runs()
        measured: dict[str, int | None] = {}
        for key_value, group in groups.items():
            if by == "batch":
                mine = [run for run in runs if run["batch"] == key_value]
            elif by == "day":
                mine = [run for run in runs if run["day"] == key_value]
            else:
                mine = [run for run in runs if run["models"] == [key_value]]
            covered = sum(run["calls"] for run in mine)
            if mine and all(run["spent"] is not None for run in mine) and (by == "batch" or covered >= group["calls"]):
                measured[key_value] = sum(run["spent"] for run in mine)
            elif mine and by == "batch":
                measured[key_value] = None
        return measured

    # -- archive -------------------------------------------------------------------------------------

    def failed_archives(self) -> SongList:
        return SongList(_song(r) for r in self.store.failed_archives())

    def __iter__(self) -> Iterator[LibrarySong]:
        offset = 0
        while True:
            page = self.songs(limit=500, offset=offset)
            yield from page
            if len(page) < 500:
                return
            offset += 500
