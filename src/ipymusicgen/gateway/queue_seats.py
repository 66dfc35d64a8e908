"""How many of the upstream key's seats the queue may use now: `--max-in-flight`, less what a 429 took for a while.

A 429 says the key has more generations running than the upstream allows: the seats shrink to one fewer than were
in use when it came (at least one), for `Retry-After` seconds (at least `HOLD_AT_LEAST`), then grow back by one seat
at once and one more each `GROW_EVERY` seconds until the cap is reached again (additive: a limit that was really
lowered is found again with a 429 or two, never a burst of them). The shrink is kept in the ledger, so every
replica obeys it; the times are read on an injectable clock (tests move a fake one).
"""

from __future__ import annotations

import asyncio
import time
from email.utils import parsedate_to_datetime
from typing import Protocol

HOLD_AT_LEAST = 30.0
"""Seconds the seats stay shrunk after a 429 when its Retry-After asks for less (or says nothing)."""
GROW_EVERY = 30.0
"""Seconds between one seat given back and the next."""
HOLD_AT_MOST = 600.0
"""A Retry-After longer than this is read as this (a wrong header never stops the queue for hours)."""


class Clock(Protocol):
    """Wall-clock seconds (shared by replicas on different machines) and a wait on them."""

    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def seats_now(most: int, shrunk: tuple[int, float, float] | None, now: float) -> int:
    """The seats usable at `now`: `most`, or what a 429 left (`shrunk`: seats, when, for how long) growing back."""
    if shrunk is None:
        return most
    low, at, hold = shrunk
    if now < at + hold:
        return max(1, min(low, most))
    return max(1, min(most, low + 1 + int((now - at - hold) // GROW_EVERY)))


def shrunk_to(most: int, shrunk: tuple[int, float, float] | None, in_use: int, now: float) -> int:
    """The seats after a 429 that came with `in_use` seats taken (this call's too): one fewer, and never more than
    what is usable now (a second 429 while shrunk shrinks further)."""
    return max(1, min(in_use, seats_now(most, shrunk, now)) - 1)


def hold_for(retry_after: str | None, now: float | None = None) -> float:
    """How long a 429 keeps the seats shrunk: its Retry-After in seconds or as an HTTP-date (RFC 9110: counted from
    `now`, wall-clock seconds), within [HOLD_AT_LEAST, HOLD_AT_MOST]; a value that is neither is the least hold."""
    try:
        asked = float(retry_after) if retry_after is not None else 0.0
    except ValueError:
        asked = _until_date(retry_after or "", time.time() if now is None else now)
    if asked != asked:  # NaN
        asked = 0.0
    return min(max(asked, HOLD_AT_LEAST), HOLD_AT_MOST)


def _until_date(text: str, now: float) -> float:
    """Seconds from `now` to an HTTP-date (0 for anything that is not one)."""
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0.0
    return when.timestamp() - now if when.tzinfo is not None else 0.0
