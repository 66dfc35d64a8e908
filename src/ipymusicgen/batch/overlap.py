"""Which batch runs share a key at once in this process: a run that another overlapped cannot measure its spend
from the key's counts (they moved for both), so its budget counts its own accepted calls at their price and it
says no measured spend or price (`Library.spend()` reads the journal's calls in a run's window the same way)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .result import Batch

_lock = threading.Lock()
_running: dict[str, list[Batch]] = {}
"""Batches running per key fingerprint (never the key), from their counts read before to their counts read after."""


def begin(key: str, batch: Batch) -> None:
    """`batch` starts on `key` (its counts just read): it and every run already there overlap."""
    with _lock:
        others = _running.setdefault(key, [])
        if others:
            batch.overlapped = True
            for other in others:
                other.overlapped = True
        others.append(batch)


def end(key: str, batch: Batch) -> None:
    """`batch` is done with `key` (its counts after read, or none to read)."""
    with _lock:
        others = _running.get(key, [])
        if batch in others:
            others.remove(batch)
        if not others:
            _running.pop(key, None)
