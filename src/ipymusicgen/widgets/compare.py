"""`CompareView`: blind A/B listening of two takes (or ABX), the vote kept in the library.

Before the vote the browser gets only the labels, the audio URLs and the waveforms, in a shuffled order:
no title, take, model or style. One shared player: switching A and B keeps the position, a region of the
waveform can loop, and the keys are 1/2 (3 for X) to switch, space to play, left/right to choose. The
choice is sent as an intent; Python records it (`Library.vote`, blind) and only then reveals the labels.
ABX asks which of A and B the third player X is: a check of whether the two can be told apart at all.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..safe_html import http_url
from ._static import css, esm
from .song_data import compact_peaks, plain
from .text import TextRepr

if TYPE_CHECKING:
    from ..library import Library

MODES = ("ab", "abx")


@dataclass(frozen=True)
class Take:
    """What the view knows of one song (only `audio` and `peaks` reach the browser before the vote)."""

    id: str
    title: str | None
    style: str | None
    model: str | None
    take: int | None
    audio: str
    peaks: list[list[float]]


def take_of(song: Any) -> Take:
    """A library song (or a record) as a `Take`; a song without an http(s) audio URL cannot be compared."""
    audio = http_url(getattr(song, "audio_url", None))
    if not audio:
        raise ValueError(f"song {getattr(song, 'id', song)!r} has no audio to play yet")
    return Take(
        id=str(song.id),
        title=getattr(song, "title", None),
        style=getattr(song, "style", None),
        model=getattr(song, "model", None),
        take=getattr(song, "take", None),
        audio=audio,
        peaks=compact_peaks(getattr(song, "peaks", None)),
    )


def two_takes(songs: list[Any]) -> list[Take]:
    """Two different songs with audio, as takes; ValueError otherwise."""
    takes = [take_of(song) for song in songs]
    if len(takes) != 2 or takes[0].id == takes[1].id:
        raise ValueError(f"a comparison takes two different songs (got {len(takes)})")
    return takes


class CompareView(TextRepr, anywidget.AnyWidget):
    """Blind comparison of two songs: `CompareView([song_a, song_b], library=library)`; `mode="abx"` for ABX.

    Made without songs it draws nothing until `load()` gives it two: a view that hosts a comparison (the grid's)
    makes it once, up front, since some front ends (marimo) cannot make a widget from a button's message.
    """

    _esm = traitlets.Unicode(esm("compare")).tag(sync=True)
    _css = traitlets.Unicode(css("compare")).tag(sync=True)
    data = traitlets.Dict().tag(sync=True)

    def __init__(
        self, songs: Iterable[Any] = (), *, library: Library | None = None, mode: str = "ab", seed: int | None = None
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        given = list(songs)
        takes = two_takes(given) if given else None  # refused before any widget is made
        super().__init__()
        self.mode = mode
        self.library = library
        self.order: list[Take] = []
        """The takes behind A and B (shuffled: what A is, the listener learns after the vote)."""
        self.x: str | None = None
        """In ABX, which of A and B the player X plays."""
        self.result: dict[str, Any] | None = None
        self.on_msg(self._on_msg)
        self._start(takes or [], seed)

    def load(self, songs: Iterable[Any], *, seed: int | None = None) -> None:
        """Compare two other songs here: a new blind round (shuffled again, nothing revealed)."""
        self._start(two_takes(list(songs)), seed)

    def _start(self, takes: list[Take], seed: int | None) -> None:
        chance = random.Random(seed)
        self.order = chance.sample(takes, len(takes))
        self.x = chance.choice("AB") if self.mode == "abx" and takes else None
        self.result = None
        self._publish()

    # -- the Python API ------------------------------------------------------------------------------

    def pick(self, label: str) -> dict[str, Any]:
        """The listener's choice: in A/B the take preferred ("A" or "B"); in ABX which one X is. Once only."""
        if self.result is not None:
            return self.result
        if not self.order:
            raise ValueError("nothing to compare yet: load two songs first")
        if label not in ("A", "B"):
            raise ValueError(f"pick A or B (got {label!r})")
        chosen, other = (self.order[0], self.order[1]) if label == "A" else (self.order[1], self.order[0])
        if self.mode == "ab":
            recorded = self.library is not None
            if self.library is not None:
                try:
                    self.library.vote(chosen.id, other.id, blind=True)
                except KeyError:  # a song the library never kept (the free sandbox's): the vote is said, not kept
                    recorded = False
            self.result = {"picked": label, "winner": chosen.id, "loser": other.id, "recorded": recorded}
        else:
            self.result = {"picked": label, "x": self.x, "correct": label == self.x}
        self._publish()
        return self.result

    # -- the browser ---------------------------------------------------------------------------------

    def _publish(self) -> None:
        if not self.order:
            self.data = {}
            return
        labels = ("A", "B")
        players = [
            {"label": label, "audio": take.audio, "peaks": take.peaks}
            for label, take in zip(labels, self.order, strict=True)
        ]
        if self.x is not None:
            source = self.order[labels.index(self.x)]
            players.append({"label": "X", "audio": source.audio, "peaks": source.peaks})
        data: dict[str, Any] = {"mode": self.mode, "players": players, "revealed": self.result is not None}
        data["question"] = "Which one is X: A or B?" if self.mode == "abx" else "Which take do you prefer?"
        if self.result is not None:
            for player, take in zip(players, self.order, strict=False):
                player.update(
                    title=plain(take.title or "untitled", 200),
                    details=plain(
                        " · ".join(
                            str(p) for p in (f"take {take.take}" if take.take else None, take.model, take.style) if p
                        ),
                        300,
                    ),
                )
            data["picked"] = self.result["picked"]
            data["note"] = self._note()
        self.data = data

    def _note(self) -> str:
        assert self.result is not None
        if self.mode == "abx":
            right = "right" if self.result["correct"] else "not right"
            return f"X was {self.x}: your answer was {right}."
        saved = (
            "kept in the library (blind vote)"
            if self.result["recorded"]
            else "not kept (these songs are not in the library)"
        )
        return f"You preferred {self.result['picked']}; {saved}."

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not (isinstance(content, dict) and content.get("kind") == "pick" and content.get("label") in ("A", "B")):
            return
        if self.order:  # a pick with nothing loaded (a stale page) changes nothing
            self.pick(content["label"])

    def __repr__(self) -> str:
        if not self.order:
            return f"CompareView ({self.mode}): nothing to compare yet"
        if self.result is None:
            return f"CompareView ({self.mode}): A and B, blind; pick with .pick('A') or .pick('B')"
        return f"CompareView ({self.mode}): {self._note()}"


def compare(songs_or_ids_or_call: Any, *, mode: str = "ab", seed: int | None = None) -> CompareView:
    """Blind A/B (or `mode="abx"`) of two takes, the vote kept in the library of the journal in use.

    Two songs or task ids; or one call: a `generate()` result, or one task id, meaning both takes of it.
    """
    from ..session import library as open_library

    library = open_library()
    given = songs_or_ids_or_call
    if hasattr(given, "ids") and not isinstance(given, str | list | tuple):
        given = list(given.ids)
    if isinstance(given, str):
        given = [song.id for song in library.takes(given)]
    songs = [library.song(item) if isinstance(item, str) else item for item in given]
    return CompareView(songs, library=library, mode=mode, seed=seed)
