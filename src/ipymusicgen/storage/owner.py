"""Which process owns a paid attempt or a batch row, and whether it still runs.

A `pending` attempt whose process died (kill -9, a kernel restart) is in doubt; one of a live process in
another kernel is not. The process start time (from /proc, with the boot id) tells a reused pid apart.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_started(pid: int) -> str | None:
    """A token for when `pid` started (boot id + start tick), so a reused pid is not taken for the old one.

    None where /proc does not say (not Linux) or the process is gone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):  # a zombie has died; only its parent has not looked yet
        return None
    return f"{_boot_id()}:{fields[19]}"


@dataclass(frozen=True)
class Owner:
    """The process that sent a paid request."""

    host: str
    pid: int
    started: str | None

    @classmethod
    def current(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), process_started(os.getpid()))

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def is_alive(self) -> bool:
        """Whether the process still runs; True when it cannot be told (another machine, Windows)."""
        if self.host != socket.gethostname():
            return True
        if Path("/proc/self/stat").exists():
            now = process_started(self.pid)
            return now is not None and (self.started is None or now == self.started)
        if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
            return True
        try:
            os.kill(self.pid, 0)  # POSIX without /proc (macOS): signal 0 only asks whether it exists
        except ProcessLookupError:
            return False
        except OSError:  # PermissionError: it exists, as another user
            return True
        return True
