"""`TaskWatcher`: cards for any number of v1/v2 tasks, polled in one batched query per interval.

The polling thread only sets widget traits (never prints or displays), so nothing it does can land
in the wrong cell. It stops when every task is finished, on `stop()`/`close()`, and backs off
(exponentially, capped) while the service errors, showing the error in the cards.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import ipywidgets as w

from ..client import MusicClient, _retry_after
from ..errors import MusicGenError, WaitTimeoutError
from ..models import PROMPT_MAX, TITLE_MAX, TaskRecord, V2Song
from ..safe_html import note_html
from ..session import register_watcher, unregister_watcher
from ..tasks import TaskSet, TaskState
from .card import TaskCard, record_summary
from .generate import GenerateForm
from .text import TextRepr
from .v2 import V2Form

Record = TaskRecord | V2Song
MAX_BACKOFF = 60.0
"""Longest wait between polls while the service keeps failing."""
PAGE_SIZE = 50
"""Cards a watcher builds at first and per "show more" click; every task is polled and kept either way."""


def backoff(interval: float, failures: int) -> float:
    """The wait after `failures` failed rounds in a row: interval x 2^failures, capped."""
    if failures <= 0:
        return interval
    return min(interval * 2**failures, max(MAX_BACKOFF, interval))


def extend_fields(record: Record) -> dict[str, Any]:
    """Form values that continue a finished song at its end, in its style and under its title.

    Lyrics are cleared: whatever an earlier request left in a shared form belongs to another song.
    """
    at = record.duration_seconds
    common = {"title": (record.title or "")[:TITLE_MAX], "lyrics": None}
    if isinstance(record, V2Song):
        fields = {"is_auto": 0, "continue_song_id": record.id, "continue_at": int(at) if at else None, **common}
        if record.style:
            fields["prompt"] = record.style[:PROMPT_MAX]
        return fields
    continuation = {"continue_song_id": record.song_id or record.id, "continue_at": at, "style": record.style}
    return {"action": "extend", **continuation, **common}


class TaskWatcher(TextRepr, w.VBox):
    """Watch tasks until they finish: one card per task, polled in the background.

    >>> watcher = TaskWatcher(client.generate(action="auto", style="lo-fi").ids)
    >>> watcher                      # shows the cards; records fill in as the service reports
    >>> songs = watcher.wait()       # or block until all are finished

    Only the first `page_size` tasks get a card at first (a card is a dozen widgets); a "show more"
    button builds the next page. Every task is polled and its record kept whether it has a card or not.
    """

    page_size = PAGE_SIZE

    def __init__(
        self,
        ids: Iterable[str] = (),
        *,
        v2_ids: Iterable[str] = (),
        client: MusicClient | None = None,
        interval: float | None = None,
        autostart: bool = True,
    ) -> None:
        if client is None:
            from ..session import get_client

            client = get_client()
        self._client = client
        self.interval = float(client.settings.poll_interval if interval is None else interval)
        self.download_dir: str | Path = "."
        self._autostart = autostart
        self._tasks = TaskSet()
        self._cards: dict[str, TaskCard] = {}
        self._lock = threading.RLock()  # guards the thread handle and the start/exit decision
        self._poll_lock = threading.Lock()  # one polling round at a time
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._closed = False
        self._failures = 0
        self._last_error: str | None = None
        self._server_wait: float | None = None
        """Seconds a rate-limited service asked for (Retry-After); the thread waits at least that long."""
        self._form_provider: Callable[[bool], GenerateForm | V2Form] | None = None
        """Set by the Studio: which form an extend should prefill (argument: is it a v2 song)."""
        self._limit = self.page_size
        """How many tasks (from the first) have a card; raised by `show_more()`."""
        self._summary = w.HTML()
        self._box = w.VBox()
        self._more = w.Button(description="Show more", icon="chevron-down", layout=w.Layout(display="none"))
        self._more.on_click(lambda _button: self.show_more())
        super().__init__([self._summary, self._box, self._more])
        self.add_class("ipymusicgen-watcher")
        if self.comm is not None:  # the front end closing the widget (e.g. the model is deleted) ends polling too
            self.comm.on_close(self._front_end_closed)
        register_watcher(self)
        self.add(ids)
        self.add(v2_ids, v2=True)
        self._refresh_summary()

    # -- public API ------------------------------------------------------------------------------------

    @property
    def client(self) -> MusicClient:
        return self._client

    @property
    def records(self) -> list[Record]:
        """The latest record of each task that has reported (in the order the tasks were added)."""
        found = (self._tasks.get(task_id) for task_id in self._tasks.ids)
        return [r for r in found if r is not None]

    @property
    def done(self) -> bool:
        """True when every watched task is complete or failed."""
        return self._tasks.all_finished

    @property
    def ids(self) -> list[str]:
        return self._tasks.ids

    @property
    def cards(self) -> dict[str, TaskCard]:
        """The cards built so far (the shown pages), by task id."""
        return dict(self._cards)

    @property
    def hidden(self) -> int:
        """How many tasks have no card yet (beyond the shown pages)."""
        return len(self._tasks.ids) - len(self._cards)

    @property
    def running(self) -> bool:
        """True while the polling thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def last_error(self) -> str | None:
        """The error of the last polling round, or None if it went well."""
        return self._last_error

    def card(self, task_id: str) -> TaskCard:
        """The card of a watched task; one beyond the shown pages is shown (with the pages before it)."""
        card = self._cards.get(task_id)
        if card is not None:
            return card
        ids = self._tasks.ids
        if task_id not in ids:
            raise KeyError(task_id)
        pages = ids.index(task_id) // self.page_size + 1
        self._show_cards(pages * self.page_size)
        return self._cards[task_id]

    def show_more(self) -> list[TaskCard]:
        """Build and show the next page of cards (what the "show more" button does); the new cards."""
        return self._show_cards(self._limit + self.page_size)

    def add(self, ids: Iterable[str] | str, *, v2: bool = False) -> list[str]:
        """Watch more tasks: a card each at once while the shown pages have room; polling (re)starts if autostart."""
        if isinstance(ids, str):
            ids = [ids]
        with self._lock:
            added = self._tasks.add([str(i) for i in ids], v2=v2)
            self._build_cards()
            if added and self._autostart and not self._closed:
                self._start_locked()
        self._refresh_summary()
        return added

    def poll_once(self) -> list[Record]:
        """One polling round (one batched v1 query + one per v2 song); the records that changed.

        A service error is shown in the unfinished cards and returned as [] (see `last_error`).
        """
        with self._poll_lock:
            try:
                changed = self._client.poll(self._tasks)
            except MusicGenError as exc:
                self._server_wait = _retry_after(getattr(exc, "response", None))
                self._show_poll_error(str(exc))
                return []
            self._server_wait = None
            self._show_poll_error(None)
            for record in changed:
                card = self._cards.get(record.id)
                if card is not None:
                    card.update(record)
            for card in list(self._cards.values()):
                if card.state is None or not card.state.finished:
                    card.tick()
            self._refresh_summary()
            return changed

    def start(self) -> None:
        """Start background polling (no-op if it runs, if all tasks are done, or after close())."""
        with self._lock:
            self._start_locked()

    def stop(self) -> None:
        """Stop background polling; the cards stay as they are. `start()` resumes."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop_event.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self._client.settings.timeout + 5))

    def close(self) -> None:
        """Stop polling, close the widget and its cards, and let the session forget this watcher.

        Once is enough: ipywidgets calls `close()` again when the object is collected (even at exit).
        """
        if getattr(self, "_closed", True):  # closed already, or __init__ never got that far
            return
        self._closed = True
        self.stop()
        for card in list(self._cards.values()):
            card.close()
        self._summary.close()
        self._box.close()
        self._more.close()
        super().close()
        unregister_watcher(self)

    def wait(self, timeout: float | None = None) -> list[Record]:
        """Block until every task is finished (polling itself if the thread is not running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                v1, v2 = self._tasks.unfinished()
                raise WaitTimeoutError(
                    f"{len(v1) + len(v2)} task(s) still unfinished after {timeout:.0f} s; they go on server-side.",
                    pending=v1 + v2,
                )
            pause = self.interval if remaining is None else min(self.interval, remaining)
            if self.running:
                time.sleep(min(pause, 0.2))
                continue
            self.poll_once()
            if not self.done:
                delay = backoff(pause, 0 if self._last_error is None else 1)
                time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
        return self.records

    # -- actions of finished songs (the card buttons) -------------------------------------------------

    def extend(self, task_id: str) -> GenerateForm | V2Form:
        """A form prefilled to extend a finished song (a V2Form for v2 songs); it submits into this watcher."""
        record = self._finished_record(task_id)
        v2 = isinstance(record, V2Song)
        form: GenerateForm | V2Form
        if self._form_provider is not None:
            form = self._form_provider(v2)  # e.g. the Studio's own form, already wired to this watcher
        else:
            form = V2Form(self._client) if v2 else GenerateForm(self._client)
            form.on_submitted(lambda ids: self.add(ids, v2=v2))
            self.card(task_id).show_form(form)
        form.set_values(**extend_fields(record))
        return form

    def concat(self, task_id: str) -> list[str]:
        """Merge the continuation segments of a finished v1 song; the new tasks are watched at once."""
        record = self._finished_record(task_id)
        if isinstance(record, V2Song):
            raise MusicGenError("concat is a v1 action; this is a v2 song")
        ids = list(self._client.generate(action="concat", continue_song_id=record.song_id or record.id).ids)
        self.add(ids)
        return ids

    def download(self, task_id: str, directory: str | Path | None = None) -> Path:
        """Save the final file of a finished song, named from its title; returns the path."""
        record = self._finished_record(task_id)
        return self._client.download(record, self.download_dir if directory is None else directory)

    # -- internals ------------------------------------------------------------------------------------

    def _show_cards(self, limit: int) -> list[TaskCard]:
        """Raise the number of tasks with a card to `limit`; new cards show the latest record at once.

        Holds the polling lock so a round cannot update the records between a card's build and its insertion.
        """
        with self._poll_lock, self._lock:
            if self._closed:
                return []
            self._limit = max(self._limit, limit)
            new_cards = self._build_cards()
            for card in new_cards:
                record = self._tasks.get(card.task_id)
                if record is not None:
                    card.update(record)
                if self._last_error and (card.state is None or not card.state.finished):
                    card.show_error(self._last_error)
        self._refresh_summary()
        return new_cards

    def _build_cards(self) -> list[TaskCard]:
        """Cards for the tasks up to the limit that have none yet (call with `_lock` held)."""
        ids = self._tasks.ids[len(self._cards) : self._limit]
        new_cards = [TaskCard(task_id, v2=self._tasks.is_v2(task_id), actions=self) for task_id in ids]
        for card in new_cards:
            self._cards[card.task_id] = card
        if new_cards:
            self._box.children = (*self._box.children, *new_cards)
        return new_cards

    def _front_end_closed(self, _message: Any) -> None:
        self.close()

    def _finished_record(self, task_id: str) -> Record:
        record = self._tasks.get(task_id)
        if record is None or record.state is not TaskState.COMPLETE:
            state = record.state.value if record is not None else "unknown"
            raise MusicGenError(f"task {task_id} is {state}, not complete")
        return record

    def _start_locked(self) -> None:
        if self._closed or self.running or self._tasks.all_finished:
            return
        self._stop_event = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop_event,), name="ipymusicgen-watcher", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        """The polling loop; it only ever sets widget traits."""
        failures = 0
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # a bug must not kill polling silently: show it, keep going
                self._show_poll_error(f"{type(exc).__name__}: {exc}")
            failures = 0 if self._last_error is None else failures + 1
            self._failures = failures
            with self._lock:
                if self._tasks.all_finished or stop.is_set():
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return
            delay = max(backoff(self.interval, failures), self._server_wait or 0.0) if failures else self.interval
            if failures:
                self._show_poll_error(self._last_error, retry_in=delay)
            stop.wait(delay)

    def _show_poll_error(self, message: str | None, *, retry_in: float | None = None) -> None:
        self._last_error = message
        shown = f"{message} (retrying in {retry_in:.3g} s)" if message and retry_in else message
        for card in list(self._cards.values()):
            if message is None or card.state is None or not card.state.finished:
                card.show_error(shown)
        self._refresh_summary()

    def _counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for task_id in self._tasks.ids:
            record = self._tasks.get(task_id)
            counts[record.state.value if record is not None else TaskState.PROCESSING.value] += 1
        return counts

    def _headline(self) -> str:
        counts = self._counts()
        total = sum(counts.values())
        order = [s.value for s in (TaskState.COMPLETE, TaskState.PREVIEW, TaskState.PROCESSING, TaskState.FAILED)]
        parts = ", ".join(f"{counts[s]} {s}" for s in order if counts[s])
        return f"TaskWatcher: {total} task{'s' if total != 1 else ''}" + (f" ({parts})" if parts else "")

    def _refresh_summary(self) -> None:
        text = self._headline()
        hidden = self.hidden
        if hidden:
            text += f" — cards for the first {len(self._cards)}"
        if self._last_error:
            text += " — polling error, retrying"
        self._summary.value = note_html(text)
        self._more.description = f"Show {min(hidden, self.page_size)} more ({hidden} without a card)"
        self._more.layout.display = None if hidden else "none"

    def __repr__(self) -> str:
        """Every task, card or not (a hidden task's line comes from its record)."""
        lines = [self._headline()]
        for task_id in self._tasks.ids:
            card = self._cards.get(task_id)
            lines.append(
                f"  {card.summary() if card is not None else record_summary(task_id, self._tasks.get(task_id))}"
            )
        return "\n".join(lines)
