"""The stock-widget form names of earlier releases, kept as thin aliases of the studio's panes.

There is one form model: the studio's panes. `GenerateForm(client)` is the Song pane of a new studio,
and a notebook shows it as that studio opened on its tab; the other names work the same way.
"""

from __future__ import annotations

from typing import Any

from ..client.faces import MusicClient
from .studio import KeyPane, LyricsPane, SongPane, Studio, V2Pane


def _prefilled(pane: Any, values: dict[str, Any]) -> Any:
    if values:
        pane.set_values(**values)
    return pane


def GenerateForm(client: MusicClient | None = None, **values: Any) -> SongPane:
    """The Song pane of a new studio, prefilled with `values`."""
    return _prefilled(Studio(client).song, values)


def V2Form(client: MusicClient | None = None, **values: Any) -> V2Pane:
    """The v2 pane of a new studio, prefilled with `values`."""
    return _prefilled(Studio(client).v2, values)


def LyricsForm(client: MusicClient | None = None, *, target: SongPane | None = None) -> LyricsPane:
    """The Lyrics pane; "use in song" fills the Song pane of the same studio (`target`'s, when given)."""
    return (target.studio if target is not None else Studio(client)).lyrics


def KeyInfoPanel(client: MusicClient | None = None, *, load: bool = True) -> KeyPane:
    """The Key pane of a new studio, read at once unless `load=False`."""
    pane = Studio(client).key_info
    if load:
        pane.refresh()
    return pane
