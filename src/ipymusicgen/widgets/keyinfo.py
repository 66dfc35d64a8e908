"""`KeyInfoPanel`: what is left on the key in use, refreshed on demand. The key itself is never shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import ipywidgets as w

from ..client.faces import MusicClient
from ..models.schema import KeyInfo
from ..notebook.display import CREDITS_API_TERM, mask_key
from ..safe_html import error_html, esc, note_html
from .form import error_title
from .text import TextRepr


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "—"


class KeyInfoPanel(TextRepr, w.VBox):
    """Credits left, key name and dates of the key in use; "Refresh" asks the service again."""

    def __init__(self, client: MusicClient | None = None, *, load: bool = True) -> None:
        if client is None:
            from ..session import get_client

            client = get_client()
        self._client = client
        self._info: KeyInfo | None = None
        self._checked: datetime | None = None
        self._table = w.HTML(note_html("Press Refresh to read the key's credits."))
        self._error = w.HTML()
        self._button = w.Button(description="Refresh", icon="refresh")
        self._button.on_click(lambda _button: self.refresh())
        super().__init__([self._table, w.HBox([self._button]), self._error])
        self.add_class("ipymusicgen-key-info")
        if load:
            self.refresh()

    @property
    def info(self) -> KeyInfo | None:
        """The last key info read, or None."""
        return self._info

    @property
    def html(self) -> str:
        return self._table.value

    @property
    def error(self) -> str:
        return self._error.value

    def refresh(self) -> KeyInfo | None:
        """Read the key info again; errors are shown in the panel, never raised."""
        self._button.disabled = True
        try:
            info = self._client.key_info()
        except Exception as exc:  # shown in the panel, never as a traceback
            self._error.value = f"<b>{esc(error_title(exc))}</b><br>{error_html(exc)}"
            return None
        finally:
            self._button.disabled = False
        self._info = info
        self._checked = datetime.now()
        self._error.value = ""
        self._table.value = self._render(info)
        return info

    def _text(self, value: Any) -> str:
        """Escaped server text, with the key masked should the server ever echo it elsewhere."""
        return esc(self._client.redact(str(value))) if value not in (None, "") else "—"

    def _render(self, info: KeyInfo) -> str:
        counts = info.key_music_counts
        rows = [
            (f"Credits left <code>{CREDITS_API_TERM}</code>", f"<b>{esc(counts)}</b>" if counts is not None else "—"),
            ("Key name", self._text(info.key_name)),
            ("Key", esc(mask_key(self._client.settings.key_value()))),
            ("Status", self._text(info.key_status)),
            ("Created", esc(_when(info.key_created_at))),
            ("Updated", esc(_when(info.key_updated_at))),
            ("Last used", esc(_when(info.key_recently_used_at))),
            ("Checked", esc(_when(self._checked))),
        ]
        cells = "".join(
            f"<tr><th style='text-align:left; padding-right:1em'>{k}</th><td>{v}</td></tr>" for k, v in rows
        )
        return f"<table>{cells}</table>"

    def __repr__(self) -> str:
        if self._info is None:
            return "KeyInfoPanel: not read yet (call refresh())"
        info = self._info
        name = self._client.redact(info.key_name or "") or "unnamed"
        mask = mask_key(self._client.settings.key_value())
        return f"KeyInfoPanel: key {name!r} ({mask}), {info.key_music_counts} credits left ({CREDITS_API_TERM})"
