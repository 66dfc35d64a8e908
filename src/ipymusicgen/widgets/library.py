"""`LibraryView`: the library as one anywidget: search, filters, paged song cards, takes, lineage, spend.

Python runs every query (`Library`) and builds every card (`song_data.song_card`); the browser only draws
the page it is sent and sends intents (search, filter, page, favourite, keep, lineage, refresh). A page is
one indexed LIMIT/OFFSET query with stored peaks, so 10,000 songs open as fast as 100.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..archive.archiver import archive_label
from ..archive.events import ArchiveEvents
from ..config import PaidAsk
from ..errors import MusicGenError
from ..models.tasks import STATE_WORDS
from ..song_library import Library, LibrarySong
from ..storage.errors import StorageError
from ..storage.library import LibraryWriteError
from ._static import front_end
from .card_audio import ENV_SERVER_ROOT, CardAudio, files_path
from .offered import REFUSED, Offers, allows, card_offers, controls, target_of
from .song_data import STATE_LABELS, card_summary, measure_chips, plain, song_card
from .text import TextRepr
from .watch_actions import EXTRA_ACTIONS, extra_note, extra_question

PAGE_SIZE = 24
SPEND_DAYS = 14
FILTER_KEYS = ("state", "favourite", "model", "batch")


def library_card(
    song: LibrarySong,
    audio: CardAudio | None = None,
    made: list[str] | None = None,
    measures: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A song card (the shared card dict) for a library song; `audio` (the view's) says where it plays from;
    `made`: the paid extras (wav, mp4) made before, offered as reused (nothing to pay, nothing asked); `measures`:
    the song's kept analysis (`storage.song_measures`), for its lossy-source verdict and asked-vs-measured lines."""
    on_disk = song.archive_path if song.archive_path and Path(song.archive_path).is_file() else None
    if on_disk:
        label = archive_label(Path(on_disk), None)
    elif song.archive_error:
        label = archive_label(None, song.archive_error)
    else:
        label = ""
    state = STATE_WORDS.get(song.state, "writing")
    failed = state == "failed"
    where = (
        audio.fields(song.id, path=on_disk, url=song.audio_url, created_at=song.created_at)
        if audio is not None and not failed
        else {}
    )
    card = song_card(
        None,
        id=song.id,
        call=song.call or "",
        take=song.take,
        title=song.title or "",
        style_chips=song.style or "",
        state=state,
        state_label=STATE_LABELS[state],
        duration_s=song.duration_s,
        audio_url=None if failed else song.audio_url,
        cover_url=song.cover_url,
        lyrics=song.lyrics or "",
        fail_reason=(song.fail_reason or "no reason given") if failed else "",
        model=song.model or "",
        peaks=song.peaks,
        favourite=song.favourite,
        archived_path_label=label,
        archived_path=on_disk or "",
        actions=(["export"] if on_disk else [])
        + ([*EXTRA_ACTIONS, "favourite", "copy_id"] if state == "ready" else ["copy_id"]),
        **where,
    )
    card.update(
        kept=song.kept,
        has_lineage=bool(song.parent_id) or song.action in {"extend", "concat", "upload_extend"},
        note=(song.note or "")[:500],
        archive_failed=bool(song.archive_error and not on_disk),
        stars=song.stars,
        measures=measure_chips(song.bpm, song.musical_key, song.lufs),
        extras_made=[kind for kind in (made or []) if kind in EXTRA_ACTIONS] if state == "ready" else [],
        lab_lines=lab_lines(song, measures),
    )
    return card


LAB_LINE_LIMIT = 200


def lab_lines(song: LibrarySong, measures: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The card's analysis lines (issue 41): the lossy-source verdict of the song's WAV (with its cutoff) and, for
    each tempo, key or length its request named (a length: `--seconds 90`), asked against measured. Nothing before
    the song is measured."""
    from ..lab.adherence import asked_of, compare, summary
    from ..lab.analysis import Analysis

    if not measures and song.lufs is None and song.bpm is None and song.musical_key is None:
        return []
    lines = []
    found = Analysis.from_dict({**dict(measures), "asked": None}) if measures else None  # None: damaged or forged
    if found is not None and found.lossy_checked:
        lines.append({"kind": "lossy", "text": found.lossy_verdict, "met": not found.lossy_sourced})
    measured = (
        found.as_dict()
        if found is not None
        else {"bpm": song.bpm, "key": song.musical_key, "duration_s": song.duration_s}
    )
    asked = asked_of((song.style, song.prompt, song.title), seconds=song.asked_seconds)
    for name, row in compare(asked, measured).items():
        lines.append({"kind": "adherence", "text": summary({name: row}), "met": row["met"]})
    return [
        {"kind": line["kind"], "text": plain(line["text"], LAB_LINE_LIMIT), "met": line["met"]}
        for line in lines
        if line["text"]
    ]


def flatten_lineage(tree: dict[str, Any], depth: int = 0) -> list[dict[str, Any]]:
    rows = [{k: tree[k] for k in ("id", "title", "action", "state", "current")} | {"depth": depth}]
    for child in tree["children"]:
        rows += flatten_lineage(child, depth + 1)
    return rows


class LibraryView(TextRepr, anywidget.AnyWidget):
    """Your songs: search, filter, play, favourite, choose between takes, follow extends; spend per day.

    >>> LibraryView()                 # the library of the journal in use
    >>> LibraryView(text="rain")      # opened on a search
    """

    _esm, _css = front_end("library")
    cards = traitlets.List(traitlets.Dict()).tag(sync=True)
    text = traitlets.Unicode("").tag(sync=True)
    filters = traitlets.Dict({"state": "", "favourite": False, "model": "", "batch": ""}).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    page_size = traitlets.Int(PAGE_SIZE).tag(sync=True)
    total = traitlets.Int(0).tag(sync=True)
    models = traitlets.List(traitlets.Unicode()).tag(sync=True)
    batches = traitlets.List(traitlets.Unicode()).tag(sync=True)
    lineage = traitlets.List(traitlets.Dict()).tag(sync=True)
    spend_days = traitlets.List(traitlets.Dict()).tag(sync=True)
    spend_total = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)

    # The browser only sends intents; these keep a forged state update from poisoning every later query.
    @traitlets.validate("filters")
    def _valid_filters(self, proposal: Any) -> dict[str, Any]:
        given = proposal["value"] if isinstance(proposal["value"], dict) else {}
        return {
            k: bool(given.get(k)) if k == "favourite" else (v if isinstance(v := given.get(k), str) else "")[:200]
            for k in FILTER_KEYS
        }

    @traitlets.validate("page_size")
    def _valid_page_size(self, proposal: Any) -> int:
        return max(1, min(int(proposal["value"]), 200))

    @traitlets.validate("page")
    def _valid_page(self, proposal: Any) -> int:
        return max(0, int(proposal["value"]))

    def __init__(
        self,
        library: Library | None = None,
        *,
        text: str = "",
        page_size: int = PAGE_SIZE,
        client: Any = None,
        watcher: Any = None,
    ) -> None:
        """`library` defaults to the one of `client`'s journal (the session's when no client is given);
        a `watcher` (the studio's) has its favourite button mark songs here too. A card's WAV / MP4 pays through
        `client` (the session's when none is given), asked first by the `PaidAsk` rule (`confirm_required`)."""
        super().__init__()
        self._client = client
        self.confirm_required: bool | None = None
        self.paid_ask = PaidAsk(lambda: self._extras_client().settings.needs_confirm(self.confirm_required))
        if library is None:
            from ..workspace.session import library as open_library

            path = getattr(getattr(client, "journal", None), "path", None)
            library = open_library(path) if path else open_library()
        self.library = library
        self._refresh_lock = threading.RLock()  # the archiver's thread refreshes too
        if watcher is not None:
            watcher.on_favourite = self._watcher_favourite
        self._archive_news = self._archive_events(library, client)
        # held weakly: a new song of its file shows once it is archived (another file's songs are not its to show)
        self._archive_news.subscribe(self._archived, journal=getattr(library, "path", None))
        self.audio = CardAudio(self)
        self._focus: str | None = None
        self.add_class("ipymusicgen-library-view")
        self.on_msg(self._on_msg)
        with self.hold_sync():
            self.page_size = max(1, min(int(page_size), 200))
            self.text = text
            self.refresh(everything=True)

    # -- queries -------------------------------------------------------------------------------------

    def _filter_args(self) -> dict[str, Any]:
        f = self.filters
        return {
            "text": self.text.strip() or None,
            "state": f.get("state") or None,
            "favourite": True if f.get("favourite") else None,
            "model": f.get("model") or None,
            "batch": f.get("batch") or None,
        }

    def refresh(self, everything: bool = False) -> None:
        """Query the current page again; `everything` also the filter choices and the spend summary."""
        with self._refresh_lock, self.hold_sync():
            if self._focus is not None:
                tree = flatten_lineage(self.library.lineage(self._focus))
                songs = [self.library.song(row["id"]) for row in tree if row["state"] != "unknown"]
                self.lineage = tree
                self.total = len(songs)
                self.page = 0
            else:
                args = self._filter_args()
                self.total = self.library.count(**args)
                pages = max(1, -(-self.total // self.page_size))
                self.page = max(0, min(self.page, pages - 1))
                songs = list(self.library.songs(**args, limit=self.page_size, offset=self.page * self.page_size))
                self.lineage = []
            made = (
                self.library.database.extras.made_kinds([s.id for s in songs if STATE_WORDS.get(s.state) == "ready"])
                if songs
                else {}
            )
            kept = self._kept_measures([s.id for s in songs])
            self.cards = [library_card(s, self.audio, made.get(s.id), kept.get(s.id)) for s in songs]
            self.audio.show(song.id for song in songs)  # the players of songs no longer shown answer no more
            if everything:
                self.models = self.library.models()
                self.batches = self.library.batches()
                self._refresh_spend()
            self.status = self._status_line()

    def _kept_measures(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The page's kept analyses (one query); none when the journal cannot be read now (the cards still show)."""
        try:
            return self.library.store.measures_of(ids) if ids else {}
        except (StorageError, MusicGenError):
            return {}

    def _refresh_spend(self) -> None:
        spend = self.library.spend(by="day")
        cutoff = (dt.date.today() - dt.timedelta(days=SPEND_DAYS - 1)).isoformat()
        self.spend_days = [r for r in spend.rows if r["day"] >= cutoff]
        self.spend_total = spend.total

    def _status_line(self) -> str:
        if self._focus is not None:
            return f"{self.total} song(s) in this lineage"
        if not self.total:
            return "No songs match." if self.text or any(self.filters.values()) else "No songs yet."
        first = self.page * self.page_size + 1
        return f"{first}–{min(self.total, first + self.page_size - 1)} of {self.total} song(s)"

    @staticmethod
    def _archive_events(library: Library, client: Any) -> ArchiveEvents:
        """The archive news of the view's own workspace, never another's: the workspace that opened its library
        (`Workspace.library()`), else its client's, else the session's when the library is over the session's file;
        a library of no workspace (a script's own `Library(path)`) hears nothing."""
        if library.events is not None:
            return library.events
        from ..archive.archiver import archive_of

        home = archive_of(client) if client is not None else None
        if home is not None:
            return home.events
        from ..workspace.session import current_workspace

        session = current_workspace()
        if session.path.resolve() == Path(library.path).resolve():
            return session.archive.events
        return ArchiveEvents()  # its own: no archiver announces here

    def _archived(self, _task_id: str, _path: Any, _peaks: Any, _error: Any) -> None:
        if self.comm is not None:  # a closed view no longer queries
            self.refresh(everything=True)

    def _watcher_favourite(self, task_id: str, on: bool) -> None:
        try:
            self.library.favourite(task_id, on)
        except KeyError:  # a song of another journal (a client without one): nothing to mark here
            return
        self.refresh()

    # -- intents from the browser --------------------------------------------------------------------

    def offers(self) -> Offers:
        """What the page shows now (`offered`): each card's buttons (Keep on a take beside another, Lineage when it
        has one), the bar, the pager when there is more than one page, and the lineage's way back."""
        cards = list(self.cards)
        takes = Counter(card.get("call") or card.get("id") for card in cards)

        def more(card: Mapping[str, Any]) -> list[str]:
            keep = takes[card.get("call") or card.get("id")] > 1 and card.get("state") == "ready"
            return ["keep"] * keep + ["lineage"] * bool(card.get("has_lineage"))

        found = card_offers(cards, more) | controls("search", "filter", "refresh")
        if self.lineage:
            found |= controls("lineage")  # "All songs": back from the lineage shown
        elif self.total > self.page_size:
            found |= controls("page")
        return found

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or self.audio.handle(content):  # a player asking the kernel for bytes
            return
        kind, task_id = content.get("kind"), target_of(content)
        if not allows(self.offers(), kind, task_id):  # a song or a button the page does not show: nothing done
            self.paid_ask.cancel()  # but a confirm holds for the very next press only, whatever came between
            self.status = REFUSED
            return
        if kind not in EXTRA_ACTIONS:
            self.paid_ask.cancel()  # a confirm holds for the very next press only, of the same button
        try:
            if kind in EXTRA_ACTIONS and task_id:
                self.status = self.extra_press(str(kind), task_id)
            elif kind == "search":
                self.search(str(content.get("text") or "")[:500])
            elif kind == "filter":
                values = content.get("filters") if isinstance(content.get("filters"), dict) else {}
                self.set_filters(**{k: values[k] for k in FILTER_KEYS if k in values})
            elif kind == "page":
                self.go_to_page(int(content.get("page") or 0))
            elif kind == "favourite" and task_id:
                self.library.favourite(task_id, on=not self.library.song(task_id).favourite)
                self.refresh()
            elif kind == "keep" and task_id:
                self.library.keep(task_id)
                self.refresh()
            elif kind == "export" and task_id:
                try:
                    self.status = f"Exported to {self.export(task_id)}"
                except OSError as exc:  # a full disk or a folder not ours to write: said in the view
                    self.status = f"Export failed: {str(exc)[:200]}"
            elif kind == "lineage":
                self.show_lineage(task_id or None)
            elif kind == "refresh":
                self.refresh(everything=True)
        except (KeyError, ValueError, TypeError, OverflowError) as exc:  # a forged intent: said, never raised
            self.status = f"Could not do that: {str(exc)[:200]}"
        except LibraryWriteError as exc:  # another kernel holds the journal: said, never raised from a button
            self.status = str(exc)[:400]  # "... was not saved: the journal ... cannot be written now ... Try again"
        except MusicGenError as exc:  # an extra refused or unknown: said in the view, never raised from a button
            self.status = f"{str(kind).upper()} failed: {str(exc)[:300]}"

    def _extras_client(self) -> Any:
        if self._client is None:
            from ..workspace.session import get_client

            self._client = get_client()
        return self._client

    def extra_press(self, kind: str, task_id: str) -> str:
        """A card's WAV / MP4 press: its question (price first) on a first press with a key, else the extra made
        (`archive.extras.make_extra`: paid at most once) or reused; the line the view shows."""
        from ..archive.extras import make_extra

        if STATE_WORDS.get(self.library.song(task_id).state) != "ready":
            raise ValueError(f"song {task_id} is not finished")
        client = self._extras_client()
        key = (kind, task_id)
        if not self.paid_ask.press_again(key, key, lambda _: extra_question(client, task_id, kind)):
            return self.paid_ask.question
        result = make_extra(client, task_id, kind)
        self.refresh()  # the card now offers it as made
        return extra_note(result)

    def export(self, task_id: str) -> Path:
        """Export an archived song as a folder beside the archive (`archive.export`, free); the song's folder."""
        from ..archive.export import export_songs, exports_dir_beside

        archived = self.library.song(task_id).archive_path
        if not archived:
            raise ValueError("the song is not archived, so there is nothing to export")
        (folder,) = export_songs(self.library, task_id, exports_dir_beside(Path(archived).parent))
        return folder

    def search(self, text: str) -> None:
        with self.hold_sync():
            self._focus = None
            self.text = text
            self.page = 0
            self.refresh()

    def set_filters(self, **changes: Any) -> None:
        """Filter by state ("ready", "failed", ...), favourite (bool), model or batch ("" for any)."""
        picked = {k: v for k, v in changes.items() if k in FILTER_KEYS}
        clean = {k: (bool(v) if k == "favourite" else str(v or "")[:200]) for k, v in picked.items()}
        with self.hold_sync():
            self._focus = None
            self.filters = {**self.filters, **clean}
            self.page = 0
            self.refresh()

    def go_to_page(self, page: int) -> None:
        with self.hold_sync():
            self.page = max(0, page)
            self.refresh()

    def show_lineage(self, task_id: str | None) -> None:
        """Show the extend/concat tree of a song (None: back to the search)."""
        self._focus = task_id
        self.refresh()

    def close(self) -> None:
        audio = getattr(self, "audio", None)
        if audio is not None:  # the players' names answer no more
            audio.close()
        news = getattr(self, "_archive_news", None)
        if news is not None:  # a closed view hears no more (and keeps no archiver announcing to it)
            news.unsubscribe(self._archived)
        super().close()

    def __repr__(self) -> str:
        lines = [f"Library: {self.status}"]
        lines += [f"  {card_summary(c)}" for c in self.cards[:20]]
        if len(self.cards) > 20:
            lines.append(f"  … {len(self.cards) - 20} more on this page")
        total = self.spend_total
        if total:
            lines.append(
                f"Spend: {total.get('calls', 0)} call(s), {total.get('songs', 0)} song(s),"
                f" ~{total.get('credits_estimated', 0)} credits"
            )
        return "\n".join(lines)


def library_view(text: str = "", **kwargs: Any) -> LibraryView:
    return LibraryView(text=text, **kwargs)


__all__ = ["ENV_SERVER_ROOT", "LibraryView", "files_path", "flatten_lineage", "library_card", "library_view"]
