"""`TaskWatcher`: one anywidget model for any number of v1/v2 tasks, polled in one batched query per interval.

The kernel keeps a small `TaskCard` per task and sends the browser only what it shows: a snapshot of
the visible page when a view asks for it, then one message per polling round with the fields that
changed on that page (and the header counts, when they changed). The polling thread only sends
messages (never prints or displays), so nothing it does can land in the wrong cell. It stops when
every task is finished, on `stop()`/`close()`, and backs off (exponentially, capped, at least as long
as a Retry-After asks) while the service errors, showing the error in the header.

Songs someone else already polls (a batch) are fed in instead (`follow(batch)`, `show(records)`): the
watcher draws them but never queries them itself, so one query per round serves both.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..archive.archiver import add_archive_listener, archive_label
from ..client.faces import MusicClient
from ..client.retry import MAX_POLL_BACKOFF, poll_backoff, retry_after
from ..client.waiting import wait_timeout_error
from ..errors import MusicGenError
from ..models.schema import PROMPT_MAX, TITLE_MAX, V2Song
from ..models.tasks import TaskSet, TaskState
from ..session import register_watcher, unregister_watcher
from ._static import css, esm
from .card import TaskCard
from .song_data import Record, card_state, plain
from .text import TextRepr

if TYPE_CHECKING:
    from ..batch.engine import Batch

_open_extend_studio: Callable[[TaskWatcher], Any] | None = None
"""Opens a studio whose panes send into a watcher; the studio module provides it (it sits above this one)."""


def provide_extend_studio(opener: Callable[[TaskWatcher], Any]) -> None:
    """Install how a lone watcher's extend opens a studio (called once, by `widgets/studio.py`)."""
    global _open_extend_studio
    _open_extend_studio = opener


MAX_BACKOFF = MAX_POLL_BACKOFF
backoff = poll_backoff  # the one retry policy's polling backoff (client/retry.py)
PAGE_SIZE = 10
"""Calls (a call is one paid request: usually two takes) per page; every task is polled and kept either way."""
ANNOTATIONS = frozenset({"peaks", "archived_path_label", "model"})
"""Card fields `annotate()` accepts from other parts (the library's waveform and file, the model name)."""
CLOSE_JOIN = 2.0
"""Seconds `close()` waits for the polling thread: prompt even if a request hangs (the daemon thread ends after it)."""
DIFF_FIELDS_ALWAYS = ("elapsed_s",)
"""Fields that change every second: sent with a card's other changes, never on their own (the browser counts on)."""


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


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class TaskWatcher(TextRepr, anywidget.AnyWidget):
    """Watch tasks until they finish: one song card per task, polled in the background, drawn page by page.

    >>> watcher = TaskWatcher(client.generate(action="auto", style="lo-fi").ids)
    >>> watcher                      # shows the cards; records fill in as the service reports
    >>> songs = watcher.wait()       # or block until all are finished

    The takes of one call sit side by side. Newest calls come first; `page_size` calls per page.
    """

    _esm = traitlets.Unicode(esm("watcher")).tag(sync=True)
    _css = traitlets.Unicode(css("watcher")).tag(sync=True)
    page_size = PAGE_SIZE

    def __init__(
        self,
        ids: Iterable[str] = (),
        *,
        v2_ids: Iterable[str | V2Song] = (),
        client: MusicClient | None = None,
        interval: float | None = None,
        autostart: bool = True,
    ) -> None:
        if client is None:
            from ..session import get_client

            client = get_client()
        self._client = client
        self.interval = client.settings.poll_interval_for(interval)
        self.download_dir: str | Path = "."
        self._autostart = autostart
        self._tasks = TaskSet()
        """Every task shown, with its latest record."""
        self._own = TaskSet()
        """The tasks this watcher polls itself: all but those fed in by someone who polls them (a batch)."""
        self._fed = threading.Condition()  # notified when fed records arrive or a followed batch moves
        self._feeders: list[Batch] = []
        self._cards: dict[str, TaskCard] = {}
        self._calls: list[list[str]] = []
        self._tally: Counter[str] = Counter()
        """How many tasks are in each card state (kept up to date, so a round never recounts 1,000 tasks)."""
        """Task ids grouped by paid call, oldest first (pages show them newest first)."""
        self._lock = threading.RLock()  # guards the thread handle, the calls and the start/exit decision
        self._poll_lock = threading.Lock()  # one polling round at a time
        self._view_lock = threading.RLock()  # what the browser was sent: one message at a time, in order
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._closed = False
        self._failures = 0
        self._last_error: str | None = None
        self._retry_in: float | None = None
        self._server_wait: float | None = None
        """Seconds a rate-limited service asked for (Retry-After); the thread waits at least that long."""
        self._form_provider: Callable[[bool], Any] | None = None
        """Set by the Studio: which form an extend should prefill (argument: is it a v2 song)."""
        self.confirm_required: bool | None = None
        """None: with a real key a card's concat (a paid request) asks first; True/False: always/never."""
        self._concat_asked: str | None = None
        self.extend_studio: Any = None
        """The studio opened for an extend when this watcher is not part of one (its panes send here)."""
        self.extend_form: Any = None
        """The pane the last extend prefilled (the studio's Song or v2 pane)."""
        self.on_favourite: Callable[[str, bool], Any] | None = None
        """Called with (task id, favourite) when a card's favourite button is pressed (e.g. by the library)."""
        self._batch_line = ""
        self._page = 0
        self._rev = 0
        self._sent: dict[str, dict[str, Any]] = {}
        """The card dicts the browser holds (the visible page), to send only what changed."""
        self._sent_header: dict[str, Any] = {}
        self._sent_groups: list[list[str]] = []
        self.messages_sent = 0
        """How many messages went to the browser (benchmarks and tests read it)."""
        super().__init__()
        self.add_class("ipymusicgen-watcher-view")
        self.on_msg(self._on_msg)
        if self.comm is not None:  # the front end closing the widget (e.g. the model is deleted) ends polling too
            self.comm.on_close(self._front_end_closed)
        register_watcher(self)  # so the session's shutdown() stops this thread
        add_archive_listener(self._archived)  # held weakly: a song's card shows its file and waveform once archived
        self.add(ids)
        self.add(v2_ids, v2=True)

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
        """Every task's card (kernel side: a few attributes each), by task id, in the order added."""
        return dict(self._cards)

    @property
    def running(self) -> bool:
        """True while the polling thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def last_error(self) -> str | None:
        """The error of the last polling round, or None if it went well."""
        return self._last_error

    @property
    def page(self) -> int:
        """The page the browser shows (0 = newest calls)."""
        return self._page

    @property
    def pages(self) -> int:
        return max(1, -(-len(self._calls) // self.page_size))

    @property
    def visible_ids(self) -> list[str]:
        """The task ids on the shown page, in the order drawn."""
        return [task_id for group in self._page_groups() for task_id in group]

    @property
    def batch_line(self) -> str:
        """A progress line for a batch shown in the header (set by the batch view); plain text."""
        return self._batch_line

    @batch_line.setter
    def batch_line(self, text: str) -> None:
        self._batch_line = plain(text, 300)
        self._publish([])

    def card(self, task_id: str) -> TaskCard:
        """The card of a watched task (KeyError if it is not watched)."""
        return self._cards[task_id]

    def _archived(self, task_id: str, path: Path | None, peaks: list[list[float]] | None, error: str | None) -> None:
        """The archive's word on a song (on the archiver's thread): its file's name, or why not yet, and peaks."""
        fields: dict[str, Any] = {"archived_path_label": archive_label(path, error)}
        if peaks:
            fields["peaks"] = peaks
        self.annotate(task_id, **fields)

    def annotate(self, task_id: str, **fields: Any) -> None:
        """Add what others know of a song to its card (e.g. the archive's `peaks`, `archived_path_label`,
        `favourite`); the browser gets the change in the next message. Unknown tasks are ignored."""
        card = self._cards.get(task_id)
        if card is None:
            return
        if "favourite" in fields:
            card.favourite = bool(fields.pop("favourite"))
        allowed = {k: v for k, v in fields.items() if k in ANNOTATIONS}
        if allowed:
            card.extra = {**(card.extra or {}), **allowed}
        self._publish([task_id])

    def show_page(self, page: int) -> list[str]:
        """Show page `page` (clamped); the browser gets a snapshot of it. Returns its task ids."""
        with self._view_lock:
            self._page = max(0, min(int(page), self.pages - 1))
            self._send_snapshot()
        return self.visible_ids

    def add(
        self, ids: Iterable[str | Record] | str, *, v2: bool = False, call: str | None = None, polled: bool = True
    ) -> list[str]:
        """Watch more tasks; polling (re)starts if autostart. Returns the ids that were new.

        The ids of one `add` are one call (shown side by side as takes) when there are at most two, or
        when `call` names it; a longer list is taken as consecutive calls of two (as v1 generate answers).
        Records (`submit_v2()`'s songs) may stand for ids: they seed the cards, so what a submit answer said
        (a v2 title, its lyrics) stays when later answers leave it empty, as the v2 query does.
        `polled=False`: someone else polls them and feeds their records in (`show`); this watcher never does.
        """
        items = [ids] if isinstance(ids, str) else list(ids)
        records = [item for item in items if not isinstance(item, str)]
        with self._lock:
            added = self._tasks.add([item if isinstance(item, str) else item.id for item in items], v2=v2)
            if not added:
                return []
            if polled:
                self._own.add(added, v2=v2)
            if records:  # before polling starts, so a poll's answer merges over the seed, never under it
                seeded = self._tasks.update(records)
                if polled:
                    self._own.update(records)
            size = len(added) if call is not None or len(added) <= 2 else 2
            for start in range(0, len(added), size):
                group = added[start : start + size]
                name = call or group[0]
                for take, task_id in enumerate(group, 1):
                    self._cards[task_id] = TaskCard(task_id, v2=v2, call=name, take=min(take, 2), watcher=self)
                    self._tally["queued"] += 1
                self._calls.append(group)
            if self._autostart and not self._closed:
                self._start_locked()
        if records:
            with self._poll_lock:  # a first poll may have come in meanwhile: draw the latest, not the seed
                self._apply([latest for r in seeded if (latest := self._tasks.get(r.id)) is not None])
        self._publish([])
        return added

    def show(self, records: Iterable[Record]) -> list[Record]:
        """Draw records someone else polled (a batch's round, say); the ones that changed here.

        Tasks not watched yet get cards (grouped as `add` does) and are never polled by this watcher:
        whoever handed their records in keeps doing so, so each round is read from the service once.
        """
        records = list(records)
        for v2 in (False, True):
            new = [r.id for r in records if r.id not in self._cards and isinstance(r, V2Song) is v2]
            if new:
                self.add(list(dict.fromkeys(new)), v2=v2, polled=False)
        with self._poll_lock:
            changed = self._tasks.update(records)
            self._apply(changed)
        with self._fed:
            self._fed.notify_all()
        return changed

    def follow(self, batch: Batch) -> None:
        """Show a batch's songs from the batch's own polling rounds (no query of this watcher's for them):
        each row's songs become one call's cards as the row is submitted, its progress line the header's."""
        with self._lock:
            if any(b is batch for b in self._feeders):
                return
            self._feeders.append(batch)
        batch.add_listener(self._batch_moved)
        batch.add_record_listener(self.show)
        self._batch_moved(batch)
        self.show(batch.records)  # what the batch knew before this watcher followed it

    def poll_once(self) -> list[Record]:
        """One polling round of this watcher's own tasks (one batched v1 query + one per v2 song); the records
        that changed. Tasks fed in by a batch are not queried.

        A service error is shown in the header and returned as [] (see `last_error`).
        """
        with self._poll_lock:
            try:
                polled = self._client.poll(self._own)
            except MusicGenError as exc:
                self._server_wait = retry_after(exc)
                self._show_poll_error(str(exc))
                return []
            self._server_wait = None
            self._last_error = None
            self._retry_in = None
            changed = self._tasks.update(polled)
            self._apply(changed)
            return changed

    def start(self) -> None:
        """Start background polling (no-op if it runs, if all tasks are done, or after close())."""
        with self._lock:
            self._start_locked()

    def stop(self, *, join: float | None = None) -> None:
        """Stop background polling; the cards stay as they are. `start()` resumes.

        Waits for the thread to end (at most `join` seconds; by default as long as one request may take).
        """
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop_event.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self._client.settings.timeout + 5) if join is None else join)

    def close(self) -> None:
        """Stop polling, close the widget, and let the session forget this watcher.

        Once is enough: ipywidgets calls `close()` again when the object is collected (even at exit).
        """
        if getattr(self, "_closed", True):  # closed already, or __init__ never got that far
            return
        self._closed = True
        self.stop(join=CLOSE_JOIN)  # a request in flight ends on its own; a closed watcher sends nothing
        super().close()
        unregister_watcher(self)

    def wait(self, timeout: float | None = None) -> list[Record]:
        """Block until every task is finished, with the client's own wait (same backoff, timeout and errors).

        The background thread pauses meanwhile (one poller at a time) and resumes after a timeout.
        `timeout=None` means the client's `wait_timeout` setting.
        """
        was_running = self.running
        self.stop()
        timeout = self._client.settings.wait_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        v1, v2 = self._own.unfinished()
        try:
            if v1 or v2:
                self._client.wait(v1, v2_ids=v2, timeout=timeout, interval=self.interval, on_update=self._updated)
                with self._poll_lock:
                    self._last_error = None
                    self._retry_in = None
                    self._publish([])
            self._wait_fed(deadline, timeout)
        finally:
            if was_running and not self.done:
                self.start()
        return self.records

    # -- actions of finished songs (the card buttons) -------------------------------------------------

    def extend(self, task_id: str) -> Any:
        """A form prefilled to extend a finished song (the Studio's, or a new one that submits into this watcher)."""
        record = self._finished_record(task_id)
        v2 = isinstance(record, V2Song)
        if self._form_provider is None and _open_extend_studio is not None:
            self.extend_studio = _open_extend_studio(self)  # it sets `_form_provider` to its own panes
        if self._form_provider is None:
            raise MusicGenError("extend needs the studio: `import ipymusicgen.widgets` first")
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

    def _needs_confirm(self) -> bool:
        return self._client.settings.needs_confirm(self.confirm_required)

    def download(self, task_id: str, directory: str | Path | None = None) -> Path:
        """Save the final file of a finished song, named from its title; returns the path."""
        record = self._finished_record(task_id)
        return self._client.download(record, self.download_dir if directory is None else directory)

    def favourite(self, task_id: str) -> bool:
        """Toggle a song's favourite mark (told to `on_favourite`, e.g. the library); the new value."""
        card = self.card(task_id)
        card.favourite = not card.favourite
        if self.on_favourite is not None:
            self.on_favourite(task_id, card.favourite)
        return card.favourite

    def copy_id(self, task_id: str) -> str:
        """The ids of a song as text (task id, and song id when it differs)."""
        record = self.card(task_id).record
        song_id = getattr(record, "song_id", None) if record is not None else None
        return ", ".join(dict.fromkeys(i for i in (task_id, song_id) if i))

    def run_action(self, name: str, task_id: str) -> Any:
        """What a card button does; the outcome or the error becomes the card's note (plain text)."""
        card = self.card(task_id)
        asked, self._concat_asked = self._concat_asked, None  # a confirm holds for the very next press only
        try:
            if name == "concat" and asked != task_id and self._needs_confirm():
                self._finished_record(task_id)  # a song that cannot be joined says so now
                self._concat_asked = task_id
                card.note = "Join this song's parts into one? That is a paid request: press Concat again to send."
                result = None
            elif name == "extend":
                result = self.extend(task_id)
                where = "in the studio" if self.extend_studio is None else "as `watcher.extend_studio`"
                card.note = f"Extend form ready {where}: set the options and submit."
            elif name == "concat":
                result = self.concat(task_id)
                card.note = f"Joining started: {len(result)} new song(s) below."
            elif name == "download":
                result = self.download(task_id)
                card.note = f"Saved to {result}"
            elif name == "favourite":
                result = self.favourite(task_id)
                card.note = "Added to favourites." if result else "Removed from favourites."
            elif name == "copy_id":
                result = self.copy_id(task_id)
                card.note = f"Id: {result}"
            else:
                raise MusicGenError(f"unknown action {name!r}")
        except Exception as exc:  # shown in the card, never as a traceback from a button
            card.note = f"{name.replace('_', ' ').capitalize()} failed: {exc}"
            result = None
        self._publish([task_id])
        return result

    # -- the browser ----------------------------------------------------------------------------------

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
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything the browser needs to draw the visible page (sent when a view asks)."""
        groups = self._page_groups()
        cards = {task_id: self._cards[task_id].data() for group in groups for task_id in group}
        return {
            "kind": "snapshot",
            "header": self.header(),
            "groups": [[cards[task_id] for task_id in group] for group in groups],
        }

    def _page_groups(self) -> list[list[str]]:
        with self._lock:
            newest_first = self._calls[::-1]
            start = self._page * self.page_size
            return [list(group) for group in newest_first[start : start + self.page_size]]

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
            self._sent = {card["id"]: card for group in message["groups"] for card in group}
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
                new = self._cards[task_id].data()
                changed = {k: v for k, v in new.items() if k not in DIFF_FIELDS_ALWAYS and old.get(k) != v}
                if changed:
                    changed.update({k: new[k] for k in DIFF_FIELDS_ALWAYS})
                    diffs[task_id] = changed
                    self._sent[task_id] = new
            header = self.header()
            message: dict[str, Any] = {"kind": "diff", "cards": diffs}
            if header != self._sent_header:
                message["header"] = header
                self._sent_header = header
            if diffs or "header" in message:
                self._emit(message)

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Intents from the browser: a page or a snapshot to show, or a card action."""
        if not isinstance(content, dict):
            return
        kind = content.get("kind")
        if kind == "hello":
            self._send_snapshot()
        elif kind == "page":
            page = content.get("page")
            if isinstance(page, int) and not isinstance(page, bool):
                self.show_page(page)
        elif kind in ("extend", "concat", "download", "favourite", "copy_id"):
            task_id = content.get("id")
            if isinstance(task_id, str) and task_id in self._cards:
                self.run_action(kind, task_id)

    # -- internals ------------------------------------------------------------------------------------

    def _updated(self, records: list[Record]) -> None:
        """Records from the client's wait: keep the ones that changed here, and draw them."""
        with self._poll_lock:
            self._own.update(records)  # so the thread, restarted, does not poll them again
            self._apply(self._tasks.update(records))

    def _batch_moved(self, batch: Batch) -> None:
        """A followed batch changed: cards for newly submitted rows (fed, not polled), the header's line."""
        for row in batch.rows:
            if row.ids and any(task_id not in self._cards for task_id in row.ids):
                self.add(row.ids, v2=row.v2, call=f"row {row.index}", polled=False)
        self.batch_line = batch.progress_line()
        with self._fed:
            self._fed.notify_all()

    def _wait_fed(self, deadline: float, timeout: float) -> None:
        """Wait for the fed tasks: until every batch feeding them has ended (its last round drawn), or, fed by
        `show` alone, until they are finished."""

        def settled() -> bool:
            with self._lock:
                feeders = list(self._feeders)
            return all(b.done for b in feeders) if feeders else self._tasks.all_finished

        with self._fed:
            while not settled():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise wait_timeout_error(self._tasks, timeout)
                self._fed.wait(min(remaining, 1.0))  # woken by show() or the batch; the 1 s only bounds a missed one

    def _apply(self, changed: list[Record]) -> None:
        for record in changed:
            card = self._cards.get(record.id)
            if card is not None:
                with self._lock:
                    self._tally[card_state(card.record)] -= 1
                    self._tally[card_state(record)] += 1
                card.update(record)
        self._publish(record.id for record in changed)

    def _front_end_closed(self, _message: Any) -> None:
        self.close()

    def _finished_record(self, task_id: str) -> Record:
        record = self._tasks.get(task_id)
        if record is None or record.state is not TaskState.COMPLETE:
            state = record.state.value if record is not None else "not reported yet"
            raise MusicGenError(f"task {task_id} is {state}, not complete")
        return record

    def _start_locked(self) -> None:
        if self._closed or self.running or self._own.all_finished:
            return
        self._stop_event = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop_event,), name="ipymusicgen-watcher", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        """The polling loop; it only ever sends messages to the browser."""
        failures = 0
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # a bug must not kill polling silently: show it, keep going
                self._show_poll_error(f"{type(exc).__name__}: {exc}")
            failures = 0 if self._last_error is None else failures + 1
            self._failures = failures
            with self._lock:
                if self._own.all_finished or stop.is_set():
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return
            delay = max(backoff(self.interval, failures), self._server_wait or 0.0) if failures else self.interval
            if failures:
                self._show_poll_error(self._last_error, retry_in=delay)
            stop.wait(delay)

    def _show_poll_error(self, message: str | None, *, retry_in: float | None = None) -> None:
        self._last_error = message
        self._retry_in = retry_in
        self._publish([])

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

    def __repr__(self) -> str:
        """Every task, newest call last, one line each (text-only front ends see it all)."""
        lines = [self._headline()]
        with self._lock:
            groups = [list(group) for group in self._calls]
        for group in groups:
            for task_id in group:
                lines.append(f"  {self._cards[task_id].summary()}")
        return "\n".join(lines)


def watch_unfinished(client: MusicClient | None = None) -> TaskWatcher:
    """A watcher over every unfinished task in the journal for the current hosts (after a restart)."""
    if client is None:
        from ..session import get_client

        client = get_client()
    found = client.unfinished()  # the shared client's journal is the session's journal
    return TaskWatcher(found.v1_ids, v2_ids=found.v2_ids, client=client)
