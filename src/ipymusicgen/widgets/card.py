"""`TaskCard`: what the kernel keeps of one watched song, and the card dict the front end draws from it.

Not a widget: the watcher is one anywidget model for all its songs, and a card is a few plain
attributes (the latest record, when it started and finished, the last note) turned into the shared
card dict by `song_data.song_card`. Text-only front ends and tests read `summary()` and `text`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

from ..models.providers import SYNCHRONOUS
from ..models.tasks import TaskState
from ..safe_html import esc
from .song_data import Record, card_summary, song_card


class CardActions(Protocol):
    """What a card's buttons ask of its watcher (which owns the client and the rules)."""

    def run_action(self, name: str, task_id: str) -> Any: ...


class TaskCard:
    """One watched task: its latest record, its place in a call (take 1 or 2) and a note for the user."""

    __slots__ = (
        "_finished",
        "_record",
        "_watcher",
        "call",
        "extra",
        "favourite",
        "kept",
        "note",
        "retried",
        "retryable",
        "started",
        "take",
        "task_id",
        "v2",
    )

    def __init__(
        self, task_id: str, *, v2: bool = False, call: str = "", take: int = 1, watcher: CardActions | None = None
    ) -> None:
        self.task_id = task_id
        self._watcher = watcher
        self.v2 = v2
        self.call = call
        self.take = take
        self.note = ""
        self.kept = False
        self.favourite = False
        self.retryable = False
        """Its call's request is known here, so a failed call can be sent again (the watcher's `retry`)."""
        self.retried = False
        """Its failed call was sent again (the new songs are watched as their own call)."""
        self.extra: dict[str, Any] | None = None
        """Card fields others know better (peaks and the archived path from the library); None while empty."""
        self.started = time.monotonic()
        self._finished: float | None = None
        self._record: Record | None = None

    @property
    def record(self) -> Record | None:
        return self._record

    @property
    def state(self) -> TaskState | None:
        return self._record.state if self._record is not None else None

    @property
    def audio_url(self) -> str | None:
        """The URL the card's player plays (http(s) only, none for a failed song), or None."""
        return self.data()["audio_url"]

    @property
    def message(self) -> str:
        """The card's note: what its last action did, or why it failed (plain text)."""
        return self.note

    def run_action(self, name: str) -> Any:
        """Do what a card button does ("extend", "concat", "download", "export", "favourite", "copy_id"); the result
        or None."""
        if self._watcher is None:
            self.note = "This card is not attached to a watcher."
            return None
        return self._watcher.run_action(name, self.task_id)

    def update(self, record: Record) -> None:
        """Keep a new record of this task; the elapsed time stops when it first reports finished."""
        self._record = record
        if record.state.finished and self._finished is None:
            self._finished = time.monotonic()

    def elapsed(self) -> float:
        end = self._finished if self._finished is not None else time.monotonic()
        return end - self.started

    def data(self, **extra: Any) -> dict[str, Any]:
        """The card dict of docs/frontend.md for this task (what the browser draws)."""
        fields: dict[str, Any] = {
            "id": self.task_id,
            "call": self.call,
            "take": self.take,
            "elapsed_s": self.elapsed(),
            "favourite": self.favourite,
            "kept": self.kept,
            "note": self.note,
            "model": "v2" if self.v2 else "",
            "retryable": self.retryable and not self.retried,
            "retried": self.retried,
        }
        fields.update(self.extra or {})
        fields.update(extra)
        audio = getattr(self._watcher, "card_audio", None)  # where its player reads: the watcher's decision
        record = self._record
        if (
            audio is not None
            and record is not None
            and "play_url" not in fields
            and record.state is not TaskState.FAILED
        ):
            fields.update(audio.fields(self.task_id, path=fields.get("archived_path") or None, url=record.audio_url))
        return engine_card(record, song_card(self._record, **fields))

    @property
    def text(self) -> str:
        """Everything the card shows, as plain text (title, chips, state, reason, lyrics, note)."""
        data = self.data()
        parts = [
            data["title"] or "Untitled",
            " · ".join(data["style_chips"]),
            data["state_label"],
            data["fail_reason"],
            data["lyrics"],
            data["note"],
        ]
        return "\n".join(p for p in parts if p)

    @property
    def html(self) -> str:
        """The card as static, escaped HTML (for nbconvert-style fallbacks and checks): text only, no links."""
        return "<br>".join(esc(line) for line in self.text.splitlines())

    def summary(self) -> str:
        """One plain-text line: title, take, state, duration, audio URL."""
        if self._record is None:
            return f"{self.task_id}: submitted, no status yet"
        return card_summary(self.data())

    def __repr__(self) -> str:
        return f"TaskCard({self.task_id}: {self.summary()})"


LINES_MAX = 2000
"""Lines a card times at most (the lyrics are bounded too): more is no song."""


def engine_card(record: Record | None, card: dict[str, Any]) -> dict[str, Any]:
    """A synchronous engine's song: "Composing" while its one call runs in the background (the badge adds the
    elapsed time), and its lyrics' lines timed from the word timestamps the engine returned (`line_times`)."""
    extra = (getattr(record, "__pydantic_extra__", None) or {}) if record is not None else {}
    if extra.get("provider") in SYNCHRONOUS and card["state"] in ("queued", "writing"):
        card["state_label"] = "Composing"
    card["line_times"] = line_times(card["lyrics"], extra.get("timestamps"))
    return card


def _ms(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number / 1000 if math.isfinite(number) and 0 <= number < 1e9 else None


def line_times(lyrics: str, timestamps: Any) -> list[list[float] | None]:
    """For each line of `lyrics` (as the card shows them, split on newlines): `[start_s, end_s]` of its words,
    taken in order from the engine's `(word, start_ms, end_ms)`; None for a blank line or one past the words.
    Hostile entries (NaN, negative, huge, not numbers) end the timing there; nothing but numbers comes out."""
    if not lyrics or not isinstance(timestamps, list | tuple):
        return []
    words: list[tuple[float, float]] = []
    for item in timestamps[: LINES_MAX * 50]:
        if not isinstance(item, list | tuple) or len(item) != 3:
            break
        start, end = _ms(item[1]), _ms(item[2])
        if start is None or end is None or end < start:
            break
        words.append((start, end))
    found: list[list[float] | None] = []
    at = 0
    for line in lyrics.split("\n")[:LINES_MAX]:
        count = len(line.split())
        if not count or at + count > len(words):
            found.append(None)
            at += count
            continue
        found.append([round(words[at][0], 3), round(words[at + count - 1][1], 3)])
        at += count
    return found if any(found) else []
