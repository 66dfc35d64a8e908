"""Baseline for the watcher benchmarks: the stock-ipywidgets watcher and card as they were before issue 16.

A copy of `widgets/card.py` and `widgets/watcher.py` at commit e9fa824 (imports made absolute; the
extend forms imported when used), kept here and not in the package, so `bench_watcher` and
`bench_memory` can compare the one-model watcher with it in the same run.
"""

# ruff: noqa

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import ipywidgets as w

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.client.retry import retry_after as _retry_after
from ipymusicgen.errors import MusicGenError, WaitTimeoutError
from ipymusicgen.models.schema import PROMPT_MAX, TITLE_MAX, TaskRecord, V2Song
from ipymusicgen.safe_html import error_html, esc, http_url, note_html, pre
from ipymusicgen.workspace.session import register_watcher, unregister_watcher
from ipymusicgen.models.tasks import TaskSet, TaskState
from ipymusicgen.widgets.text import TextRepr

Record = TaskRecord | V2Song

PROGRESS = {TaskState.PROCESSING: 1, TaskState.PREVIEW: 2, TaskState.COMPLETE: 3, TaskState.FAILED: 3}
BAR_STYLE = {TaskState.PROCESSING: "info", TaskState.PREVIEW: "info", TaskState.COMPLETE: "success"}
BAR_STYLE[TaskState.FAILED] = "danger"


class CardActions(Protocol):
    """What a card's buttons ask of its watcher (which owns the client)."""

    def extend(self, task_id: str) -> Any: ...
    def concat(self, task_id: str) -> list[str]: ...
    def download(self, task_id: str, directory: str | Path | None = None) -> Path: ...


def elapsed_text(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def duration_text(seconds: float | None) -> str:
    return f"{seconds:.1f} s" if seconds is not None else "—"


DETAILS = ("heading", "status", "info", "audio", "failure", "poll_error")
"""The parts of a card's details column, in the order they show; most are built only when first needed."""
BODY = ("top", "lyrics", "actions", "ids", "message", "slot")
"""The rows of a card, in order."""
SONG_ACTIONS = ("extend", "concat", "download")
"""Buttons built when the song completes (or when asked for); "copy" is always there."""
HTML_PARTS = ("heading", "state", "info", "lyrics_html", "failure", "poll_error", "message")
"""The HTML parts `TaskCard.html` joins, in order."""


class TaskCard(TextRepr, w.VBox):
    """One watched task. Created once; `update(record)` only sets the traits that changed.

    A card starts small (heading, progress, state, a "Copy ids" button) and builds the rest when the
    task first needs it: the player with the first http(s) audio URL, the cover with an image, the
    lyrics with lyrics, the song buttons on completion. Every widget is a comm and ~5 KB of kernel
    memory, and most tasks of a big watcher never need most parts.
    """

    def __init__(self, task_id: str, *, v2: bool = False, actions: CardActions | None = None) -> None:
        self.task_id = task_id
        self.v2 = v2
        self._actions = actions
        self._record: Record | None = None
        self._started = time.monotonic()
        self._finished: float | None = None
        self._parts: dict[str, w.Widget] = {}
        self._heading = w.HTML(f"<b>task {esc(task_id)}</b>")
        self._progress = w.IntProgress(value=0, min=0, max=3, bar_style="info", layout=w.Layout(width="160px"))
        self._state = w.HTML(note_html("waiting for the first status"))
        self._details = w.VBox()
        self._top = w.HBox([self._details])
        self._buttons: dict[str, w.Button] = {}
        self._action_bar = w.HBox()
        self._add_button("copy", "Copy ids", "copy", "show the ids to copy")
        self._place("heading", self._heading)
        self._place("status", w.HBox([self._progress, self._state]))
        super().__init__(layout=w.Layout(border="1px solid #ddd", padding="6px", margin="4px 0"))
        self._place("top", self._top)
        self._place("actions", self._action_bar)
        self.add_class("ipymusicgen-task-card")  # stable hooks for styling and browser tests

    # -- building parts when first needed ------------------------------------------------------------

    def _place(self, name: str, widget: w.Widget) -> w.Widget:
        """Put a new part in its row (details column or card body), keeping the fixed order."""
        self._parts[name] = widget
        box, order = (self._details, DETAILS) if name in DETAILS else (self, BODY)
        box.children = tuple(self._parts[n] for n in order if n in self._parts)
        return widget

    def _html(self, name: str) -> w.HTML:
        part = self._parts.get(name)
        return part if isinstance(part, w.HTML) else self._place(name, w.HTML())  # type: ignore[return-value]

    def _set_html(self, name: str, value: str) -> None:
        """Set an HTML part; clearing one that was never built builds nothing."""
        if value or name in self._parts:
            self._html(name).value = value

    def _html_value(self, name: str) -> str:
        if name in ("heading", "state"):
            return str(getattr(self, f"_{name}").value)
        if name == "lyrics_html":
            return str(self._lyrics_html.value) if "lyrics" in self._parts else ""
        part = self._parts.get(name)
        return str(part.value) if part is not None else ""

    def _add_button(self, name: str, description: str, icon: str, tooltip: str) -> None:
        button = w.Button(description=description, icon=icon, tooltip=tooltip)
        button.on_click(lambda _button: self.run_action(name))
        self._buttons[name] = button
        order = (*SONG_ACTIONS, "copy")
        self._action_bar.children = tuple(self._buttons[n] for n in order if n in self._buttons)

    def _song_buttons(self) -> None:
        """The extend/concat/download buttons, built once (hidden until the song is complete)."""
        if "extend" in self._buttons:
            return
        self._add_button("extend", "Extend", "forward", "continue this song")
        self._add_button("concat", "Concat", "link", "merge its continuation segments")
        self._add_button("download", "Download", "download", "save the final file")
        self._show_actions()

    def _player(self) -> w.Audio:
        if "audio" not in self._parts:
            audio = w.Audio.from_url("", autoplay=False, loop=False, layout=w.Layout(display="none"))
            audio.add_class("ipymusicgen-player")
            self._place("audio", audio)
        return self._parts["audio"]  # type: ignore[return-value]

    def _cover_image(self) -> w.Image:
        if self._top.children[0] is self._details:
            cover = w.Image.from_url("", layout=w.Layout(display="none", width="96px", height="96px"))
            self._top.children = (cover, self._details)
        return self._top.children[0]  # type: ignore[return-value]

    def _lyrics_accordion(self) -> w.Accordion:
        if "lyrics" not in self._parts:
            self._lyrics_html = w.HTML()
            accordion = w.Accordion([self._lyrics_html], titles=("Lyrics",), selected_index=None)
            accordion.layout.display = "none"
            self._place("lyrics", accordion)
        return self._parts["lyrics"]  # type: ignore[return-value]

    def _ids_text(self) -> w.Text:
        if "ids" not in self._parts:
            text = w.Text(value=self._ids_value(), description="ids", layout=w.Layout(display="none", width="100%"))
            self._place("ids", text)
        return self._parts["ids"]  # type: ignore[return-value]

    def _ids_value(self) -> str:
        record = self._record
        if record is None:
            return self.task_id
        song_id = getattr(record, "song_id", None)
        return ", ".join(dict.fromkeys(i for i in (record.id, song_id) if i))

    # -- what tests and the watcher read -----------------------------------------------------------------

    @property
    def record(self) -> Record | None:
        return self._record

    @property
    def state(self) -> TaskState | None:
        return self._record.state if self._record is not None else None

    @property
    def audio(self) -> w.Audio:
        """The player (built, hidden, on first use if no audio has arrived yet)."""
        return self._player()

    @property
    def cover(self) -> w.Image:
        """The cover image (built, hidden, on first use if no image has arrived yet)."""
        return self._cover_image()

    @property
    def progress(self) -> w.IntProgress:
        return self._progress

    @property
    def audio_url(self) -> str | None:
        """The URL the player plays, or None when no player is shown."""
        audio = self._parts.get("audio")
        if audio is None or audio.layout.display == "none":
            return None
        return bytes(audio.value).decode() or None

    @property
    def html(self) -> str:
        """All HTML this card shows, joined (for checks and plain-text fallbacks)."""
        return "\n".join(self._html_value(name) for name in HTML_PARTS)

    @property
    def message(self) -> str:
        return self._html_value("message")

    @property
    def ids_text(self) -> w.Text:
        return self._ids_text()

    @property
    def buttons(self) -> dict[str, w.Button]:
        """The action buttons by name: extend, concat, download, copy (the song buttons are built on first use)."""
        self._song_buttons()
        return dict(self._buttons)

    @property
    def lyrics_box(self) -> w.Accordion:
        return self._lyrics_accordion()

    @property
    def form(self) -> w.Widget | None:
        """The form shown inside the card (e.g. a prefilled extend form), or None."""
        slot = self._parts.get("slot")
        return slot.children[0] if slot is not None and slot.children else None

    # -- updates ----------------------------------------------------------------------------------------

    def update(self, record: Record) -> None:
        """Show a new record of this task; only traits whose value changed send anything."""
        self._record = record
        state = record.state
        if state.finished and self._finished is None:
            self._finished = time.monotonic()
        style = f" · {esc(record.style)}" if record.style else ""
        self._heading.value = f"<b>{esc(record.title or 'untitled')}</b>{style}"
        self._progress.value = PROGRESS[state]
        self._progress.bar_style = BAR_STYLE[state]
        audio_note = self._update_audio(record, state)
        info = " · ".join(filter(None, (f"duration {duration_text(record.duration_seconds)}", audio_note)))
        self._set_html("info", note_html(info))  # one line, one widget: every widget costs a comm
        self._update_cover(record)
        if record.lyrics:
            self._lyrics_accordion()
            self._lyrics_html.value = pre(record.lyrics)
            self._parts["lyrics"].layout.display = None
        failed = state is TaskState.FAILED
        self._set_html("failure", error_html(f"failed: {record.fail_reason or 'no reason given'}") if failed else "")
        if "ids" in self._parts:
            self._ids_text().value = self._ids_value()
        self.tick()
        if state is TaskState.COMPLETE:
            self._song_buttons()
        self._show_actions()

    def tick(self) -> None:
        """Refresh the elapsed time in the state line."""
        end = self._finished if self._finished is not None else time.monotonic()
        label = self.state.value if self.state is not None else "submitted"
        self._state.value = note_html(f"{label} · {elapsed_text(end - self._started)}")

    def show_error(self, message: str | None) -> None:
        """A polling error (escaped), or None to clear it once polling works again."""
        self._set_html("poll_error", error_html(f"polling: {message}") if message else "")

    def show_form(self, form: w.Widget) -> None:
        """Show a form (e.g. the prefilled extend form) inside the card."""
        slot = self._parts.get("slot") or self._place("slot", w.VBox())
        slot.children = (form,)

    def run_action(self, name: str) -> Any:
        """What the action buttons do; the outcome or the error is shown (escaped) in the card."""
        if name == "copy":
            ids = self._ids_text()
            ids.value = self._ids_value()
            ids.layout.display = None
            return ids.value
        if self._actions is None:
            self._set_html("message", error_html("this card is not attached to a watcher"))
            return None
        button = self.buttons[name]
        button.disabled = True
        try:
            if name == "extend":
                result = self._actions.extend(self.task_id)
                self._set_html("message", note_html("extend form ready: set the options and press Generate"))
            elif name == "concat":
                result = self._actions.concat(self.task_id)
                self._set_html("message", note_html(f"concat started: {', '.join(result)}"))
            else:
                result = self._actions.download(self.task_id)
                self._set_html("message", note_html(f"saved to {result}"))
        except Exception as exc:  # shown in the card, never as a traceback
            self._set_html("message", error_html(f"{name} failed: {exc}"))
            return None
        finally:
            button.disabled = False
        return result

    def _update_audio(self, record: Record, state: TaskState) -> str:
        """Show the record's audio in the player (built on the first http(s) URL); returns a note on it."""
        url = http_url(record.audio_url) if state is not TaskState.FAILED else None
        if url is not None:
            audio = self._player()
            if bytes(audio.value) != url.encode():
                audio.value = url.encode()  # the final file replaces the preview in the same player
            audio.layout.display = None
            return "final audio" if state is TaskState.COMPLETE else "preview (the final file will replace it)"
        if "audio" in self._parts:
            self._parts["audio"].layout.display = "none"
            self._parts["audio"].value = b""
        withheld = record.audio_url and state is not TaskState.FAILED
        return "audio not shown: not an http(s) URL" if withheld else ""

    def _update_cover(self, record: Record) -> None:
        url = http_url(record.cover_url)
        if url is None:
            if self._top.children[0] is not self._details:
                self._cover_image().layout.display = "none"
                self._cover_image().value = b""
            return
        cover = self._cover_image()
        if bytes(cover.value) != url.encode():
            cover.value = url.encode()
        cover.layout.display = None

    def _show_actions(self) -> None:
        if "extend" not in self._buttons:
            return
        complete = self.state is TaskState.COMPLETE
        for name in ("extend", "download"):
            self._buttons[name].layout.display = None if complete else "none"
        self._buttons["concat"].layout.display = None if complete and not self.v2 else "none"

    def summary(self) -> str:
        """One plain-text line: title, state, duration, audio URL."""
        return record_summary(self.task_id, self._record)

    def __repr__(self) -> str:
        return f"TaskCard({self.task_id}: {self.summary()})"

    def close(self) -> None:
        """Close the card and every widget inside it (layout boxes and a form in it too), so no model is left behind."""
        for child in self.children:
            close_tree(child)
        super().close()


def record_summary(task_id: str, record: Record | None) -> str:
    """One plain-text line for a task (with a card or not): title, state, duration, audio URL."""
    if record is None:
        return f"{task_id}: submitted, no status yet"
    url = http_url(record.audio_url) or "-"
    title = record.title or "untitled"
    return f"{title!r} [{record.state.value}] {duration_text(record.duration_seconds)} {url}"


def close_tree(widget: w.Widget) -> None:
    """Close a widget and, first, everything it contains."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    widget.close()


# ---- watcher.py ----

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
            from ipymusicgen.workspace.session import get_client

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
        self._form_provider: Callable[[bool], Any] | None = None
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

    def extend(self, task_id: str) -> Any:
        """A form prefilled to extend a finished song (a V2Form for v2 songs); it submits into this watcher."""
        record = self._finished_record(task_id)
        v2 = isinstance(record, V2Song)
        if self._form_provider is not None:
            form = self._form_provider(v2)  # e.g. the Studio's own form, already wired to this watcher
        else:
            from ipymusicgen.widgets import Studio

            panes = Studio(self._client)
            form = panes.v2 if v2 else panes.song
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
