"""`CompareView`: blind A/B listening of two takes (or ABX), the vote kept in the library.

Until the vote (or the ABX answer) the page gets the labels, one opaque source name per player and a round id,
nothing else: no title, take, model, style, URL or waveform. A player's sound comes over the widget channel when
it starts (`AudioChannel`), as a blind copy that no card's file and no other player matches byte for byte, so
ABX's X cannot be matched to its twin but by ear. One shared player: switching keeps the position, a region of
the (neutral) waveform can loop, and the keys are 1/2 (3 for X) to switch, space to play, left/right to choose.
The choice is sent as an intent naming its round (a click meant for an earlier pair is ignored and said);
Python records it (`Library.vote`, blind) and only then reveals the labels and the songs' waveforms.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..errors import one_line
from ..safe_html import http_url
from ..storage.errors import StorageError
from ..storage.library import LibraryWriteError
from ._static import front_end
from .audio_channel import AudioChannel, AudioSource, BlindRound
from .song_data import compact_peaks, plain
from .text import TextRepr

if TYPE_CHECKING:
    from ..song_library import Library

MODES = ("ab", "abx")
VOTE_WAIT = 1.0
"""Seconds a vote waits for another kernel's write to the journal: an ordinary write is over by then, and a
button never hangs for the journal's full wait."""
STALE_PICK = (
    "That choice was meant for an earlier pair (or named no pair); nothing was recorded. "
    "Listen to these two and choose again."
)


@dataclass(frozen=True)
class Take:
    """What the view knows of one song (the browser gets none of it before the vote, only its sound)."""

    id: str
    title: str | None
    style: str | None
    model: str | None
    take: int | None
    source: AudioSource
    peaks: list[list[float]]


def take_of(song: Any, library: Library | None = None) -> Take:
    """A library song (or a record) as a `Take`: its archived file (the library's, when it knows one) or its
    http(s) URL is where the kernel reads its sound; a song with neither cannot be compared."""
    task_id = str(getattr(song, "id", song))
    path = getattr(song, "archive_path", None)
    peaks = getattr(song, "peaks", None)
    if library is not None and (path is None or not peaks):
        with suppress(Exception):  # a song the library never kept (the free sandbox's): the record's own
            known = library.song(task_id)
            path = path or known.archive_path
            peaks = peaks or known.peaks
    audio = http_url(getattr(song, "audio_url", None))
    if not audio and not path:
        raise ValueError(f"song {task_id!r} has no audio to play yet")
    seconds = getattr(song, "duration_s", None) or getattr(song, "duration_seconds", None)
    return Take(
        id=task_id,
        title=getattr(song, "title", None),
        style=getattr(song, "style", None),
        model=getattr(song, "model", None),
        take=getattr(song, "take", None),
        source=AudioSource(path=path, url=audio, seconds=seconds),
        peaks=compact_peaks(peaks),
    )


def two_takes(songs: list[Any], library: Library | None = None) -> list[Take]:
    """Two different songs with audio, as takes; ValueError otherwise."""
    takes = [take_of(song, library) for song in songs]
    if len(takes) != 2 or takes[0].id == takes[1].id:
        raise ValueError(f"a comparison takes two different songs (got {len(takes)})")
    return takes


class CompareView(TextRepr, anywidget.AnyWidget):
    """Blind comparison of two songs: `CompareView([song_a, song_b], library=library)`; `mode="abx"` for ABX.

    Made without songs it draws nothing until `load()` gives it two: a view that hosts a comparison (the grid's)
    makes it once, up front, since some front ends (marimo) cannot make a widget from a button's message.
    """

    _esm, _css = front_end("compare")
    data = traitlets.Dict().tag(sync=True)

    def __init__(
        self, songs: Iterable[Any] = (), *, library: Library | None = None, mode: str = "ab", seed: int | None = None
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        given = list(songs)
        takes = two_takes(given, library) if given else None  # refused before any widget is made
        super().__init__()
        self.mode = mode
        self.library = library
        self.order: list[Take] = []
        """The takes behind A and B (shuffled: what A is, the listener learns after the vote)."""
        self.x: str | None = None
        """In ABX, which of A and B the player X plays."""
        self.result: dict[str, Any] | None = None
        self.round = ""
        """This pair's round: a fresh random id per load, which a pick from the page must name."""
        self.note = ""
        self.channel = AudioChannel(self)
        self._sources: list[str] = []
        self.on_msg(self._on_msg)
        self._start(takes or [], seed)

    def load(self, songs: Iterable[Any], *, seed: int | None = None) -> None:
        """Compare two other songs here: a new blind round (shuffled again, nothing revealed)."""
        self._start(two_takes(list(songs), self.library), seed)

    def _start(self, takes: list[Take], seed: int | None) -> None:
        chance = random.Random(seed)
        self.order = chance.sample(takes, len(takes))
        self.x = chance.choice("AB") if self.mode == "abx" and takes else None
        self.result = None
        self.note = ""
        self.round = secrets.token_hex(12) if takes else ""
        self.channel.clear()  # the last round's players answer no more
        blind = BlindRound([take.source for take in self.order])  # one shape and one length for every player
        played = [0, 1, *(["AB".index(self.x)] if self.x else [])]
        self._sources = [self.channel.offer_blind(blind, index) for index in played if index < len(self.order)]
        self._publish()

    # -- the Python API ------------------------------------------------------------------------------

    def pick(self, label: str) -> dict[str, Any]:
        """The listener's choice: in A/B the take preferred ("A" or "B"); in ABX which one X is. Once only.

        A vote the journal cannot take now (another kernel holds it) is said in the view and raised here; the
        pair stays, blind, so the same choice can be made again."""
        if self.result is not None:
            return self.result
        if not self.order:
            raise ValueError("nothing to compare yet: load two songs first")
        if label not in ("A", "B"):
            raise ValueError(f"pick A or B (got {label!r})")
        chosen, other = (self.order[0], self.order[1]) if label == "A" else (self.order[1], self.order[0])
        if self.mode == "ab":
            try:
                recorded = self._vote(chosen, other)
            except (LibraryWriteError, StorageError) as exc:
                busy = isinstance(exc, LibraryWriteError) and "locked" in str(exc)
                reason = "the journal is busy: another notebook or kernel is writing to it" if busy else one_line(exc)
                self.note = f"Your choice was not saved ({reason[:300]}). The pair is kept, still blind: choose again."
                self._publish()
                raise
            self.result = {"picked": label, "winner": chosen.id, "loser": other.id, "recorded": recorded}
        else:
            self.result = {"picked": label, "x": self.x, "correct": label == self.x}
        self.note = ""
        self._publish()
        return self.result

    def _vote(self, chosen: Take, other: Take) -> bool:
        """Keep the vote (blind) in the library; False when there is none, or it never kept these songs."""
        if self.library is None:
            return False
        try:
            self.library.vote(chosen.id, other.id, blind=True, wait=VOTE_WAIT)
        except KeyError:  # a song the library never kept (the free sandbox's): the vote is said, not kept
            return False
        return True

    # -- the browser ---------------------------------------------------------------------------------

    def _publish(self) -> None:
        if not self.order:
            self.data = {}
            return
        players = [{"label": label, "source": source} for label, source in zip("ABX", self._sources, strict=False)]
        data: dict[str, Any] = {
            "mode": self.mode,
            "round": self.round,
            "players": players,
            "revealed": self.result is not None,
            "question": "Which one is X: A or B?" if self.mode == "abx" else "Which take do you prefer?",
            "note": plain(self.note, 500),
        }
        if self.result is not None:
            shown = [*self.order, *([self.order["AB".index(self.x)]] if self.x else [])]
            for player, take in zip(players, shown, strict=False):
                details = (f"take {take.take}" if take.take else None, take.model, take.style)
                player.update(
                    title=plain(take.title or "untitled", 200),
                    details=plain(" · ".join(str(p) for p in details if p), 300),
                    peaks=take.peaks,
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
        """Intents from the page: a player's audio, or a pick naming its round. Nothing raises out of here."""
        try:
            if self.channel.handle(content):
                return
            if not (isinstance(content, dict) and content.get("kind") == "pick" and content.get("label") in ("A", "B")):
                return
            if not self.order or self.result is not None:  # nothing loaded (a stale page), or chosen already
                return
            if not isinstance(content.get("round"), str) or content["round"] != self.round:
                self.note = STALE_PICK
                self._publish()
                return
            self.pick(content["label"])
        except (LibraryWriteError, StorageError):  # said in the view by pick()
            return
        except Exception as exc:  # a button never raises: said in the view
            self.note = f"That choice could not be taken ({one_line(exc)[:300]}); the pair is kept: choose again."
            with suppress(Exception):
                self._publish()

    def close(self) -> None:
        channel = getattr(self, "channel", None)  # None when the songs were refused before it was made
        if channel is not None:
            channel.clear()
        super().close()

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
