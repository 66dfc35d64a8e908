"""Measuring what paid calls cost, off every caller's path: one daemon thread per gateway, one reading per quiet spell.

A reading of the upstream's credits settles a call only when it is the one call between two readings that no
call overlapped, on any replica (`GatewayLedger.meter`: the windows live in it), and never below its estimate.
Calls that follow each other closely leave each other's readings ambiguous anyway, so a reading after each of
them would be an upstream request per paid call spent on nothing: the measurer waits until no paid call has
ended for `QUIET` seconds, then takes ONE reading for the latest. A lone call (the usual notebook case) is still
measured, `QUIET` seconds after its answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

QUIET = 0.05
"""Seconds without a new paid call before the measurer reads the upstream's credits."""


class Measurer:
    def __init__(self, measure: Callable[[int], None], quiet: float = QUIET) -> None:
        self._measure = measure
        self._quiet = quiet
        self._lock = threading.Lock()
        self._latest: int | None = None
        self._ended_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-measurer", daemon=True)
        """Started by the first paid call: a gateway that never takes one holds no thread."""

    def after(self, call_id: int) -> None:
        """A paid call was answered: measure it (or a later one) once things are quiet."""
        with self._lock:
            self._latest = call_id
            self._ended_at = time.monotonic()
            if not self._thread.is_alive() and not self._stop.is_set():
                self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop at once (a reading under way finishes; nothing new is read)."""
        with self._lock:
            self._stop.set()
            started = self._thread.is_alive()
        self._wake.set()
        if started:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            while not self._stop.is_set():  # wait for a quiet spell; each new call pushes it back
                with self._lock:
                    left = self._ended_at + self._quiet - time.monotonic()
                    call_id = self._latest if left <= 0 else None
                    if call_id is not None:
                        self._latest = None
                if call_id is not None:
                    self._measure(call_id)
                    break
                if left > 0 and self._stop.wait(left):
                    return
                if self._latest is None:
                    break
