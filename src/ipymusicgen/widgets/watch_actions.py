"""The watcher's actions part: what a finished song's card buttons do (extend, concat, download, ...).

A card's extend opens the studio's pane (one form model). The studio sits above the watcher, so whoever builds a
lone watcher gives it the way to open one (`open_extend_studio=`: the magics, `ipymusicgen.watch_unfinished()`,
`widgets.ui.UI`); the studio's own watcher is given its panes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..client.faces import MusicClient
from ..config import PaidAsk
from ..errors import MusicGenError
from ..models.schema import PROMPT_MAX, TITLE_MAX, V2Song
from ..models.tasks import TaskSet, TaskState
from .song_data import Record

if TYPE_CHECKING:
    from ..song_library import Library
    from .card import TaskCard

PAID_ASKS = MappingProxyType(
    {
        "concat": "Join this song's parts into one? That is a paid request: press Concat again to send.",
        "retry": "Send this request again? That is a new paid request: press Retry again to send.",
        "wav": "Pay about {price} credit(s) for this song's WAV? Made once, then kept beside the song: press WAV again "
        "to send.",
        "mp4": "Pay about {price} credit(s) for this song's MP4 video? Made once, then kept beside the song: press MP4 "
        "again to send.",
    }
)
"""Card actions that pay: with a real key (or the watcher's `confirm_required`) the first press says so, and the
very next press sends (the `PaidAsk` rule). An extra (WAV, MP4) made before, here, in another kernel or by an agent,
is reused at once: nothing to pay, nothing asked."""
EXTRA_ACTIONS = ("wav", "mp4")

NO_STUDIO = (
    "this watcher has no studio to extend in: build it with "
    "TaskWatcher(..., open_extend_studio=ipymusicgen.widgets.studio.extend_studio), or use ipymusicgen.studio()"
)
"""What a card's Extend says on a watcher made by hand without an opener (one line: what to do)."""


def extra_question(client: MusicClient, task_id: str, kind: str) -> str | None:
    """What a card's first press of an extra says (its price first), or None when it was made before (reused,
    nothing to pay): the one question of the watcher's and the library's cards."""
    from ..archive.extras import extra_price, held

    found = held(client, task_id, kind)
    if found is not None and found.state == "made":
        return None
    return PAID_ASKS[kind].format(price=extra_price(kind))


def extra_note(result: Any) -> str:
    """A card's line for an extra's outcome (`archive.extras.ExtraResult`): its note and where it is kept."""
    where = result.path or result.value or ""
    return f"{result.note}: {where}" if where else result.note


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


class ActionsPart:
    """The card buttons of finished songs; each outcome or error becomes the card's note (plain text)."""

    _client: MusicClient
    _tasks: TaskSet
    _form_provider: Callable[[bool], Any] | None
    confirm_required: bool | None
    paid_ask: PaidAsk
    _requests: dict[str, tuple[Any, bool]]
    extend_studio: Any
    open_extend_studio: Callable[[Any], Any] | None
    extend_form: Any
    download_dir: str | Path
    on_favourite: Callable[[str, bool], Any] | None
    on_keep: Callable[[str], Any] | None
    _cards: dict[str, TaskCard]
    _lock: threading.RLock
    add: Callable[..., list[str]]
    card: Callable[[str], TaskCard]
    _publish: Callable[..., None]

    def use_forms(self, forms: Callable[[bool], Any] | None) -> None:
        """Where a card's extend opens its form: `forms(v2)` gives a pane wired to this watcher (a studio that
        owns or sends into this watcher says so; None: a lone watcher opens its own studio)."""
        self._form_provider = forms

    def extend(self, task_id: str) -> Any:
        """A form prefilled to extend a finished song (the Studio's, or a new one that submits into this watcher)."""
        record = self._finished_record(task_id)
        v2 = isinstance(record, V2Song)
        if self._form_provider is None and self.open_extend_studio is not None:
            self.extend_studio = self.open_extend_studio(self)  # it gives its own panes (`use_forms`)
        if self._form_provider is None:
            raise MusicGenError(NO_STUDIO)
        form = self._form_provider(v2)  # the Studio's pane, already wired to this watcher
        form.set_values(**extend_fields(record))
        self.extend_form = form
        return form

    def concat(self, task_id: str) -> list[str]:
        """Merge the continuation segments of a finished v1 song; the new tasks are watched at once."""
        record = self._finished_record(task_id)
        if isinstance(record, V2Song):
            raise MusicGenError("concat is a v1 action; this is a v2 song")
        ids = list(self._client.generate(action="concat", continue_song_id=record.song_id or record.id).ids)
        self.add(ids)
        return ids

    def retry(self, task_id: str) -> list[str]:
        """Send a failed call's request again, as it was: a new paid call, watched here as its own call.

        The failed call stays (collapsed, marked retried). Only a call whose every take failed is retried, and
        only when its request is known here (given to `add`; a followed batch gives each row's).
        """
        cards = self._call_of(task_id)
        if any(card.state is not TaskState.FAILED for card in cards):
            raise MusicGenError("only a call whose songs all failed can be retried")
        if any(card.retried for card in cards):
            raise MusicGenError("this call was retried already: its new songs are watched here")
        found = self._requests.get(cards[0].call)
        if found is None:
            raise MusicGenError("this call's request is not known here: send it again from the studio or a magic")
        request, v2 = found
        if v2:
            ids = self.add(self._client.submit_v2(request), v2=True, request=request)
        else:
            ids = self.add(list(self._client.generate(request).ids), request=request)
        for card in cards:
            card.retried = True
        return ids

    def _needs_confirm(self) -> bool:
        return self._client.settings.needs_confirm(self.confirm_required)

    def extra(self, task_id: str, kind: str) -> Any:
        """The song's WAV or MP4, paid for at most once (`archive.extras`): made now, or reused."""
        from ..archive.extras import make_extra

        self._finished_record(task_id)
        return make_extra(self._client, task_id, kind)

    def _asks(self, name: str, task_id: str) -> str | None:
        """What the first press of a paid action says (its price first), or None when it costs nothing now."""
        if name == "concat":
            self._finished_record(task_id)  # a song that cannot be joined says so now
        if name not in EXTRA_ACTIONS:
            return PAID_ASKS[name]
        self._finished_record(task_id)  # a song not finished says so now, before any price
        return extra_question(self._client, task_id, name)

    def download(self, task_id: str, directory: str | Path | None = None) -> Path:
        """Save the final file of a finished song, named from its title; returns the path."""
        record = self._finished_record(task_id)
        return self._client.download(record, self.download_dir if directory is None else directory)

    def export(self, task_id: str) -> Path:
        """Export a finished, archived song as a folder (`archive.export`) beside the archive; the song's folder.

        Free (nothing is asked of the service), so never asked first. Read from the library of this watcher's
        client's journal (the session's when the client has none)."""
        from ..archive.export import export_songs, exports_dir_beside

        self._finished_record(task_id)
        with self._library() as opened:  # over the Database its wiring holds (and closes)
            try:
                archived = opened.song(task_id).archive_path
            except KeyError:
                raise MusicGenError("this song is not in the library, so there is nothing to export") from None
            if not archived:
                raise MusicGenError("the song is not archived yet: try again once its file is kept")
            (folder,) = export_songs(opened, task_id, exports_dir_beside(Path(archived).parent))
        return folder

    def favourite(self, task_id: str) -> bool:
        """Toggle a song's favourite mark (told to `on_favourite`, e.g. the library); the new value."""
        card = self.card(task_id)
        card.favourite = not card.favourite
        if self.on_favourite is not None:
            self.on_favourite(task_id, card.favourite)
        return card.favourite

    def keep(self, task_id: str) -> bool:
        """Choose this take of its call: marked kept, the call's other take not; the library is told when it has
        the song (True), else the choice holds in this watcher only (the free sandbox's songs, say)."""
        self._finished_record(task_id)
        chosen = self.card(task_id)
        for card in self._call_of(task_id):
            card.kept = card is chosen
        if self.on_keep is not None:
            self.on_keep(task_id)
            return True
        try:
            with self._library() as opened:  # over the Database its wiring holds (and closes)
                opened.keep(task_id)
        except KeyError:  # not a song of the library
            return False
        return True

    def _library(self) -> Library:
        """The library of this watcher's client's journal, read through the `Database` its wiring holds for that
        file (a workspace's own); the session's only for a client that keeps no journal."""
        path = getattr(getattr(self._client, "journal", None), "path", None)
        if path:
            from ..song_library import Library

            return Library(self._client.wiring.database_at(path))
        from ..workspace.session import library

        return library()

    def _call_of(self, task_id: str) -> list[TaskCard]:
        """The cards of the call a task belongs to (its takes), read under the lock polling adds cards under."""
        call = self.card(task_id).call
        with self._lock:
            return [card for card in self._cards.values() if card.call == call]

    def copy_id(self, task_id: str) -> str:
        """The ids of a song as text (task id, and song id when it differs)."""
        record = self.card(task_id).record
        song_id = getattr(record, "song_id", None) if record is not None else None
        return ", ".join(dict.fromkeys(i for i in (task_id, song_id) if i))

    def run_action(self, name: str, task_id: str) -> Any:
        """What a card button does; the outcome or the error becomes the card's note (plain text)."""
        card = self.card(task_id)
        try:
            key = (name, task_id)  # a confirm holds for the very next press only, of the same button
            asked = name in PAID_ASKS and not self.paid_ask.press_again(key, key, lambda _: self._asks(name, task_id))
            if name not in PAID_ASKS:
                self.paid_ask.cancel()
            if asked:
                card.note = self.paid_ask.question
                result = None
            elif name == "extend":
                result = self.extend(task_id)
                where = "in the studio" if self.extend_studio is None else "as `watcher.extend_studio`"
                card.note = f"Extend form ready {where}: set the options and submit."
            elif name == "concat":
                result = self.concat(task_id)
                card.note = f"Joining started: {len(result)} new song(s) below."
            elif name == "retry":
                result = self.retry(task_id)
                card.note = f"Sent again: {len(result)} new song(s), watched as their own call."
            elif name == "download":
                result = self.download(task_id)
                card.note = f"Saved to {result}"
            elif name == "export":
                result = self.export(task_id)
                card.note = f"Exported to {result}"
            elif name in EXTRA_ACTIONS:
                result = self.extra(task_id, name)
                card.note = extra_note(result)
            elif name == "favourite":
                result = self.favourite(task_id)
                card.note = "Added to favourites." if result else "Removed from favourites."
            elif name == "keep":
                result = self.keep(task_id)
                where = "kept in the library" if result else "for this session (the song is not in the library)"
                card.note = f"This take is the one to keep: {where}."
            elif name == "copy_id":
                result = self.copy_id(task_id)
                card.note = f"Id: {result}"
            else:
                raise MusicGenError(f"unknown action {name!r}")
        except Exception as exc:  # shown in the card, never as a traceback from a button
            card.note = f"{name.replace('_', ' ').capitalize()} failed: {exc}"
            result = None
        # a keep or a retry changes the call's other take too
        whole_call = name in ("keep", "retry")
        self._publish([c.task_id for c in self._call_of(task_id)] if whole_call else [task_id])
        return result

    def _finished_record(self, task_id: str) -> Record:
        record = self._tasks.get(task_id)
        if record is None or record.state is not TaskState.COMPLETE:
            state = record.state.value if record is not None else "not reported yet"
            raise MusicGenError(f"task {task_id} is {state}, not complete")
        return record
