"""How long each side of a blind comparison has played, counted on the kernel's clock, so a page cannot fake it.

Music Arena counts a vote only after the listener has heard each side for a while. The page could say "I listened"
in one message; so the kernel counts instead. While the page's player plays, it reports `{"kind": "listen",
"round", "source", "playing", "at"}` (its player's opaque source and position) a few times a second and when it
plays, pauses or switches. Each report credits the time since the page's previous report to the source that report
named as playing, but only:

- time that passed on the kernel's clock between the two reports (a page cannot report faster than time goes; and
  as one player plays at a time, two sides together never get more than the time that passed),
- no more than the player's position moved in that time (a paused or stalled player earns nothing),
- no more than `MAX_STEP` per report (a page that stops reporting earns nothing for the silence),
- for a source whose sound the kernel has handed over (`AudioChannel.delivered`): a player with no sound earns none.

A forged page can at best claim what a listener gets by playing: each side's seconds, in real time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

MAX_STEP = 1.0
"""The most seconds one report credits: the page reports about four times a second while playing."""


class ListeningClock:
    """The seconds each labelled side has played in one round, credited from the page's reports (see the module).

    `sides` maps each source name to its label ("A", "B"; an ABX "X" plays one of them: it is given that one's
    label); `need` is the seconds each label must reach; `delivered` says which sources the kernel handed over."""

    def __init__(
        self,
        sides: Mapping[str, str],
        need: Mapping[str, float],
        delivered: Callable[[], Collection[str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sides = dict(sides)
        self.need = {label: max(0.0, float(seconds)) for label, seconds in need.items()}
        self.heard = dict.fromkeys(self.need, 0.0)
        self._delivered = delivered
        self._clock = clock
        self._last: tuple[str, bool, float, float] | None = None  # source, playing, position, kernel time

    def report(self, content: Mapping[str, Any]) -> bool:
        """Take one report from the page (already known to be this round's); True when a label's seconds moved."""
        source, playing, at = content.get("source"), content.get("playing"), content.get("at")
        if not isinstance(source, str) or source not in self.sides or not isinstance(playing, bool):
            return False
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at) or at < 0:
            return False
        now = self._clock()
        moved = False
        if self._last is not None:
            last_source, last_playing, last_at, last_time = self._last
            if last_playing and last_source in self._delivered():
                credit = min(now - last_time, float(at) - last_at, MAX_STEP)
                if credit > 0:
                    self.heard[self.sides[last_source]] += credit
                    moved = True
        self._last = (source, playing, float(at), now)
        return moved

    def left(self) -> dict[str, float]:
        """Seconds each label still has to play, to the tenth (rounded up, so 0 means done)."""
        return {
            label: math.ceil(max(0.0, self.need[label] - self.heard[label]) * 10 - 1e-9) / 10 for label in self.need
        }

    def ready(self) -> bool:
        return all(seconds <= 0 for seconds in self.left().values())

    def said(self) -> str:
        """What a vote too early is told: how long each side still needs."""
        waiting = ", ".join(f"{label} {math.ceil(seconds)} s more" for label, seconds in self.left().items() if seconds)
        needed = max(self.need.values(), default=0.0)
        return (
            f"Not counted yet: a vote counts once each take has played {needed:g} s ({waiting}). "
            "Keep listening, then choose."
        )
