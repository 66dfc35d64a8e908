"""`LyricsForm`: lyrics from a prompt, shown escaped, handed on to a `GenerateForm` as a custom song."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..client.faces import MusicClient
from ..models.schema import LyricsResult, build_lyrics_request
from ..safe_html import esc, pre
from .form import FieldRow, Form
from .generate import GenerateForm


class LyricsForm(Form[LyricsResult]):
    """Write lyrics from a prompt; "Use in song" puts them into a GenerateForm with action=custom."""

    def __init__(self, client: MusicClient | None = None, *, target: GenerateForm | None = None) -> None:
        self._rows = {"prompt": FieldRow("prompt", w.Textarea(placeholder="what the lyrics are about", rows=2))}
        self._rows["prompt"].set_required(True)
        self._target = target
        self._result: LyricsResult | None = None
        self._used_callbacks: list[Callable[[GenerateForm], Any]] = []
        self._lyrics = w.HTML()
        self._use = w.Button(description="Use in song", icon="arrow-right", disabled=True)
        self._use.on_click(lambda _button: self.use_in_song())
        self._slot = w.VBox()
        super().__init__(client, "Write lyrics", [self._rows["prompt"]])
        self.children = (*self.children, self._lyrics, self._use, self._slot)
        self._observe_rows()
        self._changed()

    @property
    def result(self) -> LyricsResult | None:
        """The last lyrics written, or None."""
        return self._result

    @property
    def lyrics_html(self) -> str:
        return self._lyrics.value

    def values(self) -> dict[str, Any]:
        return {"prompt": self._rows["prompt"].control.value}

    def set_values(self, **fields: Any) -> None:
        unknown = sorted(set(fields) - {"prompt"})
        if unknown:
            raise TypeError(f"LyricsForm has no field(s) {', '.join(unknown)}; fields: prompt")
        if "prompt" in fields:
            self._rows["prompt"].control.value = fields["prompt"] or ""

    def on_used(self, callback: Callable[[GenerateForm], Any]) -> None:
        """Call `callback(form)` after lyrics were sent into a GenerateForm (e.g. to switch tabs)."""
        self._used_callbacks.append(callback)

    def use_in_song(self, form: GenerateForm | None = None) -> GenerateForm:
        """Send the lyrics into `form` (or the target, or a new form shown below) as a custom song."""
        if self._result is None:
            raise ValueError("No lyrics yet: write some first.")
        form = form or self._target
        if form is None:
            form = GenerateForm(self._client)
            self._slot.children = (form,)
            self._target = form
        fields: dict[str, Any] = {"action": "custom", "lyrics": self._result.text, "instrumental": False}
        current_title = form.values().get("title")
        if self._result.title and not current_title:
            fields["title"] = self._result.title
        form.set_values(**fields)
        for callback in list(self._used_callbacks):
            callback(form)
        return form

    def _build(self) -> Any:
        return build_lyrics_request(self._rows["prompt"].control.value)

    def _call_service(self, request: Any) -> LyricsResult:
        result = self._client.lyrics(request.prompt)
        self._result = result
        title = f"<b>{esc(result.title)}</b>" if result.title else ""
        self._lyrics.value = title + pre(result.text)
        self._use.disabled = False
        return result

    def _describe(self, result: LyricsResult) -> str:
        return f"{len(result.text.splitlines())} lines of lyrics"

    def __repr__(self) -> str:
        text = self._short_repr("LyricsForm", self.values())
        if self._result is not None:
            first = self._result.text.strip().splitlines()[:1]
            text += f"\n  lyrics: {self._result.title or ''!r} {first[0] if first else ''}…"
        return text
