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


class TaskCard(TextRepr, w.VBox):
    """One watched task. Created once; `update(record)` only sets the traits that changed."""

    def __init__(self, task_id: str, *, v2: bool = False, actions: CardActions | None = None) -> None:
        self.task_id = task_id
        self.v2 = v2
        self._actions = actions
        self._record: Record | None = None
        self._started = time.monotonic()
        self._finished: float | None = None
        self._heading = w.HTML(f"<b>task {esc(task_id)}</b>")
        self._progress = w.IntProgress(value=0, min=0, max=3, bar_style="info", layout=w.Layout(width="160px"))
        self._state = w.HTML(note_html("waiting for the first status"))
        self._duration = w.HTML()
        self._audio_note = w.HTML()
        self._audio = w.Audio.from_url("", autoplay=False, loop=False, layout=w.Layout(display="none"))
        self._audio.add_class("ipymusicgen-player")
        self._cover = w.Image.from_url("", layout=w.Layout(display="none", width="96px", height="96px"))
        self._lyrics_html = w.HTML()
        self._lyrics = w.Accordion([self._lyrics_html], titles=("Lyrics",), selected_index=None)
        self._lyrics.layout.display = "none"
        self._failure = w.HTML()
        self._poll_error = w.HTML()
        self._buttons = {
            "extend": w.Button(description="Extend", icon="forward", tooltip="continue this song"),
            "concat": w.Button(description="Concat", icon="link", tooltip="merge its continuation segments"),
            "download": w.Button(description="Download", icon="download", tooltip="save the final file"),
            "copy": w.Button(description="Copy ids", icon="copy", tooltip="show the ids to copy"),
        }
        for name, button in self._buttons.items():
            button.on_click(lambda _button, name=name: self.run_action(name))
        self._action_bar = w.HBox(list(self._buttons.values()))
        self._ids = w.Text(value=task_id, description="ids", layout=w.Layout(display="none", width="100%"))
        self._message = w.HTML()
        self._slot = w.VBox()
        details = w.VBox(
            [
                self._heading,
                w.HBox([self._progress, self._state]),
                self._duration,
                self._audio_note,
                self._audio,
                self._failure,
                self._poll_error,
            ]
        )
        super().__init__(
            [w.HBox([self._cover, details]), self._lyrics, self._action_bar, self._ids, self._message, self._slot],
            layout=w.Layout(border="1px solid #ddd", padding="6px", margin="4px 0"),
        )
        self.add_class("ipymusicgen-task-card")  # stable hooks for styling and browser tests
        self._show_actions()

    # -- what tests and the watcher read -----------------------------------------------------------------

    @property
    def record(self) -> Record | None:
        return self._record

    @property
    def state(self) -> TaskState | None:
        return self._record.state if self._record is not None else None

    @property
    def audio(self) -> w.Audio:
        return self._audio

    @property
    def cover(self) -> w.Image:
        return self._cover

    @property
    def progress(self) -> w.IntProgress:
        return self._progress

    @property
    def audio_url(self) -> str | None:
        """The URL the player plays, or None when no player is shown."""
        if self._audio.layout.display == "none":
            return None
        return bytes(self._audio.value).decode() or None

    @property
    def html(self) -> str:
        """All HTML this card shows, joined (for checks and plain-text fallbacks)."""
        parts = [self._heading, self._state, self._duration, self._audio_note, self._lyrics_html]
        parts += [self._failure, self._poll_error, self._message]
        return "\n".join(part.value for part in parts)

    @property
    def message(self) -> str:
        return self._message.value

    @property
    def ids_text(self) -> w.Text:
        return self._ids

    @property
    def buttons(self) -> dict[str, w.Button]:
        """The action buttons by name: extend, concat, download, copy."""
        return dict(self._buttons)

    @property
    def lyrics_box(self) -> w.Accordion:
        return self._lyrics

    @property
    def form(self) -> w.Widget | None:
        """The form shown inside the card (e.g. a prefilled extend form), or None."""
        return self._slot.children[0] if self._slot.children else None

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
        self._duration.value = note_html(f"duration {duration_text(record.duration_seconds)}")
        self._update_audio(record, state)
        self._update_cover(record)
        if record.lyrics:
            self._lyrics_html.value = pre(record.lyrics)
            self._lyrics.layout.display = None
        self._failure.value = (
            error_html(f"failed: {record.fail_reason or 'no reason given'}") if state is TaskState.FAILED else ""
        )
        song_id = getattr(record, "song_id", None)
        self._ids.value = ", ".join(dict.fromkeys(i for i in (record.id, song_id) if i))
        self.tick()
        self._show_actions()

    def tick(self) -> None:
        """Refresh the elapsed time in the state line."""
        end = self._finished if self._finished is not None else time.monotonic()
        label = self.state.value if self.state is not None else "submitted"
        self._state.value = note_html(f"{label} · {elapsed_text(end - self._started)}")

    def show_error(self, message: str | None) -> None:
        """A polling error (escaped), or None to clear it once polling works again."""
        self._poll_error.value = error_html(f"polling: {message}") if message else ""

    def show_form(self, form: w.Widget) -> None:
        """Show a form (e.g. the prefilled extend form) inside the card."""
        self._slot.children = (form,)

    def run_action(self, name: str) -> Any:
        """What the action buttons do; the outcome or the error is shown (escaped) in the card."""
        if name == "copy":
            self._ids.layout.display = None
            return self._ids.value
        if self._actions is None:
            self._message.value = error_html("this card is not attached to a watcher")
            return None
        button = self._buttons[name]
        button.disabled = True
        try:
            if name == "extend":
                result = self._actions.extend(self.task_id)
                self._message.value = note_html("extend form ready: set the options and press Generate")
            elif name == "concat":
                result = self._actions.concat(self.task_id)
                self._message.value = note_html(f"concat started: {', '.join(result)}")
            else:
                result = self._actions.download(self.task_id)
                self._message.value = note_html(f"saved to {result}")
        except Exception as exc:  # shown in the card, never as a traceback
            self._message.value = error_html(f"{name} failed: {exc}")
            return None
        finally:
            button.disabled = False
        return result

    def _update_audio(self, record: Record, state: TaskState) -> None:
        url = http_url(record.audio_url) if state is not TaskState.FAILED else None
        if url is not None:
            if bytes(self._audio.value) != url.encode():
                self._audio.value = url.encode()  # the final file replaces the preview in the same player
            self._audio.layout.display = None
            final = state is TaskState.COMPLETE
            self._audio_note.value = note_html("final audio" if final else "preview (the final file will replace it)")
            return
        self._audio.layout.display = "none"
        self._audio.value = b""
        withheld = record.audio_url and state is not TaskState.FAILED
        self._audio_note.value = note_html("audio not shown: not an http(s) URL") if withheld else ""

    def _update_cover(self, record: Record) -> None:
        url = http_url(record.cover_url)
        if url is None:
            self._cover.layout.display = "none"
            self._cover.value = b""
            return
        if bytes(self._cover.value) != url.encode():
            self._cover.value = url.encode()
        self._cover.layout.display = None

    def _show_actions(self) -> None:
        complete = self.state is TaskState.COMPLETE
        for name in ("extend", "download"):
            self._buttons[name].layout.display = None if complete else "none"
        self._buttons["concat"].layout.display = None if complete and not self.v2 else "none"

    def summary(self) -> str:
        """One plain-text line: title, state, duration, audio URL."""
        record = self._record
        if record is None:
            return f"{self.task_id}: submitted, no status yet"
        url = http_url(record.audio_url) or "-"
        title = record.title or "untitled"
        return f"{title!r} [{record.state.value}] {duration_text(record.duration_seconds)} {url}"

    def __repr__(self) -> str:
        return f"TaskCard({self.task_id}: {self.summary()})"

    def close(self) -> None:
        """Close the card and every widget inside it (layout boxes and a form in it too), so no model is left behind."""
        for child in self.children:
            close_tree(child)
        super().close()


def close_tree(widget: w.Widget) -> None:
    """Close a widget and, first, everything it contains."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    widget.close()
