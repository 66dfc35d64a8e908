"""The watcher's paging part: what the browser holds (the visible page), and messages with only what changed.

The browser gets a snapshot of the visible page when a view asks for it, then one message per round
with the fields that changed on that page (and the header, when it changed). Newest calls come first.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..models.tasks import TaskState
from .song_data import plain

if TYPE_CHECKING:
    from .card import TaskCard

PAGE_SIZE = 10
"""Calls (a call is one paid request: usually two takes) per page; every task is polled and kept either way."""
DIFF_FIELDS_ALWAYS = ("elapsed_s",)
"""Fields that change every second: sent with a card's other changes, never on their own (the browser counts on)."""


def on_the_wire(card: dict[str, Any]) -> dict[str, Any]:
    """A card as a snapshot sends it: without `play_url` when it is the card's `audio_url` (most cards; the page
    plays `audio_url` when a card has no `play_url`), so the same URL does not cross the wire twice (figure 5)."""
    if "play_url" in card and card["play_url"] == card.get("audio_url"):
        return {k: v for k, v in card.items() if k != "play_url"}
    return card


def card_diff(held: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The fields of `new` (a card's data) the page must be told, given what it holds (`held`, updated here):
    those that changed, but `play_url` only when what the page would play (its `play_url`, else its `audio_url`)
    is not the card's. Once the page holds a `play_url` of its own, that one is kept up to date instead."""
    changed = {k: v for k, v in new.items() if k not in DIFF_FIELDS_ALWAYS and k != "play_url" and held.get(k) != v}
    held.update(changed)
    if "play_url" in new and held.get("play_url", held.get("audio_url")) != new["play_url"]:
        changed["play_url"] = held["play_url"] = new["play_url"]
    if changed:
        for key in DIFF_FIELDS_ALWAYS:
            changed[key] = held[key] = new[key]
    return changed


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class PagingPart:
    """Pages of calls, the header in words, and the numbered messages to every view."""

    page_size = PAGE_SIZE
    _cards: dict[str, TaskCard]
    _calls: list[list[str]]
    _tally: Counter[str]
    _lock: threading.RLock
    _view_lock: threading.RLock
    _closed: bool
    _page: int
    _rev: int
    _sent: dict[str, dict[str, Any]]
    _sent_header: dict[str, Any]
    _sent_groups: list[list[str]]
    _batch_line: str
    _last_error: str | None
    _retry_in: float | None
    messages_sent: int
    comm: Any
    send: Callable[..., None]

    @property
    def page(self) -> int:
        """The page the browser shows (0 = newest calls)."""
        return self._page

    hide_failed: bool

    @property
    def pages(self) -> int:
        shown = len(self._shown_calls()) if self.hide_failed else len(self._calls)
        return max(1, -(-shown // self.page_size))

    def set_hide_failed(self, on: bool) -> None:
        """Leave failed calls off the pages (or show them again); the header still counts them."""
        with self._view_lock:
            self.hide_failed = bool(on)
            self._page = min(self._page, self.pages - 1)
            self._send_snapshot()

    @property
    def visible_ids(self) -> list[str]:
        """The task ids on the shown page, in the order drawn."""
        return [task_id for group in self._page_groups() for task_id in group]

    def show_page(self, page: int) -> list[str]:
        """Show page `page` (clamped); the browser gets a snapshot of it. Returns its task ids."""
        with self._view_lock:
            self._page = max(0, min(int(page), self.pages - 1))
            self._send_snapshot()
        return self.visible_ids

    def header(self) -> dict[str, Any]:
        """The header the browser draws: counts in words, the polling error, the batch line, paging."""
        counts = self._counts()
        total = sum(counts.values())
        running = counts["queued"] + counts["writing"] + counts["preview"]
        parts = [f"{counts['ready']} ready"] if total else []
        parts += [f"{running} running"] if running else []
        parts += [f"{counts['failed']} failed"] if counts["failed"] else []
        error = ""
        if self._last_error:
            retry = f" (retrying in {self._retry_in:.3g} s)" if self._retry_in else ""
            error = plain(f"Polling failed: {self._last_error}{retry}", 500)
        return {
            "title": plural(total, "song") if total else "No songs yet",
            "counts": " · ".join(parts),
            "total": total,
            "ready": counts["ready"],
            "running": running,
            "failed": counts["failed"],
            "error": error,
            "batch": self._batch_line,
            "page": self._page,
            "pages": self.pages,
            "page_label": f"Page {self._page + 1} of {self.pages}" if self.pages > 1 else "",
            "hide_failed": self.hide_failed,
            "failed_calls": self._failed_calls() if counts["failed"] else 0,  # no failed song: no scan
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything the browser needs to draw the visible page (sent when a view asks)."""
        groups = self._page_groups()
        cards = {task_id: on_the_wire(self._cards[task_id].data()) for group in groups for task_id in group}
        return {
            "kind": "snapshot",
            "header": self.header(),
            "groups": [[cards[task_id] for task_id in group] for group in groups],
        }

    def _page_groups(self) -> list[list[str]]:
        with self._lock:
            shown = self._shown_calls()
            start = self._page * self.page_size
            return [list(group) for group in shown[start : start + self.page_size]]

    def _call_failed(self, group: list[str]) -> bool:
        return all(self._cards[task_id].state is TaskState.FAILED for task_id in group)

    def _failed_calls(self) -> int:
        with self._lock:
            return sum(1 for group in self._calls if self._call_failed(group))

    def _shown_calls(self) -> list[list[str]]:
        """The calls the pages hold, in order: all of them, or all but the failed ones."""
        with self._lock:
            ordered = self._ordered_calls()
            return [g for g in ordered if not self._call_failed(g)] if self.hide_failed else ordered

    def _shown_changed(self, task_ids: list[str]) -> None:
        """The page now holds these cards (a view's players of other cards answer no more)."""

    def _ordered_calls(self) -> list[list[str]]:
        """Newest call first; a watcher following a batch overrides this to follow the batch's table."""
        return self._calls[::-1]

    def _emit(self, message: dict[str, Any]) -> None:
        """Send one message to every view of this model (numbered, so a view can tell it missed one)."""
        self._rev += 1
        message["rev"] = self._rev
        self.messages_sent += 1
        if self.comm is not None:
            self.send(message)

    def _send_snapshot(self) -> None:
        with self._view_lock:
            message = self.snapshot()
            self._sent = {card["id"]: dict(card) for group in message["groups"] for card in group}
            self._shown_changed(list(self._sent))
            self._sent_header = message["header"]
            self._sent_groups = [[card["id"] for card in group] for group in message["groups"]]
            self._emit(message)

    def _publish(self, task_ids: Iterable[str]) -> None:
        """Tell the browser what changed: one message with the changed fields of visible cards and the header.

        A change of what the page holds (new calls on it) sends a fresh snapshot instead.
        """
        if self._closed:
            return
        with self._view_lock:
            if self._page_groups() != self._sent_groups:
                self._page = min(self._page, self.pages - 1)
                self._send_snapshot()
                return
            diffs: dict[str, dict[str, Any]] = {}
            for task_id in dict.fromkeys(task_ids):
                old = self._sent.get(task_id)
                if old is None:
                    continue  # not on the visible page: nothing to draw
                changed = card_diff(old, self._cards[task_id].data())  # `old` becomes what the page holds now
                if changed:
                    diffs[task_id] = changed
            header = self.header()
            message: dict[str, Any] = {"kind": "diff", "cards": diffs}
            if header != self._sent_header:
                message["header"] = header
                self._sent_header = header
            if diffs or "header" in message:
                self._emit(message)

    def _counts(self) -> Counter[str]:
        with self._lock:
            return Counter(self._tally)

    def _headline(self) -> str:
        header = self.header()
        text = f"TaskWatcher: {header['title']}"
        if header["counts"]:
            text += f" ({header['counts']})"
        if header["error"]:
            text += f" — {header['error']}"
        if header["batch"]:
            text += f" — {header['batch']}"
        return text
