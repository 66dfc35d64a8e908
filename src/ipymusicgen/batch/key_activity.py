"""What the paid work on one key shares within a workspace: the runs under way (a run another overlapped cannot
measure its spend from the key's counts: they moved for both), the 429s in a row (every batch on a key backs off
together) and the batch rows whose create is being sent right now.

One `KeyActivity` per workspace (`Workspace.keys`, reached by a client through its wiring): the batch engine and the
agent server's budget both ask it, and two workspaces on two journal files share none of it, as two kernels do not.
Keys are fingerprints (`batch.prepare.key_fingerprint`), never the key.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Protocol


class Window(Protocol):
    """A stretch of paid work on a key (a batch run, an agent's call): told when another one overlapped it."""

    overlapped: bool


class KeyActivity:
    """Runs under way, 429 streaks and rows being sent, per key fingerprint; every method under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, list[Window]] = {}
        self._streaks: dict[str, int] = {}
        self._sending: set[Hashable] = set()

    def __repr__(self) -> str:
        with self._lock:
            return f"KeyActivity({sum(map(len, self._running.values()))} running, {len(self._sending)} rows sending)"

    # -- overlapping runs -----------------------------------------------------------------------------

    def begin(self, key: str, window: Window) -> None:
        """`window` starts on `key` (its counts just read): it and every one already there overlap."""
        with self._lock:
            others = self._running.setdefault(key, [])
            if others:
                window.overlapped = True
                for other in others:
                    other.overlapped = True
            if not any(other is window for other in others):
                others.append(window)

    def end(self, key: str, window: Window) -> None:
        """`window` is done with `key` (its counts after read, or none to read)."""
        with self._lock:
            others = [other for other in self._running.get(key, []) if other is not window]
            if others:
                self._running[key] = others
            else:
                self._running.pop(key, None)

    def running(self, key: str) -> int:
        with self._lock:
            return len(self._running.get(key, []))

    # -- 429s in a row ------------------------------------------------------------------------------------

    def rate_limited(self, key: str) -> int:
        """One more 429 on `key`; the streak so far."""
        with self._lock:
            streak = self._streaks[key] = self._streaks.get(key, 0) + 1
            return streak

    def accepted(self, key: str) -> None:
        """A create was accepted on `key`: the streak starts again."""
        with self._lock:
            self._streaks.pop(key, None)

    # -- rows being sent -----------------------------------------------------------------------------

    def sending(self, row: Hashable) -> None:
        """A batch row's create is going out now (`row`: its store, batch name and index)."""
        with self._lock:
            self._sending.add(row)

    def sent(self, row: Hashable) -> None:
        with self._lock:
            self._sending.discard(row)

    def is_sending(self, row: Hashable) -> bool:
        with self._lock:
            return row in self._sending
