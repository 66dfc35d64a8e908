"""What the magics return: plain values (a `str`, a `list`, rows of text) that also display nicely.

Kept apart from the magics so widgets, the library and batches can show the same tables, and so the
package has one vocabulary: "credits" for what the service calls music counts (its term,
`key_music_counts`, is named once in the key report), and one key mask (`mask_key`).
Server text is escaped by `safe_html`; only http(s) URLs become links or players.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import mask_key as mask_key  # the one key mask lives with the messages that show it
from ..models.tasks import TaskState
from ..safe_html import esc, http_url, link

if TYPE_CHECKING:
    from ..client.faces import Record
    from ..models.schema import KeyInfo
    from ..storage.journal import JournalEntry

CREDITS_WORD = "credits"
"""What users read for the service's music counts."""
CREDITS_API_TERM = "key_music_counts"
"""The service's own name for them, shown next to the number in the key report."""
URL_COLUMNS = frozenset({"audio"})
"""Columns whose values come from URL fields; any other column is text, even if it looks like a URL."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def text(value: Any) -> str:
    """A table cell: server text on one line, control characters (escape codes, line breaks) as a space."""
    return "" if value is None else _CONTROL.sub(" ", str(value))


def when(value: datetime | float | None) -> str:
    """A local date and time to the minute; empty when unknown."""
    if value is None:
        return ""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value)
    return value.strftime("%Y-%m-%d %H:%M")


def credits_text(count: int | None) -> str:
    """`1,234 credits`, or empty when the service did not say."""
    return "" if count is None else f"{count:,} {CREDITS_WORD}"


class Lyrics(str):
    """Lyrics text with its title: a `str`, so `{lyrics}` and `lyrics.splitlines()` just work."""

    title: str | None

    def __new__(cls, text: str, title: str | None = None) -> Lyrics:
        obj = super().__new__(cls, text)
        obj.title = title
        return obj

    def __getnewargs__(self) -> tuple[str, str | None]:  # type: ignore[override]
        return str(self), self.title

    def as_text(self) -> str:
        return f"{self.title}\n\n{self}" if self.title else str(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.as_text())

    def _repr_html_(self) -> str:
        title = f"<h4>{esc(self.title)}</h4>" if self.title else ""
        body = esc(str(self))
        return f'<div class="ipymusicgen-lyrics">{title}<pre style="white-space: pre-wrap">{body}</pre></div>'


class Table:
    """Rows of text with an HTML face and an aligned plain-text face; iterating gives the items."""

    def __init__(self, rows: list[dict[str, str]], items: Sequence[Any] = (), caption: str = "") -> None:
        self.rows = rows
        self.items = list(items)
        self.caption = caption

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def _columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []

    def __repr__(self) -> str:
        if not self.rows:
            return self.caption or "(nothing)"
        columns = self._columns()
        widths = {c: max(len(c), *(len(r.get(c, "")) for r in self.rows)) for c in columns}
        lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
        lines += ["  ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in self.rows]
        return "\n".join(([self.caption] if self.caption else []) + lines)

    def _repr_html_(self) -> str:
        caption = f"<caption>{esc(self.caption)}</caption>" if self.caption else ""
        if not self.rows:
            return f"<p>{esc(self.caption or '(nothing)')}</p>"
        head = "".join(f"<th>{esc(c)}</th>" for c in self._columns())
        body = "".join(
            "<tr>" + "".join(f"<td>{self._cell_html(c, r.get(c, ''))}</td>" for c in self._columns()) + "</tr>"
            for r in self.rows
        )
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def _cell_html(self, column: str, value: str) -> str:
        """Escaped text; a URL column's absolute http(s) URL becomes a link."""
        return link(value) if column in URL_COLUMNS else esc(value)


class _SongTable(Table):
    def _cell_html(self, column: str, value: str) -> str:
        """The audio column as a player (no autoplay, no loop), for http(s) URLs only."""
        url = http_url(value) if column in URL_COLUMNS else None
        if url is not None:
            return f'<audio controls preload="none" src="{esc(url)}"></audio>'
        return super()._cell_html(column, value)


class Songs(list):  # type: ignore[type-arg]
    """Finished songs (from `--wait`): a plain list of records that shows as a table with players.

    Each song is shown once: a song listed twice gets one row, and when a watcher already plays these
    songs (`shown_above`, set by the magic that displayed it) the table leaves the players out and says
    where they are. `Songs(songs)` is the same list with its own players.
    """

    def __init__(self, records: Iterable[Record] = (), *, shown_above: bool = False) -> None:
        super().__init__(records)
        self.shown_above = shown_above

    def _unique(self) -> list[Record]:
        latest: dict[str, Record] = {}
        for record in self:
            latest[record.id] = record  # a later record of the same song is the newer one
        return list(latest.values())

    def _table(self) -> Table:
        unique = self._unique()
        rows = [record_row(r) for r in unique]
        caption = f"{len(unique)} song(s)"
        if self.shown_above:
            for row in rows:
                row.pop("audio", None)
            return Table(rows, unique, caption + ", playing in the watcher above")
        return _SongTable(rows, unique, caption)

    def __repr__(self) -> str:
        return repr(self._table())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        return self._table()._repr_html_()


class KeyReport(Table):
    """Key info as a two-column table; `.info` is the `KeyInfo` (its key is a masked `SecretStr`)."""

    def __init__(self, info: KeyInfo, masked_key: str, host: str) -> None:
        self.info = info
        counts = info.key_music_counts
        fields = {
            "key name": info.key_name,
            "credits left": f"{credits_text(counts)} ({CREDITS_API_TERM})" if counts is not None else "",
            "key status code": info.key_status,  # its meaning is not documented: shown as the number
            "e-mail": info.email,
            "member id": info.member_id,
            "created": when(info.key_created_at),
            "updated": when(info.key_updated_at),
            "last used": when(info.key_recently_used_at),
            "key": masked_key,
            "service": host,
        }
        rows = [{"field": k, "value": text(v)} for k, v in fields.items()]
        super().__init__(rows, [info], caption="API key")


def _duration(record: Record) -> str:
    seconds = record.duration_seconds
    return f"{seconds:.0f}s" if seconds is not None else ""


def record_row(record: Record) -> dict[str, str]:
    """One task as a row: the audio only once the song is complete."""
    return {
        "id": text(record.id),
        "v": str(record.version),
        "state": record.state.value,
        "title": text(record.title),
        "length": _duration(record),
        "audio": text(record.audio_url) if record.state is TaskState.COMPLETE else "",
        "problem": text(record.fail_reason),
    }


def entry_row(entry: JournalEntry) -> dict[str, str]:
    """One journal entry as a row."""
    return {
        "id": text(entry.id),
        "v": str(entry.version),
        "state": entry.state,
        "started": when(entry.created_at),
        "title": text(entry.title),
        "style": text(entry.style)[:60],
        "audio": text(entry.audio_url) if entry.state == TaskState.COMPLETE.value else "",
        "saved to": text(entry.downloaded_path),
    }
