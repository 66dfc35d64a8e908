"""Test helpers: a hand-moved sandbox clock, bounded waits for background threads, widget markup."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import ipywidgets as w

HOSTILE = "<img src=x onerror=alert(1)>"
WAIT = 20.0
"""Generous bound for anything a background thread has to do on a slow, shared machine."""


class ManualClock:
    """A clock the test moves: the sandbox's task stages follow it, not the wall clock."""

    def __init__(self, stage: float) -> None:
        self.now = 1000.0
        self.stage = stage

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def stages(self, count: float = 1) -> None:
        """Move on by `count` stages (plus a little, so a boundary is passed, not touched)."""
        self.advance(count * self.stage + 0.01)


class FakeSleep:
    """A client's sleep that records each wait and rests only a moment (the sandbox's clock still moves on)."""

    def __init__(self, rest: float = 0.02) -> None:
        self.waits: list[float] = []
        self.rest = rest

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        time.sleep(min(seconds, self.rest))

    @property
    def total(self) -> float:
        return sum(self.waits)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll a condition with a generous bound (never a timed assertion: only a hang fails it)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for: {what}")
        time.sleep(0.02)


def advance_until_done(batches: Any, clock: ManualClock, sandbox: Any) -> None:
    """Move a frozen sandbox clock on, two stages at a time, each time the batch (or every one of a list) has
    caught up: a polling round after the move, or done. Waits on the sandbox's count of task reads, not on time."""
    every = list(batches) if isinstance(batches, list | tuple) else [batches]

    def done() -> bool:
        return all(b.done for b in every)

    while not done():
        before = sandbox.request_counts().get("/v1/music/tasks", 0)
        clock.stages(2)
        wait_until(
            lambda b=before: done() or sandbox.request_counts().get("/v1/music/tasks", 0) >= b + 2, "a polling round"
        )


def wait_until_serving(
    url: str,
    process: subprocess.Popen[bytes],
    timeout: float = WAIT,
    *,
    method: str = "GET",
    said: Callable[[], str] = str,
) -> httpx.Response:
    """Wait until a server process answers HTTP at `url` (any status; its answer is returned); fail at once, with
    what `said()` returns (the process's words), if the process exits first or the bound passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.request(method, url, timeout=1.0)
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the HTTP server did not start: {said()}") from None
            time.sleep(0.1)


def html_values(widget: w.Widget) -> list[str]:
    """Every HTML widget value in a widget tree (what a browser would render as markup)."""
    found = [widget.value] if isinstance(widget, w.HTML) else []
    for child in getattr(widget, "children", ()):
        found += html_values(child)
    return found


class AudioPage:
    """Stands in for a view's front end (`monkeypatch.setattr(view, "send", page.send)`): what the kernel sends it,
    content and buffers, and a way to wait for the kernel's answer to a card player's request for its audio."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], list[bytes]]] = []
        self._changed = threading.Condition()

    def send(self, content: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        with self._changed:
            self.sent.append((content, list(buffers or [])))
            self._changed.notify_all()

    def audio(self, source: str) -> list[tuple[dict[str, Any], list[bytes]]]:
        """Every audio answer sent for `source` (the view's other messages are not audio)."""
        return [(c, b) for c, b in self.sent if c.get("kind") == "audio" and c.get("source") == source[:100]]

    def answer(self, source: str, timeout: float = WAIT) -> tuple[dict[str, Any], list[bytes]]:
        """The kernel's first answer to the page's request for `source`, waited for (on state, bounded)."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.audio(source), timeout), f"no audio answer for {source!r}"
            return self.audio(source)[0]


def joined(worker: Any, timeout: float = 60.0) -> bool:
    """`worker.join(timeout)`, and when it fails, why: stopped or not, its queue, its errors and its thread's stack
    (CI once saw an archiver's join(30) fail with nothing more to go on)."""
    if worker.join(timeout):
        return True
    import sys
    import traceback

    thread = getattr(worker, "_thread", None)
    frame = sys._current_frames().get(thread.ident) if thread is not None and thread.ident else None
    stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no thread)"
    raise AssertionError(
        f"{worker!r} not done in {timeout} s: stopped={getattr(worker, 'stopped', None)}, "
        f"unfinished={worker._queue.unfinished_tasks}, errors={getattr(worker, 'errors', None)}\n{stack}"
    )
