"""`CompareView`: blind A/B listening of two takes (or ABX), the vote kept in the library.

Until the vote (or the ABX answer) the page gets the labels, one opaque source name per player and a round id,
nothing else: no title, take, model, style, URL or waveform. A player's sound comes over the widget channel when
it starts (`AudioChannel`), as a blind copy that no card's file and no other player matches byte for byte, so
ABX's X cannot be matched to its twin but by ear. One shared player: switching keeps the position, a region of
the (neutral) waveform can loop, and the keys are 1/2 (3 for X) to switch, space to play, left/right to choose
(A/B has four choices: up is a tie, down "both bad"). The choice is sent as an intent naming its round (a click
meant for an earlier pair is ignored and said); Python records it (`Library.vote`, blind) and only then reveals
the labels and the songs' waveforms. A vote from the page counts only once each side has played `min_listen_s`
(`MUSICGEN_MIN_LISTEN_S`, 5 s), counted by the kernel from the page's play reports (`listening.ListeningClock`);
until then the buttons say how long is left, and a vote sent anyway is refused and said. `pick()` from Python is
the notebook's own call and is not held back.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..errors import one_line
from ..safe_html import http_url
from ..storage.errors import StorageError
from ..storage.library import LibraryWriteError
from ._static import front_end
from .audio_channel import AudioChannel, AudioSource, BlindRound
from .listening import ListeningClock
from .song_data import compact_peaks, plain
from .text import TextRepr

if TYPE_CHECKING:
    from ..song_library import Library

MODES = ("ab", "abx")
CHOICES = MappingProxyType({"A": "a", "B": "b", "tie": "tie", "both_bad": "both_bad"})
"""What an A/B listener may choose, and the library's outcome for it (ABX takes "A" or "B" only)."""
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
    path = path or engine_answer(getattr(song, "audio_url", None))
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


def engine_answer(url: object) -> str | None:
    """The kept answer of a synchronous engine (ElevenLabs, Lyria) a record's `file:` URL names, not yet archived:
    a file of an engine's own name in the engines' private folder (`client.engine_calls.spool_dir`), nothing
    else on this machine. Its sound is then served as any other take's: a blind copy over the widget channel."""
    if not isinstance(url, str) or not url.startswith("file:"):
        return None
    from urllib.parse import unquote, urlsplit

    from ..client.engine_calls import BUILDERS

    try:
        found = Path(unquote(urlsplit(url).path)).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    folder = found.parent.name
    ours = folder == "engine-audio" or folder.startswith("ipymusicgen-engine-audio-")
    return str(found) if ours and found.name.split("-")[0] in BUILDERS and found.is_file() else None


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
        self,
        songs: Iterable[Any] = (),
        *,
        library: Library | None = None,
        mode: str = "ab",
        seed: int | None = None,
        min_listen_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        least = _seconds(min_listen_s)
        given = list(songs)
        takes = two_takes(given, library) if given else None  # refused before any widget is made
        super().__init__()
        self.min_listen_s = least
        """Seconds each side must play before the page's vote counts (default: the settings', 5 s)."""
        self._clock = clock
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
        self.listening = ListeningClock({}, {}, self.channel.delivered, clock)
        self._shown_left: dict[str, float] = {}
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
        sides = {source: "AB"[index] for source, index in zip(self._sources, played, strict=False)}
        need = dict.fromkeys("AB"[: len(self.order)], self._need())
        self.listening = ListeningClock(sides, need, self.channel.delivered, self._clock)
        self._shown_left = self.listening.left()
        self._publish()

    def _need(self) -> float:
        """Seconds each take must play: the minimum, or the shorter take's whole length when that is less (one
        figure for both: a length of its own would tell the page which take is which)."""
        lengths = [take.source.seconds for take in self.order]
        known = [float(s) for s in lengths if isinstance(s, int | float) and not isinstance(s, bool) and s > 0]
        return min([self.min_listen_s, *known])

    # -- the Python API ------------------------------------------------------------------------------

    def pick(self, label: str) -> dict[str, Any]:
        """The listener's choice: in A/B the take preferred ("A" or "B"), "tie" or "both_bad"; in ABX which one X
        is ("A" or "B"). Once only.

        A vote the journal cannot take now (another kernel holds it) is said in the view and raised here; the
        pair stays, blind, so the same choice can be made again."""
        if self.result is not None:
            return self.result
        if not self.order:
            raise ValueError("nothing to compare yet: load two songs first")
        allowed = tuple(CHOICES) if self.mode == "ab" else ("A", "B")
        if label not in allowed:
            raise ValueError(f"pick {', '.join(allowed[:-1])} or {allowed[-1]} (got {label!r})")
        if self.mode == "ab":
            first, second = self.order
            try:
                recorded = self._vote(first, second, CHOICES[label])
            except (LibraryWriteError, StorageError) as exc:
                busy = isinstance(exc, LibraryWriteError) and "locked" in str(exc)
                reason = "the journal is busy: another notebook or kernel is writing to it" if busy else one_line(exc)
                self.note = f"Your choice was not saved ({reason[:300]}). The pair is kept, still blind: choose again."
                self._publish()
                raise
            self.result = {"picked": label, "outcome": CHOICES[label], "a": first.id, "b": second.id}
            if label in ("A", "B"):
                chosen, other = (first, second) if label == "A" else (second, first)
                self.result |= {"winner": chosen.id, "loser": other.id}
            self.result["recorded"] = recorded
        else:
            self.result = {"picked": label, "x": self.x, "correct": label == self.x}
        self.note = ""
        self._publish()
        return self.result

    def _vote(self, first: Take, second: Take, outcome: str) -> bool:
        """Keep the vote (blind) in the library; False when there is none, or it never kept these songs."""
        if self.library is None:
            return False
        try:
            self.library.vote(first.id, second.id, outcome, blind=True, wait=VOTE_WAIT)
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
        if self.mode == "ab" and self.result is None:
            data["listen"] = {"need": self.listening.need, "left": self.listening.left()}
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
        said = {"tie": "You called it a tie", "both_bad": "You found both bad"}
        return f"{said.get(self.result['picked'], 'You preferred ' + self.result['picked'])}; {saved}."

    def _heard(self, content: dict[str, Any]) -> None:
        """A play report from the page (see `listening`): counted on the kernel's clock; the page is told the
        seconds left when they change by a tenth, so its buttons show what the kernel will accept."""
        if self.mode != "ab" or self.result is not None or content.get("round") != self.round or not self.round:
            return
        if not self.listening.report(content):
            return
        left = self.listening.left()
        if left != self._shown_left:
            self._shown_left = left
            with suppress(Exception):  # a view closed meanwhile: nobody is listening
                self.send({"kind": "listened", "round": self.round, "left": left})

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Intents from the page: a player's audio, a play report, or a pick naming its round. Nothing raises out of
        here."""
        try:
            if self.channel.handle(content):
                return
            if isinstance(content, dict) and content.get("kind") == "listen":
                self._heard(content)
                return
            choices = tuple(CHOICES) if self.mode == "ab" else ("A", "B")
            if not (isinstance(content, dict) and content.get("kind") == "pick" and content.get("label") in choices):
                return
            if not self.order or self.result is not None:  # nothing loaded (a stale page), or chosen already
                return
            if not isinstance(content.get("round"), str) or content["round"] != self.round:
                self.note = STALE_PICK
                self._publish()
                return
            if self.mode == "ab" and not self.listening.ready():  # the page's vote, before each side played
                self.note = self.listening.said()
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
            also = ", 'tie' or 'both_bad'" if self.mode == "ab" else ""
            return f"CompareView ({self.mode}): A and B, blind; pick with .pick('A') or .pick('B'){also}"
        return f"CompareView ({self.mode}): {self._note()}"


def _seconds(value: float | None) -> float:
    """The minimum listening time: the value given, else the settings' (`MUSICGEN_MIN_LISTEN_S`)."""
    if value is None:
        from ..workspace.session import settings

        value = settings().min_listen_s
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 3600:
        raise ValueError(f"min_listen_s is seconds from 0 to under an hour (got {value!r})")
    return float(value)


def compare(
    songs_or_ids_or_call: Any, *, mode: str = "ab", seed: int | None = None, min_listen_s: float | None = None
) -> CompareView:
    """Blind A/B (or `mode="abx"`) of two takes, the vote kept in the library of the journal in use.

    Two songs or task ids; or one call: a `generate()` result, or one task id, meaning both takes of it.
    `min_listen_s`: seconds each side must play before the page's vote counts (default: the settings', 5 s).
    """
    from ..workspace.session import library as open_library

    library = open_library()
    given = songs_or_ids_or_call
    if hasattr(given, "ids") and not isinstance(given, str | list | tuple):
        given = list(given.ids)
    if isinstance(given, str):
        given = [song.id for song in library.takes(given)]
    songs = [library.song(item) if isinstance(item, str) else item for item in given]
    return CompareView(songs, library=library, mode=mode, seed=seed, min_listen_s=min_listen_s)
