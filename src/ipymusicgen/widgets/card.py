"""`TaskCard`: one song's progress, player, cover, lyrics and actions, updated in place by traits."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import ipywidgets as w

from ..models import TaskRecord, V2Song
from ..safe_html import error_html, esc, http_url, note_html, pre
from ..tasks import TaskState
from .text import TextRepr

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
