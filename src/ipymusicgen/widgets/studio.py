"""`studio()`: every form in one `Tab`, with one shared `TaskWatcher` below that gets every new task."""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from ..client import MusicClient
from .card import close_tree
from .generate import GenerateForm
from .keyinfo import KeyInfoPanel
from .lyrics import LyricsForm
from .text import TextRepr
from .v2 import V2Form
from .watcher import TaskWatcher

TAB_TITLES = ("Generate", "Generate v2", "Lyrics", "Key")
GENERATE_TAB, V2_TAB, LYRICS_TAB, KEY_TAB = range(4)


class Studio(TextRepr, w.VBox):
    """The forms in tabs and one watcher; submitting from any form adds its tasks to the watcher at once."""

    def __init__(self, client: MusicClient | None = None) -> None:
        if client is None:
            from ..session import get_client

            client = get_client()
        self._client = client
        self._generate = GenerateForm(client)
        self._v2 = V2Form(client)
        self._lyrics = LyricsForm(client, target=self._generate)
        self._key_info = KeyInfoPanel(client, load=False)
        self._watcher = TaskWatcher(client=client)
        self._tabs = w.Tab([self._generate, self._v2, self._lyrics, self._key_info], titles=TAB_TITLES)
        self._generate.on_submitted(lambda ids: self._watcher.add(ids))
        self._v2.on_submitted(lambda ids: self._watcher.add(ids, v2=True))
        self._lyrics.on_used(lambda _form: self._select(GENERATE_TAB))
        self._watcher._form_provider = self._form_for_extend
        self._tabs.observe(self._tab_changed, names="selected_index")
        super().__init__([self._tabs, self._watcher])
        self.add_class("ipymusicgen-studio")

    @property
    def client(self) -> MusicClient:
        return self._client

    @property
    def generate(self) -> GenerateForm:
        return self._generate

    @property
    def v2(self) -> V2Form:
        return self._v2

    @property
    def lyrics(self) -> LyricsForm:
        return self._lyrics

    @property
    def key_info(self) -> KeyInfoPanel:
        return self._key_info

    @property
    def watcher(self) -> TaskWatcher:
        return self._watcher

    @property
    def tabs(self) -> w.Tab:
        return self._tabs

    def close(self) -> None:
        """Stop the watcher's polling and close every part."""
        self._watcher.close()
        close_tree(self._tabs)  # the forms and every field, button and box in them
        super().close()

    def _select(self, index: int) -> None:
        self._tabs.selected_index = index

    def _form_for_extend(self, v2: bool) -> GenerateForm | V2Form:
        self._select(V2_TAB if v2 else GENERATE_TAB)
        return self._v2 if v2 else self._generate

    def _tab_changed(self, change: dict[str, Any]) -> None:
        if change["new"] == KEY_TAB and self._key_info.info is None:
            self._key_info.refresh()  # read lazily: only when someone looks

    def __repr__(self) -> str:
        tabs = " | ".join(TAB_TITLES)
        return f"Studio [{tabs}]\n{self._generate!r}\n{self._watcher!r}"


def studio(client: MusicClient | None = None) -> Studio:
    """Open the studio: generate, v2, lyrics and key info in tabs, one task watcher below."""
    return Studio(client)
