"""`TaskWatcher`: one anywidget model for any number of v1/v2 tasks, polled in one batched query per interval.

A thin class over three parts: polling (`watch_polling`), the pages the browser is sent
(`watch_paging`) and the card buttons (`watch_actions`). This module keeps the tasks and their
cards: adding them, records fed in by someone who polls them already (a batch: `follow`, `show`),
and what others know of a song (`annotate`, the archive's word).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget

from ..archive.archiver import archive_label, archive_of
from ..client.faces import MusicClient
from ..config import PaidAsk
from ..models.schema import V2Song
from ..models.tasks import TaskSet
from ..workspace.session import register_watcher, unregister_watcher
from ._static import front_end
from .card import TaskCard
from .card_audio import CardAudio
from .offered import REFUSED, Offers, allows, card_offers, controls, target_of
from .song_data import ALL_ACTIONS, Record, card_state, plain
from .text import TextRepr
from .watch_actions import ActionsPart, extend_fields
from .watch_paging import PAGE_SIZE, PagingPart
from .watch_polling import MAX_BACKOFF, PollingPart, backoff

if TYPE_CHECKING:
    from ..batch.drivers import Batch

ANNOTATIONS = frozenset({"peaks", "archived_path_label", "archived_path", "model"})
"""Card fields `annotate()` accepts from other parts (the library's waveform and file, the model name)."""
CLOSE_JOIN = 2.0
"""Seconds `close()` waits for the polling thread: prompt even if a request hangs (the daemon thread ends after it)."""


class TaskWatcher(PollingPart, PagingPart, ActionsPart, TextRepr, anywidget.AnyWidget):
    """Watch tasks until they finish: one song card per task, polled in the background, drawn page by page.

    >>> watcher = TaskWatcher(client.generate(action="auto", style="lo-fi").ids)
    >>> watcher                      # shows the cards; records fill in as the service reports
    >>> songs = watcher.wait()       # or block until all are finished

    The takes of one call sit side by side. Newest calls come first; `page_size` calls per page.
    """

    _esm, _css = front_end("watcher")

    def __init__(
        self,
        ids: Iterable[str] = (),
        *,
        v2_ids: Iterable[str | V2Song] = (),
        client: MusicClient | None = None,
        interval: float | None = None,
        autostart: bool = True,
        request: Any = None,
        open_extend_studio: Callable[[TaskWatcher], Any] | None = None,
    ) -> None:
        """`request`: the request that made `ids`/`v2_ids`, so a failed call offers Retry (sent again as it was).
        `open_extend_studio`: how a card's Extend opens a studio whose panes send here (given by whoever builds a
        lone watcher, e.g. `widgets.studio.extend_studio`; a studio gives its own watcher its panes instead)."""
        if client is None:
            from ..workspace.session import get_client

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
        self._done_callbacks: list[Callable[[], Any]] = []
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
        self.paid_ask = PaidAsk(self._needs_confirm)
        """The paid card action (name, task id) whose confirm was just shown: the very next press sends it."""
        self._requests: dict[str, tuple[Any, bool]] = {}
        """Each call's request and whether it is v2, when the caller gave it: what a failed call's Retry sends."""
        self.hide_failed = False
        """Failed calls are left off the pages (the header still counts them)."""
        self.open_extend_studio = open_extend_studio
        self.extend_studio: Any = None
        """The studio opened for an extend when this watcher is not part of one (its panes send here)."""
        self.extend_form: Any = None
        """The pane the last extend prefilled (the studio's Song or v2 pane)."""
        self.on_favourite: Callable[[str, bool], Any] | None = None
        """Called with (task id, favourite) when a card's favourite button is pressed (e.g. by the library)."""
        self.on_keep: Callable[[str], Any] | None = None
        """Told which take was kept (default: the library of the session's journal, when it has the song)."""
        self._batch_line = ""
        self.batch_line_shown = True
        """The header says a followed batch's progress line; off under a batch view, which says it (with the ETA)."""
        self._page = 0
        self._rev = 0
        self._sent: dict[str, dict[str, Any]] = {}
        """The card dicts the browser holds (the visible page), to send only what changed."""
        self._sent_header: dict[str, Any] = {}
        self._sent_groups: list[list[str]] = []
        self.messages_sent = 0
        """How many messages went to the browser (benchmarks and tests read it)."""
        super().__init__()
        self.card_audio = CardAudio(self)
        """Where each card's player reads (a URL or the kernel's bytes by an opaque name): decided here."""
        self.add_class("ipymusicgen-watcher-view")
        self.on_msg(self._on_msg)
        if self.comm is not None:  # the front end closing the widget (e.g. the model is deleted) ends polling too
            self.comm.on_close(self._front_end_closed)
        register_watcher(self)  # so the session's shutdown() stops this thread
        home = archive_of(client)  # its client's workspace: another's songs are not news here
        self._archive_news = home.events if home is not None else None
        if self._archive_news is not None:  # held weakly: a card shows its file and waveform once archived
            self._archive_news.subscribe(self._archived)
        self.add(ids, request=request)
        self.add(v2_ids, v2=True, request=request)

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
        fields: dict[str, Any] = {"archived_path_label": archive_label(path, error), "archived_path": str(path or "")}
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

    def add(
        self,
        ids: Iterable[str | Record] | str,
        *,
        v2: bool = False,
        call: str | None = None,
        polled: bool = True,
        request: Any = None,
    ) -> list[str]:
        """Watch more tasks; polling (re)starts if autostart. Returns the ids that were new.

        The ids of one `add` are one call (shown side by side as takes) when there are at most two, or
        when `call` names it; a longer list is taken as consecutive calls of two (as v1 generate answers).
        Records (`submit_v2()`'s songs) may stand for ids: they seed the cards, so what a submit answer said
        (a v2 title, its lyrics) stays when later answers leave it empty, as the v2 query does.
        `polled=False`: someone else polls them and feeds their records in (`show`); this watcher never does.
        `request`: the request that made them, so a failed call offers Retry (it is sent again as it was).
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
                if request is not None:
                    self._requests[name] = (request, v2)
                for take, task_id in enumerate(group, 1):
                    card = TaskCard(task_id, v2=v2, call=name, take=min(take, 2), watcher=self)
                    card.retryable = request is not None
                    self._cards[task_id] = card
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
            for group, request in self._fed_calls(list(dict.fromkeys(new))):
                self.add(group, v2=v2, polled=False, request=request)
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

    def _fed_calls(self, ids: list[str]) -> list[tuple[list[str], Any]]:
        """New fed tasks as calls, each with its request: one followed batch row's songs are one call (its
        request is what a Retry sends); tasks of no known row (yet) are one group, paired as `add` pairs ids.
        Nothing new (most rounds): no rows are read."""
        if not ids:
            return []
        with self._lock:
            feeders = list(self._feeders)
        row_of = {task_id: row for batch in feeders for row in batch.rows for task_id in row.ids}
        calls: dict[int, tuple[list[str], Any]] = {}
        loose = [task_id for task_id in ids if task_id not in row_of]
        for task_id in ids:
            if (row := row_of.get(task_id)) is not None:
                calls.setdefault(id(row), ([], row.request))[0].append(task_id)
        return [*calls.values(), *([(loose, None)] if loose else [])]

    def _ordered_calls(self) -> list[list[str]]:
        """Following batches, cards follow their tables (batch by batch, row 1 first), as people read them;
        calls of no batch's come after, newest first. Called under the lock."""
        if not self._feeders:
            return super()._ordered_calls()
        position = {
            task_id: (n, row.index)
            for n, batch in enumerate(self._feeders)
            for row in batch.rows
            for task_id in row.ids
        }
        last = (len(self._feeders), 0)
        newest_first = self._calls[::-1]
        return sorted(newest_first, key=lambda group: min(position.get(task_id, last) for task_id in group))

    def close(self) -> None:
        """Stop polling, close the widget, and let the session forget this watcher.

        Once is enough: ipywidgets calls `close()` again when the object is collected (even at exit).
        """
        if getattr(self, "_closed", True):  # closed already, or __init__ never got that far
            return
        self._closed = True
        if self._archive_news is not None:  # a closed watcher hears no more
            self._archive_news.unsubscribe(self._archived)
        self.card_audio.close()
        self.stop(join=CLOSE_JOIN)  # a request in flight ends on its own; a closed watcher sends nothing
        super().close()
        unregister_watcher(self)

    def offers(self) -> Offers:
        """What the page holds now (`offered`): the visible cards' buttons (a failed call's Retry when it can be
        sent again), the pager when there are pages, Hide failed when there are failed calls, and a new snapshot."""
        with self._view_lock:
            cards = [dict(card) for card in self._sent.values()]
            header = dict(self._sent_header)
        retry = lambda card: ["retry"] if card.get("state") == "failed" and card.get("retryable") else []  # noqa: E731
        found = card_offers(cards, retry) | controls("hello")
        if header.get("pages", 1) > 1:
            found |= controls("page")
        if header.get("failed_calls") or self.hide_failed:
            found |= controls("hide_failed")
        return found

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Intents from the browser: a page or a snapshot to show, or a card action (only what the page shows)."""
        if not isinstance(content, dict) or self.card_audio.handle(content):  # a player asking for its bytes
            return
        kind = content.get("kind")
        target = target_of(content)
        if not allows(self.offers(), kind, target):  # a song or a button not on the page: nothing done
            self.paid_ask.cancel()  # but a confirm holds for the very next press only, whatever came between
            with self._view_lock:
                shown = isinstance(target, str) and target in self._sent
            if shown and target in self._cards:  # its card is on the page: said there, in one line
                self._cards[target].note = REFUSED
                self._publish([target])
            return
        if kind == "hello":
            self._send_snapshot()
        elif kind == "page":
            page = content.get("page")
            if isinstance(page, int) and not isinstance(page, bool):
                self.show_page(page)
        elif kind == "hide_failed":
            self.set_hide_failed(content.get("on") is True)
        elif kind in (*ALL_ACTIONS, "retry"):
            task_id = content.get("id")
            if isinstance(task_id, str) and task_id in self._cards:
                self.run_action(kind, task_id)

    def _shown_changed(self, task_ids: list[str]) -> None:
        audio = getattr(self, "card_audio", None)
        if audio is not None:  # only the players of the cards on the page answer
            audio.show(task_ids)

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

    def __repr__(self) -> str:
        """Every task, newest call last, one line each (text-only front ends see it all)."""
        lines = [self._headline()]
        with self._lock:
            groups = [list(group) for group in self._calls]
        for group in groups:
            for task_id in group:
                lines.append(f"  {self._cards[task_id].summary()}")
        return "\n".join(lines)


def watch_unfinished(
    client: MusicClient | None = None, *, open_extend_studio: Callable[[TaskWatcher], Any] | None = None
) -> TaskWatcher:
    """A watcher over every unfinished task in the journal for the current hosts (after a restart);
    `open_extend_studio` as `TaskWatcher`'s (the public `ipymusicgen.watch_unfinished()` gives the studio's)."""
    if client is None:
        from ..workspace.session import get_client

        client = get_client()
    found = client.unfinished()  # the shared client's journal is the session's journal
    return TaskWatcher(found.v1_ids, v2_ids=found.v2_ids, client=client, open_extend_studio=open_extend_studio)


__all__ = [
    "MAX_BACKOFF",
    "PAGE_SIZE",
    "TaskWatcher",
    "backoff",
    "extend_fields",
    "watch_unfinished",
]
